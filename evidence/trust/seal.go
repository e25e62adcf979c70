package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"

	"github.com/toolgate/toolgate/internal/canonb64"
)

// Seal algorithms.
const (
	AlgEd25519 = "ed25519"
	AlgHMAC    = "hmac-sha256"
)

// ErrTampered is wrapped by every error Open returns for a record that is
// not what a trusted gateway wrote.
var ErrTampered = errors.New("evidence tampering")

// ErrUnsealed is wrapped (beside ErrTampered) when a record carries no seal.
var ErrUnsealed = errors.New("the record carries no seal")

// ErrUntrustedKey is wrapped (beside ErrTampered) when a record is sealed
// by a key the keyring does not trust.
var ErrUntrustedKey = errors.New("the record is sealed by a key that is not trusted")

// sealDomain starts every sealed message, so that a seal can never be
// taken for a manifest signature or a checkpoint signature made by the
// same key.
const sealDomain = "toolgate-record-seal-v1\n"

// sealMember introduces the seal, the last member of a sealed object.
const sealMember = `"seal":`

// Seal is a record's seal as stored.
type Seal struct {
	Algorithm string `json:"alg"`
	KeyID     string `json:"key_id"`
	Value     string `json:"value"`
}

// message is what a seal of key's record with body covers.
func message(key string, body []byte) []byte {
	msg := make([]byte, 0, len(sealDomain)+len(key)+1+len(body))
	msg = append(msg, sealDomain...)
	msg = append(msg, key...)
	msg = append(msg, '\n')
	return append(msg, body...)
}

// Ed25519KeyID returns the id of an Ed25519 public key: "ed25519:" and
// the first 16 hex digits of its SHA-256, as manifests name their key.
func Ed25519KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:])[:16]
}

// macKeyID returns the id of a MAC key: it names the key without telling
// anything about it.
func macKeyID(key []byte) string {
	sum := sha256.Sum256(append([]byte("toolgate record mac key id\n"), key...))
	return "hmac:" + hex.EncodeToString(sum[:])[:16]
}

// Sealer seals records with one gateway's keys. It is safe for concurrent
// use.
type Sealer struct {
	key    ed25519.PrivateKey
	keyID  string
	mac    []byte
	macID  string
	public ed25519.PublicKey
	// hmacs holds HMAC states keyed with mac, reset for each use: a
	// call seals several records, and a fresh state costs four
	// allocations.
	hmacs sync.Pool
}

// NewSealer returns a Sealer that signs with key and MACs with macKey
// (at least 32 bytes).
func NewSealer(key ed25519.PrivateKey, macKey []byte) (*Sealer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("trust: signing key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if len(macKey) < 32 {
		return nil, fmt.Errorf("trust: MAC key is %d bytes, want at least 32", len(macKey))
	}
	pub := key.Public().(ed25519.PublicKey)
	s := &Sealer{key: key, keyID: Ed25519KeyID(pub), mac: bytes.Clone(macKey), macID: macKeyID(macKey), public: pub}
	s.hmacs.New = func() any { return hmac.New(sha256.New, s.mac) }
	return s, nil
}

// PublicKey is the key that checks the Sealer's signatures.
func (s *Sealer) PublicKey() ed25519.PublicKey { return s.public }

// MACKey is the key that checks the Sealer's MACs.
func (s *Sealer) MACKey() []byte { return s.mac }

// Sign returns body, a record's JSON object as it will be stored under
// key, with an Ed25519 seal appended.
func (s *Sealer) Sign(key string, body []byte) ([]byte, error) {
	return appendSeal(body, func(b []byte) Seal {
		sig := ed25519.Sign(s.key, message(key, b))
		return Seal{Algorithm: AlgEd25519, KeyID: s.keyID, Value: base64.StdEncoding.EncodeToString(sig)}
	})
}

