package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

const (
	resource    = "https://gw.example.com/mcp"
	issuerURL   = "https://idp.example.com"
	metadataURL = "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
)

// fileConfig is a valid configuration reading iss's keys from a file.
func fileConfig(t *testing.T, iss *oauthtest.Issuer) *oauth.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	iss.WriteJWKS(t, path)
	return &oauth.Config{
		Resource: resource, Issuer: issuerURL, JWKSFile: path,
		RequiredScopes: []string{"toolgate.tools"},
		GroupsClaim:    "groups", RolesClaim: "roles",
		ScopeRoles: map[string][]string{"toolgate.approve": {"approver"}},
	}
}

func newVerifier(t *testing.T, cfg *oauth.Config, opts ...oauth.Option) *oauth.Verifier {
	t.Helper()
	v, err := oauth.NewVerifier(context.Background(), cfg, nil, opts...)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// goodClaims are claims every check passes.
func goodClaims(iss *oauthtest.Issuer) jwt.MapClaims {
	c := iss.Claims(resource, "alice")
	c["scope"] = "toolgate.tools toolgate.approve"
	c["groups"] = []string{"ops", "dev"}
	c["roles"] = "reader"
	return c
}

// serve is a resource that answers with the caller, or the challenge.
func serve(v *oauth.Verifier, token string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	var err error
	if token == "" {
		err = errors.New("frontdoor: missing or unknown API key")
	} else {
		if _, err = v.Verify(r.Context(), token); err == nil {
			rec.WriteHeader(http.StatusOK)
			return rec
		}
	}
	v.Challenge(rec, r, err)
	return rec
}

// challengeOf parses the Bearer challenge of a refusal.
func challengeOf(t *testing.T, rec *httptest.ResponseRecorder) map[string]string {
	t.Helper()
	cs, err := oauthex.ParseWWWAuthenticate(rec.Header().Values("WWW-Authenticate"))
	if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
		t.Fatalf("WWW-Authenticate %q: %v %+v", rec.Header().Values("WWW-Authenticate"), err, cs)
	}
	var body struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.JSONRPC != "2.0" || string(body.ID) != "null" || body.Error.Code != -32001 {
		t.Fatalf("body %s: want a JSON-RPC error, id null, code -32001 (%v)", rec.Body, err)
	}
	return cs[0].Params
}

