package oidc

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	good := func() Config {
		return Config{Issuer: "https://id.example.com", ClientID: "console", ClientSecret: ClientSecret{SecretSource: config.SecretSource{Env: "S"}},
			RedirectURL: "https://console.example.com" + CallbackPath}
	}
	tests := []struct {
		name    string
		change  func(*Config)
		tls     bool
		wantErr string
	}{
		{name: "https everywhere", change: func(*Config) {}, tls: true},
		{name: "http on loopback without tls", change: func(c *Config) {
			c.Issuer, c.RedirectURL = "http://127.0.0.1:9000", "http://127.0.0.1:8470"+CallbackPath
		}},
		{name: "no issuer", change: func(c *Config) { c.Issuer = "" }, wantErr: "issuer: required"},
		{name: "an http issuer on another host", change: func(c *Config) { c.Issuer = "http://id.example.com" }, wantErr: "must be https"},
		{name: "an issuer with a query", change: func(c *Config) { c.Issuer = "https://id.example.com/?x=1" }, wantErr: "query"},
		{name: "an issuer with credentials", change: func(c *Config) { c.Issuer = "https://u:p@id.example.com" }, wantErr: "credentials"},
		{name: "no client id", change: func(c *Config) { c.ClientID = "" }, wantErr: "client_id"},
		{name: "no client secret", change: func(c *Config) { c.ClientSecret = ClientSecret{} }, wantErr: "client_secret: give file or env"},
		{name: "a secret from two places", change: func(c *Config) { c.ClientSecret.File = "/s" }, wantErr: "not both"},
		{name: "a redirect to another path", change: func(c *Config) { c.RedirectURL = "https://console.example.com/elsewhere" }, wantErr: "followed by"},
		{name: "a redirect with a query", change: func(c *Config) { c.RedirectURL += "?next=https://evil.example" }, wantErr: "followed by"},
		{name: "a redirect with a fragment", change: func(c *Config) { c.RedirectURL += "#x" }, wantErr: "fragment"},
		{name: "a redirect with an encoded path", change: func(c *Config) { c.RedirectURL = "https://console.example.com/signin/oidc%2Fcallback" }, wantErr: "followed by"},
		{name: "a plain http redirect beyond loopback", change: func(c *Config) { c.RedirectURL = "http://console.example.com" + CallbackPath }, wantErr: "must be https"},
		{name: "an http redirect while the console serves tls", change: func(c *Config) { c.RedirectURL = "http://127.0.0.1:8470" + CallbackPath }, tls: true, wantErr: "serves TLS"},
		{name: "a scope with a quote", change: func(c *Config) { c.Scopes = []string{`a"b`} }, wantErr: "not a scope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := good()
			tc.change(&c)
			err := c.Validate(tc.tls)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// begin runs Begin as a browser at the console's origin and returns the
// state cookie and the provider's answer (the callback request).
func begin(t *testing.T, c *Client, prov *oauthtest.Provider) (*http.Cookie, *http.Request) {
	t.Helper()
	w := httptest.NewRecorder()
	if err := c.Begin(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8470"+"/signin/oidc", nil)); err != nil {
		t.Fatal(err)
	}
	cookie := w.Result().Cookies()[0]
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(w.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back := httptest.NewRequest(http.MethodGet, resp.Header.Get("Location"), nil)
	back.AddCookie(cookie)
	return cookie, back
}

func newClient(t *testing.T, issuer string, now func() time.Time) *Client {
	t.Helper()
	cfg := Config{Issuer: issuer, ClientID: "console", ClientSecret: ClientSecret{SecretSource: config.SecretSource{Env: "S"}},
		RedirectURL: "http://127.0.0.1:8470" + CallbackPath}
	if err := cfg.Validate(false); err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, func(string) string { return "secret" }, nil, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFinishRefusesALateCallback: a state is good for ten minutes.
func TestFinishRefusesALateCallback(t *testing.T) {
	t.Parallel()
	prov := oauthtest.NewProvider(t, "console", "secret")
	clk := &clock{now: time.Now()}
	c := newClient(t, prov.URL, clk.Now)
	_, back := begin(t, c, prov)
	clk.Add(flowTTL)
	if _, _, err := c.Finish(httptest.NewRecorder(), back); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Finish after %v: %v", flowTTL, err)
	}
	if prov.TokenRequests() != 0 {
		t.Fatal("a late callback reached the token endpoint")
	}
	_, back = begin(t, c, prov)
	if who, exp, err := c.Finish(httptest.NewRecorder(), back); err != nil || who.Caller != "oidc:alice" || exp.IsZero() {
		t.Fatalf("Finish in time: %v %v %v", who, exp, err)
	}
}

// TestDiscoveryMustNameTheIssuer: a provider whose metadata names another
// issuer (or whose endpoints are plain http beyond loopback) is not used.
func TestDiscoveryMustNameTheIssuer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		doc     func(base string) map[string]any
		wantErr string
	}{
		{"another issuer", func(base string) map[string]any {
			return map[string]any{"issuer": base + "/", "authorization_endpoint": base + "/a", "token_endpoint": base + "/t", "jwks_uri": base + "/k"}
		}, "names issuer"},
		{"a plain http token endpoint elsewhere", func(base string) map[string]any {
			return map[string]any{"issuer": base, "authorization_endpoint": base + "/a", "token_endpoint": "http://evil.example/t", "jwks_uri": base + "/k"}
		}, "must be https"},
		{"no PKCE S256", func(base string) map[string]any {
			return map[string]any{"issuer": base, "authorization_endpoint": base + "/a", "token_endpoint": base + "/t", "jwks_uri": base + "/k",
				"code_challenge_methods_supported": []string{"plain"}}
		}, "S256"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var base string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_ = json.NewEncoder(w).Encode(tc.doc(base))
			}))
			t.Cleanup(srv.Close)
			base = srv.URL
			c := newClient(t, base, time.Now)
			w := httptest.NewRecorder()
			err := c.Begin(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8470/signin/oidc", nil))
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.wantErr) || w.Header().Get("Location") != "" {
				t.Fatalf("Begin: %v, Location %q; want a refusal with %q", err, w.Header().Get("Location"), tc.wantErr)
			}
		})
	}
}

// TestBeginLinksToTheConfiguredProvider: the authorization request keeps
// the endpoint's own query and sends only the configured redirect URL.
func TestBeginLinksToTheConfiguredProvider(t *testing.T) {
	t.Parallel()
	prov := oauthtest.NewProvider(t, "console", "secret")
	c := newClient(t, prov.URL, time.Now)
	if got, want := c.Label(), "Sign in with "+strings.TrimPrefix(prov.URL, "http://"); got != want {
		t.Fatalf("Label %q, want %q", got, want)
	}
	w := httptest.NewRecorder()
	if err := c.Begin(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8470/signin/oidc?redirect_uri=https://evil.example", nil)); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(w.Header().Get("Location"))
	if u.Query().Get("redirect_uri") != "http://127.0.0.1:8470"+CallbackPath || u.Query().Get("scope") != "openid profile email" {
		t.Fatalf("authorization request %v", u.Query())
	}
}