// MAC returns body with an HMAC-SHA256 seal appended.
func (s *Sealer) MAC(key string, body []byte) ([]byte, error) {
	return appendSeal(body, func(b []byte) Seal {
		h := s.hmacs.Get().(hash.Hash)
		defer s.hmacs.Put(h)
		h.Reset()
		var sum [sha256.Size]byte
		return Seal{Algorithm: AlgHMAC, KeyID: s.macID, Value: base64.StdEncoding.EncodeToString(writeMessage(h, key, b).Sum(sum[:0]))}
	})
}

// writeMessage writes what a seal of key's record with body covers into
// h, as message lays it out, and returns h.
func writeMessage(h hash.Hash, key string, body []byte) hash.Hash {
	h.Write([]byte(sealDomain))
	h.Write([]byte(key))
	h.Write([]byte{'\n'})
	h.Write(body)
	return h
}

func mac(k []byte, key string, body []byte) []byte {
	return writeMessage(hmac.New(sha256.New, k), key, body).Sum(nil)
}

// appendSeal seals the object body (trailing white space allowed and
// kept) with the seal sealFor returns for its bytes.
func appendSeal(body []byte, sealFor func([]byte) Seal) ([]byte, error) {
	obj, tail := splitTail(body)
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, errors.New("trust: only a JSON object can be sealed")
	}
	if _, s, _ := Split(body); s != nil {
		return nil, errors.New("trust: the record is sealed already")
	}
	seal := encodeSeal(sealFor(obj))
	out := make([]byte, 0, len(body)+len(seal)+16)
	out = append(out, obj[:len(obj)-1]...)
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(out, sealMember...)
	out = append(out, seal...)
	out = append(out, '}')
	return append(out, tail...), nil
}

// encodeSeal is json.Marshal(s), which Split requires of a seal, for
// the values a Sealer writes: none needs escaping.
func encodeSeal(s Seal) []byte {
	out := make([]byte, 0, 32+len(s.Algorithm)+len(s.KeyID)+len(s.Value))
	out = append(out, `{"alg":"`...)
	out = append(out, s.Algorithm...)
	out = append(out, `","key_id":"`...)
	out = append(out, s.KeyID...)
	out = append(out, `","value":"`...)
	out = append(out, s.Value...)
	return append(out, `"}`...)
}

// splitTail splits trailing white space off data.
func splitTail(data []byte) (obj, tail []byte) {
	trimmed := bytes.TrimRight(data, " \t\r\n")
	return trimmed, data[len(trimmed):]
}

// Split returns the record data without its seal, and the seal; seal is
// nil when data carries none (body is then data). It checks nothing: a
// reader that only shows a record uses it; one that acts on it uses a
// Keyring's Open. A seal is recognised only in the exact form the Sealer
// writes it, as the object's last member.
func Split(data []byte) (body []byte, seal *Seal, err error) {
	obj, tail := splitTail(data)
	i := bytes.LastIndex(obj, []byte(sealMember))
	if i < 0 || len(obj) == 0 || obj[len(obj)-1] != '}' {
		return data, nil, nil
	}
	var s Seal
	raw := obj[i+len(sealMember) : len(obj)-1]
	if err := decodeSeal(raw, &s); err != nil {
		return data, nil, nil // "seal" was text inside the record, not a seal
	}
	if canonical, err := json.Marshal(s); err != nil || !bytes.Equal(canonical, raw) {
		return data, nil, nil
	}
	head := bytes.TrimRight(obj[:i], " \t\r\n")
	switch {
	case len(head) > 0 && head[len(head)-1] == ',':
		head = head[:len(head)-1]
	case len(head) == 1 && head[0] == '{':
	default:
		return data, nil, nil
	}
	body = make([]byte, 0, len(head)+1+len(tail))
	body = append(append(append(body, head...), '}'), tail...)
	return body, &s, nil
}

func decodeSeal(raw []byte, s *Seal) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Keyring holds the keys a gateway or an auditor trusts: Ed25519 public
// keys (its own and its replicas') and MAC keys. The zero Keyring trusts
// nothing. It is safe for concurrent use once built.
type Keyring struct {
	public map[string]ed25519.PublicKey
	macs   map[string][]byte
}

