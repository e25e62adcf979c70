package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

// clock is a settable clock for the JWKS cache and the token checks.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func jwksOf(keys ...map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func TestJWKSKeepsOnlyUsableSignatureKeys(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	good := oauthtest.JWK("ec", "", ec.Public())
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range m {
			out[a] = b
		}
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	offCurve := with(good, "y", good["x"])
	skipped := []struct {
		name string
		key  map[string]string
	}{
		{"a symmetric key", map[string]string{"kty": "oct", "kid": "s", "k": "c2VjcmV0"}},
		{"an encryption key", with(good, "use", "enc")},
		{"a key without kid", with(good, "kid", "")},
		{"an RSA key of 1024 bits", oauthtest.JWK("small", "RS256", small.Public())},
		{"an RSA key pinned to HS256", oauthtest.JWK("rs", "HS256", rsaKey.Public())},
		{"a P-256 key pinned to ES384", with(good, "alg", "ES384")},
		{"a point off the curve", offCurve},
		{"a P-521 key", with(good, "crv", "P-521")},
		{"an X25519 key", map[string]string{"kty": "OKP", "crv": "X25519", "kid": "x", "x": good["x"]}},
		{"a short coordinate", with(good, "x", good["x"][2:])},
		{"padded base64", with(good, "x", good["x"]+"=")},
		{"an even RSA exponent", with(oauthtest.JWK("rs", "RS256", rsaKey.Public()), "e", "AAI")},
	}
	for _, tc := range skipped {
		t.Run(tc.name+" is skipped", func(t *testing.T) {
			set, err := oauth.ParseJWKS(jwksOf(good, tc.key))
			if err != nil || set.Len() != 1 || set.Skipped != 1 {
				t.Fatalf("set %+v, %v: want the good key kept and this one skipped", set, err)
			}
			if _, err := oauth.ParseJWKS(jwksOf(tc.key)); err == nil {
				t.Error("a set of only this key parsed")
			}
		})
	}
	set, err := oauth.ParseJWKS(jwksOf(good, oauthtest.JWK("ec", "ES384", ec384.Public()), oauthtest.JWK("rs", "", rsaKey.Public())))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kid, alg string
		n        int
	}{{"ec", "ES256", 1}, {"ec", "ES384", 1}, {"ec", "RS256", 0}, {"ec", "EdDSA", 0}, {"rs", "PS256", 1}, {"rs", "HS256", 0}, {"rs", "ES256", 0}} {
		if got := len(set.Lookup(c.kid, c.alg)); got != c.n {
			t.Errorf("Lookup(%s, %s): %d keys, want %d", c.kid, c.alg, got, c.n)
		}
	}
	many := make([]map[string]string, 257)
	for i := range many {
		many[i] = with(good, "kid", fmt.Sprint(i))
	}
	for name, data := range map[string][]byte{
		"not JSON": []byte("{"), "no keys": []byte(`{"keys":[]}`), "257 keys": jwksOf(many...),
		"over 1 MiB": []byte(`{"keys":[],"pad":"` + strings.Repeat("x", 1<<20) + `"}`),
	} {
		if _, err := oauth.ParseJWKS(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// urlVerifier verifies iss's tokens with keys fetched from its server.
func urlVerifier(t *testing.T, iss *oauthtest.Issuer, clk *clock, url string) *oauth.Verifier {
	t.Helper()
	return newVerifier(t, &oauth.Config{
		Resource: resource, Issuer: issuerURL, JWKSURL: url, JWKSRefresh: 30 * time.Second,
	}, oauth.WithClock(clk.now))
}

func verifies(v *oauth.Verifier, token string) error {
	_, err := v.Verify(context.Background(), token)
	return err
}

func TestJWKSRotationIsPickedUpWithinTheRefetchLimit(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	clk := newClock()
	v := urlVerifier(t, iss, clk, iss.JWKSURL(t))
	if err := verifies(v, iss.Sign(t, iss.Claims(resource, "alice"))); err != nil || iss.Fetches() != 1 {
		t.Fatalf("first token: %v, %d fetches: want it verified after one fetch", err, iss.Fetches())
	}
	iss.AddKey(t, "ES256") // rotation: Sign now uses a kid the verifier has not seen
	rotated := iss.Sign(t, iss.Claims(resource, "alice"))
	clk.advance(10 * time.Second)
	if err := verifies(v, rotated); err == nil || iss.Fetches() != 1 {
		t.Fatalf("10 s after a fetch: %v, %d fetches: want refused without a fetch", err, iss.Fetches())
	}
	clk.advance(21 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() { errs <- verifies(v, rotated) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("31 s after: %v", err)
		}
	}
	if iss.Fetches() != 2 {
		t.Fatalf("20 concurrent tokens under a new kid made %d fetches in all, want 2", iss.Fetches())
	}
	for i := range 50 { // an attacker's random kids
		clk.advance(500 * time.Millisecond)
		forged := iss.SignKid(t, "ES256", fmt.Sprint("random-", i), iss.Key(t, "ES256"), iss.Claims(resource, "alice"))
		if verifies(v, forged) == nil {
			t.Fatal("an unknown kid verified")
		}
	}
	if iss.Fetches() != 2 {
		t.Errorf("50 unknown kids within 25 s made %d fetches in all, want still 2", iss.Fetches())
	}
	clk.advance(6 * time.Second)
	_ = verifies(v, iss.SignKid(t, "ES256", "random-x", iss.Key(t, "ES256"), iss.Claims(resource, "alice")))
	if iss.Fetches() != 3 {
		t.Errorf("an unknown kid 31 s after the last fetch: %d fetches in all, want 3", iss.Fetches())
	}
}

func TestJWKSStaleSetIsServedWhileTheIssuerFails(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	clk := newClock()
	v := urlVerifier(t, iss, clk, iss.JWKSURL(t))
	token := iss.Sign(t, iss.Claims(resource, "alice"))
	if err := verifies(v, token); err != nil {
		t.Fatal(err)
	}
	iss.SetFailing(true)
	clk.advance(35 * time.Second) // past jwks_refresh: a background refresh fails
	if err := verifies(v, token); err != nil {
		t.Fatalf("stale set: %v", err)
	}
	waitFetches(t, iss, 2)
	clk.advance(80 * time.Second) // 115 s: under 4 × 30 s
	if err := verifies(v, token); err != nil {
		t.Fatalf("stale set at 115 s: %v", err)
	}
	clk.advance(10 * time.Second) // 125 s: the set is too old to trust
	if err := verifies(v, token); err == nil || !strings.Contains(err.Error(), "no current key set") {
		t.Fatalf("at 125 s with every refresh failing: %v, want refused", err)
	}
	iss.SetFailing(false)
	clk.advance(31 * time.Second)
	if err := verifies(v, token); err != nil {
		t.Fatalf("after the issuer came back: %v", err)
	}
}

func waitFetches(t *testing.T, iss *oauthtest.Issuer, n int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); iss.Fetches() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches, want %d", iss.Fetches(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestJWKSURLRedirectsAndHugeBodiesAreRefused(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	target := iss.JWKSURL(t)
	for name, h := range map[string]http.HandlerFunc{
		"a redirect to the real set": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target, http.StatusFound) },
		"a body over 1 MiB": func(w http.ResponseWriter, r *http.Request) {
			set := iss.JWKS()
			_, _ = w.Write(set[:len(set)-1])
			_, _ = fmt.Fprintf(w, `,"pad":"%s"}`, strings.Repeat("x", 1<<20))
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			before := iss.Fetches()
			v := urlVerifier(t, iss, newClock(), srv.URL+"/jwks.json")
			if err := verifies(v, iss.Sign(t, iss.Claims(resource, "alice"))); err == nil {
				t.Fatal("a token verified with keys from a refused fetch")
			}
			if iss.Fetches() != before {
				t.Error("the redirect was followed")
			}
		})
	}
}

