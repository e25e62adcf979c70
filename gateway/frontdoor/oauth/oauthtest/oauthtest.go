// Package oauthtest is a test issuer for package oauth: signing keys made
// in the test (ES256, RS256 and Ed25519), tokens signed with them, and
// their JWKS as bytes, as a file or served over HTTP with a fetch counter
// and a switch that makes the server fail.
package oauthtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer signs tokens with keys it made.
type Issuer struct {
	// URL is the issuer identifier put in iss by Claims.
	URL string

	mu   sync.Mutex
	keys []signer
	n    int

	srv     *httptest.Server
	fetches atomic.Int64
	failing atomic.Bool
}

type signer struct {
	kid, alg string
	key      crypto.Signer
}

// New returns an issuer identified by url with three keys: ES256
// ("es256-1", the default for Sign), RS256 ("rs256-1") and EdDSA
// ("eddsa-1").
func New(t testing.TB, url string) *Issuer {
	t.Helper()
	i := &Issuer{URL: url}
	for _, alg := range []string{"ES256", "RS256", "EdDSA"} {
		i.AddKey(t, alg)
	}
	return i
}

// AddKey makes a new key for alg (ES256, ES384, RS256, PS256 or EdDSA),
// publishes it, makes it the key Sign uses for alg, and returns its kid.
func (i *Issuer) AddKey(t testing.TB, alg string) string {
	t.Helper()
	var key crypto.Signer
	var err error
	switch alg {
	case "ES256":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "RS256", "PS256":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case "EdDSA":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("oauthtest: AddKey: unsupported alg %q", alg)
	}
	if err != nil {
		t.Fatalf("oauthtest: AddKey %s: %v", alg, err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.n++
	kid := fmt.Sprintf("%s-%d", map[string]string{"ES256": "es256", "ES384": "es384", "RS256": "rs256", "PS256": "ps256", "EdDSA": "eddsa"}[alg], i.n)
	i.keys = append([]signer{{kid: kid, alg: alg, key: key}}, i.keys...)
	return kid
}

// Remove unpublishes the key kid (a rotation's second half).
func (i *Issuer) Remove(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for n, k := range i.keys {
		if k.kid == kid {
			i.keys = append(i.keys[:n:n], i.keys[n+1:]...)
			return
		}
	}
}

// Claims returns valid claims for a token of sub for audience aud, issued
// now and valid for an hour.
func (i *Issuer) Claims(aud, sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": i.URL, "sub": sub, "aud": aud, "jti": fmt.Sprintf("jti-%d", now.UnixNano()),
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

// Sign signs claims with the newest ES256 key.
func (i *Issuer) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return i.SignWith(t, "ES256", claims)
}

// SignWith signs claims with the newest key for alg.
func (i *Issuer) SignWith(t testing.TB, alg string, claims jwt.MapClaims) string {
	t.Helper()
	s := i.newest(t, alg)
	return i.SignKid(t, alg, s.kid, s.key, claims)
}

// Key is the newest private key for alg, for tests that build their own
// token headers.
func (i *Issuer) Key(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	return i.newest(t, alg).key
}

// Kid is the newest key's kid for alg.
func (i *Issuer) Kid(t testing.TB, alg string) string {
	t.Helper()
	return i.newest(t, alg).kid
}

func (i *Issuer) newest(t testing.TB, alg string) signer {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, k := range i.keys {
		if k.alg == alg {
			return k
		}
	}
	t.Fatalf("oauthtest: no %s key", alg)
	return signer{}
}

// SignKid signs claims with key under any alg and kid header, to forge
// tokens the verifier must refuse.
func (i *Issuer) SignKid(t testing.TB, alg, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims)
	tok.Header["kid"] = kid
	tok.Header["typ"] = "at+jwt"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("oauthtest: sign %s: %v", alg, err)
	}
	return s
}

// JWKS is the published key set.
func (i *Issuer) JWKS() []byte {
	i.mu.Lock()
	defer i.mu.Unlock()
	keys := make([]map[string]string, 0, len(i.keys))
	for _, k := range i.keys {
		keys = append(keys, JWK(k.kid, k.alg, k.key.Public()))
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// JWK is the JSON Web Key of pub.
func JWK(kid, alg string, pub crypto.PublicKey) map[string]string {
	enc := base64.RawURLEncoding.EncodeToString
	m := map[string]string{"kid": kid, "alg": alg, "use": "sig"}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", enc(k.N.Bytes()), enc(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		b, _ := k.Bytes()
		m["kty"], m["crv"] = "EC", k.Curve.Params().Name
		m["x"], m["y"] = enc(b[1:1+size]), enc(b[1+size:])
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", enc(k)
	}
	return m
}

// WriteJWKS writes the key set to path (atomically, by rename).
func (i *Issuer) WriteJWKS(t testing.TB, path string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".jwks.tmp")
	if err := os.WriteFile(tmp, i.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Server serves the key set at /jwks.json on loopback, started on first
// use and closed with the test.
func (i *Issuer) Server(t testing.TB) *httptest.Server {
	t.Helper()
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.srv == nil {
		i.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i.fetches.Add(1)
			if i.failing.Load() || r.URL.Path != "/jwks.json" {
				http.Error(w, "unavailable", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/jwk-set+json")
			_, _ = w.Write(i.JWKS())
		}))
		t.Cleanup(i.srv.Close)
	}
	return i.srv
}

// JWKSURL is the served key set's URL.
func (i *Issuer) JWKSURL(t testing.TB) string { return i.Server(t).URL + "/jwks.json" }

// Fetches counts the requests the server got.
func (i *Issuer) Fetches() int64 { return i.fetches.Load() }

// SetFailing makes the server answer 503 (true) or serve again (false).
func (i *Issuer) SetFailing(on bool) { i.failing.Store(on) }