// NewKeyring returns a Keyring trusting pubs and macKeys.
func NewKeyring(pubs []ed25519.PublicKey, macKeys ...[]byte) (*Keyring, error) {
	k := &Keyring{public: map[string]ed25519.PublicKey{}, macs: map[string][]byte{}}
	for i, p := range pubs {
		if len(p) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("trust: public key %d is %d bytes, want %d", i, len(p), ed25519.PublicKeySize)
		}
		k.public[Ed25519KeyID(p)] = bytes.Clone(p)
	}
	for i, m := range macKeys {
		if len(m) < 32 {
			return nil, fmt.Errorf("trust: MAC key %d is %d bytes, want at least 32", i, len(m))
		}
		k.macs[macKeyID(m)] = bytes.Clone(m)
	}
	return k, nil
}

// PublicKeys returns the trusted public keys, sorted by key id.
func (k *Keyring) PublicKeys() []ed25519.PublicKey {
	ids := make([]string, 0, len(k.public))
	for id := range k.public {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]ed25519.PublicKey, len(ids))
	for i, id := range ids {
		out[i] = k.public[id]
	}
	return out
}

// Trusts reports whether the keyring trusts the public key named keyID.
func (k *Keyring) Trusts(keyID string) bool {
	_, ok := k.PublicKey(keyID)
	return ok
}

// PublicKey returns the trusted public key named keyID (Ed25519KeyID),
// and false when the keyring does not trust one by that id. A nil
// Keyring trusts nothing.
func (k *Keyring) PublicKey(keyID string) (ed25519.PublicKey, bool) {
	if k == nil {
		return nil, false
	}
	pub, ok := k.public[keyID]
	return pub, ok
}

// Open checks the seal of data, stored under key, and returns the record
// without it. Every error wraps ErrTampered.
func (k *Keyring) Open(key string, data []byte) (body []byte, seal Seal, err error) {
	body, s, _ := Split(data)
	if s == nil {
		return nil, Seal{}, fmt.Errorf("%w: %s: %w", ErrTampered, key, ErrUnsealed)
	}
	if err := k.check(key, body, *s); err != nil {
		return nil, *s, fmt.Errorf("%w: %s: %w", ErrTampered, key, err)
	}
	return body, *s, nil
}

// OpenSigned is Open for records that must carry a signature: a MAC does
// not do, since a replica or an auditor cannot check it.
func (k *Keyring) OpenSigned(key string, data []byte) (body []byte, seal Seal, err error) {
	body, seal, err = k.Open(key, data)
	if err == nil && seal.Algorithm != AlgEd25519 {
		return nil, seal, fmt.Errorf("%w: %s: sealed with %s, a signature is required", ErrTampered, key, seal.Algorithm)
	}
	return body, seal, err
}

func (k *Keyring) check(key string, body []byte, s Seal) error {
	value, err := canonb64.Std(s.Value)
	if err != nil {
		return errors.New("the seal's value is not base64")
	}
	obj, _ := splitTail(body)
	switch s.Algorithm {
	case AlgEd25519:
		pub, ok := k.public[s.KeyID]
		if !ok {
			return fmt.Errorf("%w (%s)", ErrUntrustedKey, s.KeyID)
		}
		if !ed25519.Verify(pub, message(key, obj), value) {
			return fmt.Errorf("the signature by %s does not match the record", s.KeyID)
		}
	case AlgHMAC:
		m, ok := k.macs[s.KeyID]
		if !ok {
			return fmt.Errorf("%w (%s)", ErrUntrustedKey, s.KeyID)
		}
		if !hmac.Equal(mac(m, key, obj), value) {
			return fmt.Errorf("the MAC by %s does not match the record", s.KeyID)
		}
	default:
		return fmt.Errorf("the seal's algorithm %q is unknown", s.Algorithm)
	}
	return nil
}