func TestTokensRefused(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	v := newVerifier(t, fileConfig(t, iss))
	stranger := oauthtest.New(t, issuerURL) // same name, keys nobody published
	esKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pubDER, _ := x509.MarshalPKIXPublicKey(esKey.Public())
	with := func(change func(jwt.MapClaims)) jwt.MapClaims {
		c := goodClaims(iss)
		change(c)
		return c
	}
	hour := time.Hour
	cases := []struct {
		name  string
		why   string // in Verify's error: the check that refused it
		token func() string
	}{
		{"a token for another resource is refused", `audience`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["aud"] = "https://other.example.com/mcp" }))
		}},
		{"a token with no audience is refused", `audience`, func() string { return iss.Sign(t, with(func(c jwt.MapClaims) { delete(c, "aud") })) }},
		{"an expired token is refused", `token is expired`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) {
				c["exp"], c["iat"], c["nbf"] = time.Now().Add(-hour).Unix(), time.Now().Add(-2*hour).Unix(), time.Now().Add(-2*hour).Unix()
			}))
		}},
		{"a token without exp is refused", `exp claim is required`, func() string { return iss.Sign(t, with(func(c jwt.MapClaims) { delete(c, "exp") })) }},
		{"a token not valid before a time to come is refused", `not valid yet`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(10 * time.Minute).Unix() }))
		}},
		{"a token issued in the future is refused", `used before issued`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["iat"] = time.Now().Add(10 * time.Minute).Unix() }))
		}},
		{"a token of another issuer is refused", `invalid issuer`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com" }))
		}},
		{"an unsigned alg none token is refused", `signing method none is invalid`, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodNone, goodClaims(iss))
			tok.Header["kid"] = "es256-1"
			s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"an HS256 token keyed with the issuer's public key is refused", `signing method HS256 is invalid`, func() string {
			return iss.SignKid(t, "HS256", "es256-1", iss.JWKS(), goodClaims(iss))
		}},
		{"an HS256 token keyed with a public key's DER is refused", `signing method HS256 is invalid`, func() string {
			return iss.SignKid(t, "HS256", "es256-1", pubDER, goodClaims(iss))
		}},
		{"a token under an unknown kid is refused", `no key "nope"`, func() string { return iss.SignKid(t, "ES256", "nope", esKey, goodClaims(iss)) }},
		{"a token signed by another key under a published kid is refused", `verification error`, func() string {
			return stranger.Sign(t, goodClaims(iss))
		}},
		{"an RS256 token naming an EC key's kid is refused", `no key "es256-1" for RS256`, func() string {
			return stranger.SignKid(t, "RS256", "es256-1", stranger.Key(t, "RS256"), goodClaims(iss))
		}},
		{"a token with a 300-byte kid is refused", `kid header longer than 256`, func() string {
			return iss.SignKid(t, "ES256", strings.Repeat("k", 300), esKey, goodClaims(iss))
		}},
		{"a token without kid is refused", `kid header missing`, func() string { return iss.SignKid(t, "ES256", "", esKey, goodClaims(iss)) }},
		{"a token without the caller claim is refused", `claim sub: missing`, func() string { return iss.Sign(t, with(func(c jwt.MapClaims) { delete(c, "sub") })) }},
		{"a token whose caller claim is no string is refused", `claim sub: missing or not a string`, func() string { return iss.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = 42 })) }},
		{"a token whose caller is no valid caller name is refused", `does not match`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = "alice smith\nadmin" }))
		}},
		{"a token whose caller name is too long is refused", `does not match`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("a", 128) }))
		}},
		{"a token whose groups claim is an object is refused", `claim groups`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["groups"] = map[string]any{"admin": true} }))
		}},
		{"a token larger than 8 KiB is refused", `longer than 8192`, func() string {
			return iss.Sign(t, with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", 8<<10) }))
		}},
		{"a token with a crit header is refused", `crit header`, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodES256, goodClaims(iss))
			tok.Header["kid"], tok.Header["crit"] = "es256-1", []string{"exp"}
			return mustSign(t, tok, iss)
		}},
		{"a DPoP proof's typ is refused", `not an access token`, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodES256, goodClaims(iss))
			tok.Header["kid"], tok.Header["typ"] = "es256-1", "dpop+jwt"
			return mustSign(t, tok, iss)
		}},
		{"a token that is no JWT is refused", `not a JWS`, func() string { return "opaque-token-value" }},
		{"a JWT with a tampered payload is refused", `verification error`, func() string {
			parts := strings.Split(iss.Sign(t, goodClaims(iss)), ".")
			other := strings.Split(iss.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = "root" })), ".")
			return parts[0] + "." + other[1] + "." + parts[2]
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			token := tc.token()
			if _, err := v.Verify(context.Background(), token); !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Verify: %v: want ErrInvalidToken for %q", err, tc.why)
			}
			rec := serve(v, token)
			if rec.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", rec.Code)
			}
			p := challengeOf(t, rec)
			if p["resource_metadata"] != metadataURL || p["error"] != "invalid_token" || p["scope"] != "toolgate.tools" {
				t.Errorf("challenge %v: want resource_metadata %s, error invalid_token, scope toolgate.tools", p, metadataURL)
			}
			if strings.Contains(rec.Body.String(), token) || strings.Contains(rec.Header().Get("WWW-Authenticate"), token) {
				t.Error("the answer echoes the token")
			}
		})
	}
}