func TestJWKSFileIsReadAgainWhenItChanges(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	cfg := fileConfig(t, iss)
	clk := newClock()
	v := newVerifier(t, cfg, oauth.WithClock(clk.now))
	oldKid := iss.Kid(t, "ES256")
	old := iss.Sign(t, goodClaims(iss))
	iss.AddKey(t, "ES256")
	iss.WriteJWKS(t, cfg.JWKSFile)
	if err := verifies(v, iss.Sign(t, goodClaims(iss))); err != nil {
		t.Fatalf("a token under the key just added to the file: %v", err)
	}
	iss.Remove(oldKid)
	iss.WriteJWKS(t, cfg.JWKSFile)
	clk.advance(2 * time.Second)
	if err := verifies(v, old); err == nil {
		t.Fatal("a token under a key removed from the file still verifies")
	}
	if err := os.WriteFile(cfg.JWKSFile, []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Second)
	if err := verifies(v, iss.Sign(t, goodClaims(iss))); err != nil {
		t.Fatalf("a broken file must keep the keys read before: %v", err)
	}
	if err := os.Remove(cfg.JWKSFile); err != nil {
		t.Fatal(err)
	}
	if _, err := oauth.NewVerifier(context.Background(), cfg, nil); err == nil {
		t.Error("a missing jwks_file at start is no error")
	}
	// A named pipe in its place would block every token check for ever if
	// it were read; it is refused at once.
	if err := syscall.Mkfifo(cfg.JWKSFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := oauth.NewVerifier(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("a jwks_file that is a named pipe: %v", err)
	}
}

func TestURLVerifierStartsWhenTheIssuerIsDown(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	iss.SetFailing(true)
	clk := newClock()
	v := urlVerifier(t, iss, clk, iss.JWKSURL(t))
	token := iss.Sign(t, iss.Claims(resource, "alice"))
	if err := verifies(v, token); !errors.Is(err, oauth.ErrInvalidToken) {
		t.Fatalf("no keys yet: %v, want an invalid token", err)
	}
	iss.SetFailing(false)
	clk.advance(31 * time.Second)
	if err := verifies(v, token); err != nil {
		t.Fatalf("once the issuer is up: %v", err)
	}
}

func FuzzJWKS(f *testing.F) {
	iss := oauthtest.New(f, issuerURL)
	f.Add(iss.JWKS())
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","kid":"a","x":"","y":""}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"},{"kty":"oct","k":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"e","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := oauth.ParseJWKS(data)
		if err != nil {
			return
		}
		if set.Len() == 0 {
			t.Fatal("a set without keys parsed")
		}
		var doc struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		_ = json.Unmarshal(data, &doc)
		for _, k := range doc.Keys {
			for _, alg := range []string{"RS256", "PS384", "ES256", "ES384", "EdDSA", "HS256", "none"} {
				keys := set.Lookup(k.Kid, alg)
				if (alg == "HS256" || alg == "none") && len(keys) > 0 {
					t.Fatalf("a key for %s", alg)
				}
				for _, pub := range keys {
					if pub == nil {
						t.Fatal("a nil key")
					}
				}
			}
		}
	})
}

func FuzzVerify(f *testing.F) {
	iss := oauthtest.New(f, issuerURL)
	path := f.TempDir() + "/jwks.json"
	iss.WriteJWKS(f, path)
	v, err := oauth.NewVerifier(context.Background(), &oauth.Config{
		Resource: resource, Issuer: issuerURL, JWKSFile: path, GroupsClaim: "groups",
	}, nil)
	if err != nil {
		f.Fatal(err)
	}
	good := iss.Claims(resource, "alice")
	good["groups"] = []string{"ops"}
	for _, alg := range []string{"ES256", "RS256", "EdDSA"} {
		f.Add(iss.SignWith(f, alg, good))
	}
	f.Add("e30.e30.")
	f.Add("eyJhbGciOiJub25lIiwia2lkIjoiZXMyNTYtMSJ9.e30.")
	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.Verify(context.Background(), token)
		if err != nil {
			if !errors.Is(err, oauth.ErrInvalidToken) && !errors.Is(err, oauth.ErrInsufficientScope) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		if !strings.HasPrefix(p.Caller, "oauth:") || p.Identity == nil || p.Identity.Issuer != issuerURL {
			t.Fatalf("verified principal %+v", p)
		}
	})
}
