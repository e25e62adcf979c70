package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/canonb64"
)

// Limits of a JWKS. A set is at most maxJWKSBytes; keys beyond maxKeys are
// an error, not a truncation, so that no key is dropped silently.
const (
	maxJWKSBytes = 1 << 20
	maxKeys      = 256
	minRSABits   = 2048
	maxRSABits   = 8192
)

// errNoKeys is returned for a set with no key this package can use.
var errNoKeys = errors.New("oauth: jwks: no usable signature key (RSA, EC P-256/P-384 or Ed25519, with a kid)")

// Key is one public signature key of a JWKS.
type Key struct {
	// ID is the key's kid.
	ID string
	// Alg is the key's alg, or "" when the set does not pin one.
	Alg string
	// Public is an *rsa.PublicKey, *ecdsa.PublicKey (P-256 or P-384) or
	// ed25519.PublicKey.
	Public crypto.PublicKey
}

// KeySet is a decoded JSON Web Key Set (RFC 7517): the keys that can
// verify a signature, by kid.
type KeySet struct {
	keys map[string][]Key
	// Skipped counts the set's entries that are not usable signature keys
	// (encryption keys, symmetric keys, other curves, malformed entries).
	Skipped int
}

// jwk is the members of a JSON Web Key this package reads.
type jwk struct {
	Kty    string   `json:"kty"`
	Kid    string   `json:"kid"`
	Alg    string   `json:"alg"`
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
	Crv    string   `json:"crv"`
	N      string   `json:"n"`
	E      string   `json:"e"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
}

// ParseJWKS decodes a JWKS. Entries that are not public signature keys of
// a supported type are skipped and counted; a set with none left, a set
// larger than 1 MiB or with more than 256 keys is an error.
func ParseJWKS(data []byte) (*KeySet, error) {
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("oauth: jwks: %d bytes, more than %d", len(data), maxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("oauth: jwks: %w", err)
	}
	if len(doc.Keys) > maxKeys {
		return nil, fmt.Errorf("oauth: jwks: %d keys, more than %d", len(doc.Keys), maxKeys)
	}
	s := &KeySet{keys: map[string][]Key{}}
	for _, raw := range doc.Keys {
		var j jwk
		if json.Unmarshal(raw, &j) != nil {
			s.Skipped++
			continue
		}
		k, err := j.key()
		if err != nil {
			s.Skipped++
			continue
		}
		s.keys[k.ID] = append(s.keys[k.ID], k)
	}
	if len(s.keys) == 0 {
		return nil, errNoKeys
	}
	return s, nil
}

// Len is the number of usable keys.
func (s *KeySet) Len() int {
	n := 0
	for _, ks := range s.keys {
		n += len(ks)
	}
	return n
}

// Has reports whether the set holds a key with this kid.
func (s *KeySet) Has(kid string) bool {
	return s != nil && len(s.keys[kid]) > 0
}

// Lookup returns the keys with this kid that can verify alg: those whose
// type and curve suit alg and whose own alg, when set, is alg.
func (s *KeySet) Lookup(kid, alg string) []crypto.PublicKey {
	if s == nil {
		return nil
	}
	var out []crypto.PublicKey
	for _, k := range s.keys[kid] {
		if (k.Alg == "" || k.Alg == alg) && suits(k.Public, alg) {
			out = append(out, k.Public)
		}
	}
	return out
}

// suits reports whether pub is the kind of key alg verifies with.
func suits(pub crypto.PublicKey, alg string) bool {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		return (alg == "ES256" && k.Curve == elliptic.P256()) || (alg == "ES384" && k.Curve == elliptic.P384())
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// key decodes one entry into a usable signature key.
func (j jwk) key() (Key, error) {
	switch {
	case j.Kid == "" || len(j.Kid) > maxKidBytes:
		return Key{}, fmt.Errorf("kid missing or longer than %d bytes", maxKidBytes)
	case j.Use != "" && j.Use != "sig":
		return Key{}, fmt.Errorf("use %q: not a signature key", j.Use)
	case j.KeyOps != nil && !slices.Contains(j.KeyOps, "verify"):
		return Key{}, errors.New("key_ops: no verify")
	case j.Alg != "" && !slices.Contains(supportedAlgorithms, j.Alg):
		return Key{}, fmt.Errorf("alg %q: not a supported signature algorithm", j.Alg)
	}
	var pub crypto.PublicKey
	var err error
	switch j.Kty {
	case "RSA":
		pub, err = j.rsa()
	case "EC":
		pub, err = j.ec()
	case "OKP":
		pub, err = j.okp()
	default:
		return Key{}, fmt.Errorf("kty %q: not supported", j.Kty)
	}
	if err != nil {
		return Key{}, err
	}
	if j.Alg != "" && !suits(pub, j.Alg) {
		return Key{}, fmt.Errorf("alg %q does not suit a %s key", j.Alg, j.Kty)
	}
	return Key{ID: j.Kid, Alg: j.Alg, Public: pub}, nil
}

func (j jwk) rsa() (*rsa.PublicKey, error) {
	n, err := b64(j.N, 0)
	if err != nil {
		return nil, fmt.Errorf("n: %w", err)
	}
	e, err := b64(j.E, 0)
	if err != nil || len(e) == 0 || len(e) > 4 {
		return nil, errors.New("e: want 1 to 4 bytes")
	}
	mod := new(big.Int).SetBytes(n)
	exp := new(big.Int).SetBytes(e)
	if bits := mod.BitLen(); bits < minRSABits || bits > maxRSABits {
		return nil, fmt.Errorf("n: %d bits, want %d to %d", bits, minRSABits, maxRSABits)
	}
	if !exp.IsInt64() || exp.Int64() < 3 || exp.Int64() > 1<<31-1 || exp.Bit(0) == 0 {
		return nil, errors.New("e: want an odd exponent from 3 to 2^31-1")
	}
	return &rsa.PublicKey{N: mod, E: int(exp.Int64())}, nil
}

func (j jwk) ec() (*ecdsa.PublicKey, error) {
	var curve elliptic.Curve
	var size int
	switch j.Crv {
	case "P-256":
		curve, size = elliptic.P256(), 32
	case "P-384":
		curve, size = elliptic.P384(), 48
	default:
		return nil, fmt.Errorf("crv %q: not supported", j.Crv)
	}
	x, err := b64(j.X, size)
	if err != nil {
		return nil, fmt.Errorf("x: %w", err)
	}
	y, err := b64(j.Y, size)
	if err != nil {
		return nil, fmt.Errorf("y: %w", err)
	}
	// ParseUncompressedPublicKey refuses a point that is not on the curve.
	return ecdsa.ParseUncompressedPublicKey(curve, slices.Concat([]byte{4}, x, y))
}

func (j jwk) okp() (ed25519.PublicKey, error) {
	if j.Crv != "Ed25519" {
		return nil, fmt.Errorf("crv %q: not supported", j.Crv)
	}
	x, err := b64(j.X, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("x: %w", err)
	}
	return ed25519.PublicKey(x), nil
}

// b64 decodes base64url without padding (RFC 7515), of exactly size
// bytes unless size is 0.
func b64(s string, size int) ([]byte, error) {
	b, err := canonb64.RawURL(s)
	if err != nil {
		return nil, err
	}
	if size > 0 && len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	return b, nil
}