// mustSign signs tok, whose header the case set, with iss's ES256 key.
func mustSign(t *testing.T, tok *jwt.Token, iss *oauthtest.Issuer) string {
	t.Helper()
	s, err := tok.SignedString(iss.Key(t, "ES256"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNoTokenIsA401WithoutAnErrorCode(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	rec := serve(newVerifier(t, fileConfig(t, iss)), "")
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", rec.Code)
	}
	p := challengeOf(t, rec)
	if _, has := p["error"]; has || p["resource_metadata"] != metadataURL {
		t.Errorf("challenge %v: want resource_metadata and no error code (RFC 6750 §3.1)", p)
	}
}

func TestMissingScopeIsA403InsufficientScope(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	v := newVerifier(t, fileConfig(t, iss))
	for _, scope := range []any{nil, "toolgate.read", []string{"toolgate.approve"}, ""} {
		c := goodClaims(iss)
		delete(c, "scope")
		if scope != nil {
			c["scp"] = scope
		}
		rec := serve(v, iss.Sign(t, c))
		if rec.Code != http.StatusForbidden {
			t.Fatalf("scope %v: status %d, want 403", scope, rec.Code)
		}
		p := challengeOf(t, rec)
		if p["error"] != "insufficient_scope" || p["scope"] != "toolgate.tools" || p["resource_metadata"] != metadataURL {
			t.Errorf("scope %v: challenge %v", scope, p)
		}
	}
}

func TestValidTokensMapOntoCallerGroupsAndRoles(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	cfg := fileConfig(t, iss)
	v, err := oauth.NewVerifier(context.Background(), cfg, func(caller string) ([]string, []string) {
		if caller == "oauth:alice" {
			return []string{"ops", "configured"}, nil
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []string{"ES256", "RS256", "EdDSA"} {
		c := goodClaims(iss)
		if alg == "RS256" {
			delete(c, "scope")
			c["scp"] = []string{"toolgate.tools"}
			c["aud"] = []string{"https://other.example.com", resource + "/"}
		}
		p, err := v.Verify(context.Background(), iss.SignWith(t, alg, c))
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		id := p.Identity
		if p.Caller != "oauth:alice" || id == nil || id.Method != "oauth" || id.Issuer != issuerURL || id.Subject != "alice" || id.TokenID != c["jti"] {
			t.Fatalf("%s: principal %+v %+v", alg, p, id)
		}
		if !slices.Equal(id.Groups, []string{"ops", "dev", "configured"}) {
			t.Errorf("%s: groups %v: want the token's joined to the configured ones", alg, id.Groups)
		}
		wantRoles := []string{"reader", "approver"}
		if alg == "RS256" {
			wantRoles = []string{"reader"} // no toolgate.approve scope
		}
		if !slices.Equal(id.Roles, wantRoles) {
			t.Errorf("%s: roles %v, want %v", alg, id.Roles, wantRoles)
		}
	}
}

func TestCallerClaimAndPrefixAreConfigurable(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	cfg := fileConfig(t, iss)
	cfg.CallerClaim = "client_id"
	prefix := "idp:"
	cfg.CallerPrefix = &prefix
	v := newVerifier(t, cfg)
	c := goodClaims(iss)
	c["client_id"] = "ci-bot"
	p, err := v.Verify(context.Background(), iss.Sign(t, c))
	if err != nil || p.Caller != "idp:ci-bot" || p.Identity.Subject != "alice" {
		t.Fatalf("principal %+v, %v: want idp:ci-bot with subject alice", p, err)
	}
}

func TestMetadataIsServedExactly(t *testing.T) {
	iss := oauthtest.New(t, issuerURL)
	v := newVerifier(t, fileConfig(t, iss))
	if got := v.MetadataPaths(); !slices.Equal(got, []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}) {
		t.Errorf("MetadataPaths %v", got)
	}
	if v.MetadataURL() != metadataURL {
		t.Errorf("MetadataURL %s", v.MetadataURL())
	}
	rec := httptest.NewRecorder()
	v.MetadataHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metadataURL, nil))
	want := `{"resource":"https://gw.example.com/mcp","authorization_servers":["https://idp.example.com"],` +
		`"scopes_supported":["toolgate.tools"],"bearer_methods_supported":["header"],"resource_name":"Toolgate"}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("metadata %d %q\nwant %q", rec.Code, rec.Body, want)
	}
	root := &oauth.Config{Resource: "https://gw.example.com", Issuer: issuerURL, JWKSFile: fileConfig(t, iss).JWKSFile}
	if got := newVerifier(t, root).MetadataPaths(); !slices.Equal(got, []string{"/.well-known/oauth-protected-resource"}) {
		t.Errorf("root resource: MetadataPaths %v", got)
	}
}
