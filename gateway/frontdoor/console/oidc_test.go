package console

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/oidc"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
	"github.com/toolgate/toolgate/policy"
)

// oidcConsole is a console over TLS on loopback (so that its Secure
// cookies travel in a Go cookie jar) signing people in at a test
// provider.
type oidcConsole struct {
	t    *testing.T
	url  string
	srv  *httptest.Server
	prov *oauthtest.Provider
}

const oidcSecretEnv = "CONSOLE_OIDC_SECRET"

func startOIDCConsole(t *testing.T) *oidcConsole {
	t.Helper()
	prov := oauthtest.NewProvider(t, "toolgate-console", "s3cret/with:odd&chars")
	prov.SetUser("alice", jwt.MapClaims{"groups": []string{"dev"}})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(
		`@id("team") permit (principal, action == Action::"ReadEvidence", resource) when { context.requesterGroups.containsAny(principal.groups) };`), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := callerauth.New([]config.KeyConfig{{Caller: "bob", Env: "K", Groups: []string{"ops"}}},
		func(string) string { return "k-bob-0123456789" })
	if err != nil {
		t.Fatal(err)
	}
	store, err := storeurl.Open(t.Context(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	index := browse.NewIndex(store, nil)
	if err := index.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	base := "https://" + srv.Listener.Addr().String()
	cfg := oidc.Config{Issuer: prov.URL, ClientID: prov.ClientID, RedirectURL: base + oidc.CallbackPath,
		ClientSecret: oidc.ClientSecret{SecretSource: config.SecretSource{Env: oidcSecretEnv}}, GroupsClaim: "groups"}
	if err := cfg.Validate(true); err != nil {
		t.Fatal(err)
	}
	client, err := oidc.New(cfg, func(string) string { return prov.ClientSecret + "\n" }, nil, oidc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	acc := newAccess(fakeKeys{auth}, fixedPolicies{eng}, "")
	pages, err := browse.NewServer(browse.Options{Store: store, Index: index, Access: acc,
		External: oidcSignIn{client: client, access: acc}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = pages.Handler()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &oidcConsole{t: t, url: base, srv: srv, prov: prov}
}

// browser is an http.Client with its own cookie jar that follows
// redirects, as a browser does.
func (c *oidcConsole) browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	hc := *c.srv.Client() // a copy: Client returns the same client each time
	hc.Jar = jar
	return &hc
}

// stopAt is a browser that stops before following a redirect to host.
func (c *oidcConsole) stopAt(hc *http.Client, host string) *http.Client {
	cp := *hc
	cp.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Host == host {
			return http.ErrUseLastResponse
		}
		return nil
	}
	return &cp
}

func get(t *testing.T, hc *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(data)
}

// callbackURL begins a sign-in in hc and lets the provider answer, and
// returns where the provider sends the browser back, without going.
func (c *oidcConsole) callbackURL(hc *http.Client) string {
	c.t.Helper()
	consoleHost := strings.TrimPrefix(c.url, "https://")
	resp, _ := get(c.t, c.stopAt(hc, consoleHost), c.url+browse.ExternalStartPath)
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), c.url+oidc.CallbackPath+"?") {
		c.t.Fatalf("the provider's answer: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return resp.Header.Get("Location")
}

// signedIn reports whether hc's session opens the requests page, and as
// whom.
func (c *oidcConsole) signedIn(hc *http.Client) (bool, string) {
	c.t.Helper()
	resp, body := get(c.t, hc, c.url+"/requests")
	return resp.StatusCode == http.StatusOK && strings.Contains(body, "Signed in as"), body
}

// TestOIDCSignInWholeFlow drives the console's OpenID Connect sign-in as
// a browser: the sign-in page's link, the provider's authorization
// endpoint, the callback, the token endpoint, and a session as the ID
// token's caller with the token's groups, ending no later than the token.
func TestOIDCSignInWholeFlow(t *testing.T) {
	t.Parallel()
	c := startOIDCConsole(t)
	hc := c.browser()
	_, page := get(t, hc, c.url+"/signin")
	wantLink := `href="/signin/oidc">Sign in with ` + strings.TrimPrefix(c.prov.URL, "http://") + "<"
	if !strings.Contains(page, wantLink) {
		t.Fatalf("the sign-in page has no link %q:\n%s", wantLink, page)
	}
	resp, body := get(t, hc, c.url+browse.ExternalStartPath)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "oidc:alice") || resp.Request.URL.Path != oidc.CallbackPath {
		t.Fatalf("after the provider: %d at %s\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	var session *http.Cookie
	for _, ck := range hc.Jar.Cookies(resp.Request.URL) {
		if ck.Name == browse.CookieName {
			session = ck
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}
	if ok, body := c.signedIn(hc); !ok || !strings.Contains(body, "oidc:alice") {
		t.Fatalf("the requests page after sign-in:\n%s", body)
	}
	if c.prov.Redeemed() != 1 {
		t.Fatalf("codes redeemed: %d, want 1", c.prov.Redeemed())
	}
	// The session is the same as a key's, and ends with the token (10
	// minutes); the state cookie is cleared.
	for _, ck := range resp.Cookies() {
		if ck.Name == browse.CookieName && (ck.MaxAge <= 0 || ck.MaxAge > 600 || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode) {
			t.Fatalf("session cookie %+v: want HttpOnly, Secure, Strict, for at most the token's 600 s", ck)
		}
		if ck.Name == oidc.StateCookie && ck.MaxAge >= 0 {
			t.Fatalf("the state cookie is not cleared: %+v", ck)
		}
	}
}

// TestOIDCSignInBeginCookie: the state cookie is HttpOnly, Secure,
// SameSite=Lax (it must come back with the provider's redirect), short,
// and only for the callback; the authorization request carries PKCE S256,
// a state and a nonce.
func TestOIDCSignInBeginCookie(t *testing.T) {
	t.Parallel()
	c := startOIDCConsole(t)
	hc := c.browser()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, _ := get(t, hc, c.url+browse.ExternalStartPath)
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc.String(), c.prov.URL+"/authorize?") {
		t.Fatalf("begin: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	q := loc.Query()
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || len(q.Get("state")) < 43 ||
		len(q.Get("nonce")) < 43 || q.Get("redirect_uri") != c.url+oidc.CallbackPath || !strings.HasPrefix(q.Get("scope"), "openid") {
		t.Fatalf("authorization request %v", q)
	}
	cks := resp.Cookies()
	if len(cks) != 1 || cks[0].Name != oidc.StateCookie || !cks[0].HttpOnly || !cks[0].Secure || cks[0].SameSite != http.SameSiteLaxMode ||
		cks[0].Path != oidc.CallbackPath || cks[0].MaxAge <= 0 || cks[0].MaxAge > 600 || strings.Contains(cks[0].Value, q.Get("state")) {
		t.Fatalf("state cookie %+v", cks)
	}
}

// TestOIDCSignInRefusals: each callback an attacker can bring signs no
// one in.
func TestOIDCSignInRefusals(t *testing.T) {
	t.Parallel()
	mutated := func(f func(jwt.MapClaims)) func(*oidcConsole, *http.Client) string {
		return func(c *oidcConsole, hc *http.Client) string {
			c.prov.SetMutate(f)
			return c.callbackURL(hc)
		}
	}
	tests := []struct {
		name string
		// callback returns the callback URL the browser hc is made to
		// open.
		callback func(c *oidcConsole, hc *http.Client) string
	}{
		{"no state", func(c *oidcConsole, hc *http.Client) string {
			u, _ := url.Parse(c.callbackURL(hc))
			q := u.Query()
			q.Del("state")
			u.RawQuery = q.Encode()
			return u.String()
		}},
		{"a state this console never issued", func(c *oidcConsole, hc *http.Client) string {
			u, _ := url.Parse(c.callbackURL(hc))
			q := u.Query()
			q.Set("state", strings.Repeat("A", 43))
			u.RawQuery = q.Encode()
			return u.String()
		}},
		{"another browser's state and code (login CSRF)", func(c *oidcConsole, hc *http.Client) string {
			c.callbackURL(hc) // the victim has a flow of their own, and its cookie
			return c.callbackURL(c.browser())
		}},
		{"a state without its cookie", func(c *oidcConsole, _ *http.Client) string {
			return c.callbackURL(c.browser())
		}},
		{"a replayed code and state", func(c *oidcConsole, hc *http.Client) string {
			u := c.callbackURL(hc)
			at := mustURL(c.url + oidc.CallbackPath)
			state := hc.Jar.Cookies(at) // the state cookie, which the first use clears
			if resp, _ := get(c.t, hc, u); resp.StatusCode != http.StatusOK {
				c.t.Fatalf("the first use: %d", resp.StatusCode)
			}
			// The replay comes from a browser with the state cookie as it
			// was, and no session.
			jar, _ := cookiejar.New(nil)
			jar.SetCookies(at, state)
			hc.Jar = jar
			return u
		}},
		{"an ID token for another client", mutated(func(m jwt.MapClaims) { m["aud"] = "another-client" })},
		{"an ID token for several clients, authorized for another", mutated(func(m jwt.MapClaims) {
			m["aud"] = []string{"toolgate-console", "another-client"}
			m["azp"] = "another-client"
		})},
		{"an ID token of another issuer", mutated(func(m jwt.MapClaims) { m["iss"] = "https://evil.example" })},
		{"an expired ID token", mutated(func(m jwt.MapClaims) { m["exp"] = time.Now().Add(-time.Hour).Unix() })},
		{"an ID token with another nonce", mutated(func(m jwt.MapClaims) { m["nonce"] = "chosen-by-the-attacker" })},
		{"an ID token without a nonce", mutated(func(m jwt.MapClaims) { delete(m, "nonce") })},
		{"an answer naming another issuer", func(c *oidcConsole, hc *http.Client) string {
			u, _ := url.Parse(c.callbackURL(hc))
			q := u.Query()
			q.Set("iss", "https://evil.example")
			u.RawQuery = q.Encode()
			return u.String()
		}},
		{"an error from the provider", func(c *oidcConsole, hc *http.Client) string {
			u, _ := url.Parse(c.callbackURL(hc))
			q := u.Query()
			q.Del("code")
			q.Set("error", "access_denied<script>")
			u.RawQuery = q.Encode()
			return u.String()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startOIDCConsole(t)
			hc := c.browser()
			target := tc.callback(c, hc)
			resp, body := get(t, hc, target)
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "<script>") {
				t.Fatalf("callback: %d, want 401\n%s", resp.StatusCode, body)
			}
			if ok, _ := c.signedIn(hc); ok {
				t.Fatal("signed in")
			}
			if tc.name == "a replayed code and state" && c.prov.TokenRequests() != 1 {
				t.Fatalf("token requests: %d, want the first only: the console refuses a used state itself", c.prov.TokenRequests())
			}
		})
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestOIDCSignInNoOpenRedirect: no parameter sends the browser or the
// code anywhere but the console: not begin's, not the callback's, not the
// Host header.
func TestOIDCSignInNoOpenRedirect(t *testing.T) {
	t.Parallel()
	c := startOIDCConsole(t)
	evil := "https://evil.example/steal"
	hc := c.browser()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, _ := get(t, hc, c.url+browse.ExternalStartPath+"?redirect_uri="+url.QueryEscape(evil)+"&next="+url.QueryEscape(evil)+
		"&return_to="+url.QueryEscape(evil))
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if loc == nil || loc.Query().Get("redirect_uri") != c.url+oidc.CallbackPath || strings.Contains(loc.String(), "evil") {
		t.Fatalf("begin with hostile parameters sends the browser to %q", resp.Header.Get("Location"))
	}

	// The callback's extra parameters change nothing: the signed-in page
	// links to /requests only.
	hc = c.browser()
	back, _ := url.Parse(c.callbackURL(hc))
	q := back.Query()
	for _, k := range []string{"next", "redirect_uri", "return_to", "url"} {
		q.Set(k, evil)
	}
	back.RawQuery = q.Encode()
	resp, body := get(t, hc, back.String())
	if resp.StatusCode != http.StatusOK || strings.Contains(body, "evil") || resp.Request.URL.Host != strings.TrimPrefix(c.url, "https://") {
		t.Fatalf("callback with hostile parameters: %d at %s\n%s", resp.StatusCode, resp.Request.URL, body)
	}

	// A begin under another Host is refused, with no cookie and no
	// redirect.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, c.url+browse.ExternalStartPath, nil)
	req.Host = "evil.example"
	hc = c.browser()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || len(resp.Cookies()) != 0 {
		t.Fatalf("begin under Host evil.example: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
}
