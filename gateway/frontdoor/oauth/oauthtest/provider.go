package oauthtest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Provider is an OpenID Connect provider on loopback HTTP for one client:
// discovery at /.well-known/openid-configuration, an authorization
// endpoint that signs the user in at once and redirects back with a code,
// a token endpoint that redeems a code once (client secret by HTTP Basic,
// PKCE S256, the same redirect_uri) for an ID token signed by the issuer,
// and the JWKS at /jwks.json.
type Provider struct {
	*Issuer
	ClientID, ClientSecret string

	srv *httptest.Server

	mu       sync.Mutex
	codes    map[string]grant
	n        int
	sub      string
	extra    jwt.MapClaims
	mutate   func(jwt.MapClaims)
	redeemed int
	asked    int
}

// grant is what an issued code stands for.
type grant struct {
	redirect, challenge, nonce string
}

// NewProvider starts a provider whose issuer identifier is its own URL.
// The signed-in user is "alice" until SetUser says otherwise.
func NewProvider(t testing.TB, clientID, clientSecret string) *Provider {
	t.Helper()
	return NewProviderNamed(t, clientID, clientSecret, "")
}

// NewProviderNamed is NewProvider with the issuer's host called hostname
// ("localhost") instead of its loopback address, so that a browser sees
// the provider as another site than a console on 127.0.0.1.
func NewProviderNamed(t testing.TB, clientID, clientSecret, hostname string) *Provider {
	t.Helper()
	p := &Provider{ClientID: clientID, ClientSecret: clientSecret, codes: map[string]grant{}, sub: "alice"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(p.JWKS())
	})
	p.srv = httptest.NewUnstartedServer(mux)
	u := "http://" + p.srv.Listener.Addr().String()
	if hostname != "" {
		_, port, _ := net.SplitHostPort(p.srv.Listener.Addr().String())
		u = "http://" + net.JoinHostPort(hostname, port)
	}
	p.Issuer = New(t, u)
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// SetUser makes sub the user the authorization endpoint signs in, with
// extra claims (groups …) in its ID tokens.
func (p *Provider) SetUser(sub string, extra jwt.MapClaims) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sub, p.extra = sub, extra
}

// SetMutate changes each ID token's claims before it is signed, to
// issue tokens a client must refuse (another aud, iss, nonce, an exp
// past); nil stops it.
func (p *Provider) SetMutate(f func(jwt.MapClaims)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mutate = f
}

// TokenRequests counts the requests the token endpoint got, exchanged
// or not.
func (p *Provider) TokenRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

// Redeemed counts the codes the token endpoint exchanged.
func (p *Provider) Redeemed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.redeemed
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"issuer": p.URL, "authorization_endpoint": p.URL + "/authorize", "token_endpoint": p.URL + "/token",
		"jwks_uri": p.URL + "/jwks.json", "response_types_supported": []string{"code"},
		"code_challenge_methods_supported": []string{"S256"}, "id_token_signing_alg_values_supported": []string{"ES256"},
	})
}

// authorize signs the user in without asking and redirects to
// redirect_uri with a code and the state, as a provider with a live
// session does.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != p.ClientID || q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == "" || q.Get("redirect_uri") == "" {
		http.Error(w, "invalid_request", http.StatusBadRequest)
		return
	}
	code := randomString()
	p.mu.Lock()
	p.codes[code] = grant{redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"), nonce: q.Get("nonce")}
	p.mu.Unlock()
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "invalid_request", http.StatusBadRequest)
		return
	}
	v := back.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	v.Set("iss", p.URL)
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// token redeems a code once, for its client, redirect_uri and PKCE
// verifier.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.asked++
	p.mu.Unlock()
	id, secret, ok := r.BasicAuth()
	id, _ = url.QueryUnescape(id)
	secret, _ = url.QueryUnescape(secret)
	if !ok || id != p.ClientID || secret != p.ClientSecret {
		tokenError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		tokenError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	p.mu.Lock()
	g, ok := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code"))
	sub, extra, mutate := p.sub, p.extra, p.mutate
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if !ok || g.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		tokenError(w, http.StatusBadRequest, "invalid_grant")
		return
	}
	claims := p.Claims(p.ClientID, sub)
	claims["nonce"] = g.nonce
	claims["exp"] = time.Now().Add(10 * time.Minute).Unix()
	for k, v := range extra {
		claims[k] = v
	}
	if mutate != nil {
		mutate(claims)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = p.Kid(nopT{}, "ES256")
	signed, err := tok.SignedString(p.Key(nopT{}, "ES256"))
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "server_error")
		return
	}
	p.mu.Lock()
	p.redeemed++
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"access_token": randomString(), "token_type": "Bearer", "expires_in": 600, "id_token": signed,
	})
}

func tokenError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// nopT is a testing.TB for the server's goroutine, where Fatal must not
// be called: the keys it asks for always exist.
type nopT struct{ testing.TB }

func (nopT) Helper() {}
