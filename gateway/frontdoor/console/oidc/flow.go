package oidc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
)

// Limits of the flow.
const (
	// StateCookie binds a sign-in's state to the browser that began it.
	StateCookie = "toolgate_console_oidc"
	// flowTTL is how long a begun sign-in may take at the provider.
	flowTTL = 10 * time.Minute
	// maxPending bounds the sign-ins begun and not finished.
	maxPending = 10000
	// fetchTimeout bounds a request to the provider.
	fetchTimeout = 5 * time.Second
	// maxBody caps what the provider's discovery and token answers may be.
	maxBody = 1 << 20
	// maxCode caps an authorization code before it is sent anywhere.
	maxCode = 2048
)

// ErrRefused is wrapped by every error of Finish: the callback signs no
// one in.
var ErrRefused = errors.New("oidc: sign-in refused")

// Client runs the flow against one provider for one console.
type Client struct {
	cfg      Config
	secret   string
	redirect *url.URL
	attrs    func(caller string) (groups, roles []string)
	hc       *http.Client
	now      func() time.Time
	log      *slog.Logger

	mu      sync.Mutex
	prov    *provider // nil until discovery succeeds
	pending map[string]pending
}

// provider is what discovery found.
type provider struct {
	authURL, tokenURL string
	ids               *oauth.IDTokenVerifier
}

// pending is one begun sign-in, by its state.
type pending struct {
	binding        [32]byte // SHA-256 of the browser's cookie
	verifier, nonc string
	expires        time.Time
}

// Options change New's defaults.
type Options struct {
	// HTTPClient talks to the provider (default: 5 s timeout, no
	// redirects).
	HTTPClient *http.Client
	Now        func() time.Time
	Logger     *slog.Logger
}

// New returns a client for cfg, which must be valid; getenv reads the
// client secret from the environment. attrs gives the groups and roles
// the configuration already has for a caller name. The provider is
// discovered at the first sign-in, and again after a failure.
func New(cfg Config, getenv func(string) string, attrs func(string) ([]string, []string), o Options) (*Client, error) {
	secret, err := cfg.ClientSecret.Read(getenv)
	if err != nil {
		return nil, fmt.Errorf("console.oidc.client_secret: %w", err)
	}
	redirect, err := url.Parse(cfg.RedirectURL)
	if err != nil {
		return nil, fmt.Errorf("console.oidc.redirect_url: %w", err)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: fetchTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, secret: strings.TrimRight(string(secret), "\r\n"), redirect: redirect, attrs: attrs,
		hc: o.HTTPClient, now: o.Now, log: o.Logger, pending: map[string]pending{}}, nil
}

// Label is the sign-in link's text.
func (c *Client) Label() string {
	u, _ := url.Parse(c.cfg.Issuer) // validated
	return "Sign in with " + u.Host
}

// Begin sends the browser to the provider's authorization endpoint with
// a new state, PKCE challenge and nonce, and sets the cookie that binds
// the state to this browser. Nothing of the request but its Host is read:
// where the provider sends the browser back is the configured redirect
// URL, and a request for another host is refused, so that the cookie is
// set where the callback will come.
func (c *Client) Begin(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Host, c.redirect.Host) {
		return fmt.Errorf("%w: open the console at %s://%s to sign in", ErrRefused, c.redirect.Scheme, c.redirect.Host)
	}
	prov, err := c.discover(r.Context())
	if err != nil {
		return err
	}
	browser, state, verifier, nonce := random(), random(), random(), random()
	if err := c.remember(state, pending{binding: sha256.Sum256([]byte(browser)), verifier: verifier, nonc: nonce,
		expires: c.now().Add(flowTTL)}); err != nil {
		return err
	}
	auth, _ := url.Parse(prov.authURL) // checked by discover
	q := auth.Query()
	challenge := sha256.Sum256([]byte(verifier))
	for k, v := range map[string]string{
		"response_type": "code", "client_id": c.cfg.ClientID, "redirect_uri": c.cfg.RedirectURL,
		"scope": c.scope(), "state": state, "nonce": nonce,
		"code_challenge": base64.RawURLEncoding.EncodeToString(challenge[:]), "code_challenge_method": "S256",
	} {
		q.Set(k, v)
	}
	auth.RawQuery = q.Encode()
	http.SetCookie(w, &http.Cookie{Name: StateCookie, Value: browser, Path: CallbackPath, MaxAge: int(flowTTL.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, auth.String(), http.StatusSeeOther)
	return nil
}

func (c *Client) scope() string {
	scopes := []string{"openid"}
	if c.cfg.Scopes == nil {
		scopes = append(scopes, "profile", "email")
	}
	for _, s := range c.cfg.Scopes {
		if s != "openid" {
			scopes = append(scopes, s)
		}
	}
	return strings.Join(scopes, " ")
}

// remember keeps a begun sign-in, refusing when too many are pending.
func (c *Client) remember(state string, p pending) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) >= maxPending {
		now := c.now()
		for s, old := range c.pending {
			if !now.Before(old.expires) {
				delete(c.pending, s)
			}
		}
		if len(c.pending) >= maxPending {
			return fmt.Errorf("%w: too many sign-ins under way; try again later", ErrRefused)
		}
	}
	c.pending[state] = p
	return nil
}

// take removes and returns the sign-in of state: a state is used once,
// whatever the outcome.
func (c *Client) take(state string) (pending, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[state]
	delete(c.pending, state)
	return p, ok
}

// Finish completes the sign-in the provider sent the browser back from:
// the state must be one this console began, not used before, not
// expired, and bound to this browser's cookie; the code is exchanged with
// the PKCE verifier and the client secret; the ID token must verify for
// this client with the sign-in's nonce. It returns the caller and when
// the session must end at the latest. The state cookie is cleared.
func (c *Client) Finish(w http.ResponseWriter, r *http.Request) (frontdoor.Principal, time.Time, error) {
	http.SetCookie(w, &http.Cookie{Name: StateCookie, Path: CallbackPath, MaxAge: -1, HttpOnly: true, Secure: true,
		SameSite: http.SameSiteLaxMode})
	q := r.URL.Query()
	p, ok := c.take(q.Get("state"))
	cookie, err := r.Cookie(StateCookie)
	switch {
	case !ok:
		return refused("unknown or used state")
	case err != nil:
		return refused("no state cookie: the sign-in was begun in another browser")
	case subtle.ConstantTimeCompare(p.binding[:], sha(cookie.Value)) != 1:
		return refused("the state belongs to another browser")
	case !c.now().Before(p.expires):
		return refused("the sign-in took longer than %v", flowTTL)
	case q.Get("error") != "":
		return refused("the provider answered %s", printable(q.Get("error")))
	case q.Has("iss") && q.Get("iss") != c.cfg.Issuer:
		return refused("the answer comes from another issuer")
	case q.Get("code") == "" || len(q.Get("code")) > maxCode:
		return refused("no authorization code")
	}
	prov, err := c.discover(r.Context())
	if err != nil {
		return frontdoor.Principal{}, time.Time{}, err
	}
	idToken, expiresIn, err := c.redeem(r.Context(), prov, q.Get("code"), p.verifier)
	if err != nil {
		return frontdoor.Principal{}, time.Time{}, err
	}
	who, exp, err := prov.ids.Verify(r.Context(), idToken, p.nonc)
	if err != nil {
		return refused("ID token: %v", err)
	}
	if expiresIn > 0 {
		exp = minTime(exp, c.now().Add(expiresIn))
	}
	return who, exp, nil
}

func refused(format string, args ...any) (frontdoor.Principal, time.Time, error) {
	return frontdoor.Principal{}, time.Time{}, fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

func sha(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// printable keeps an error code from the query fit for a log line: RFC
// 6749's error codes are short ASCII words.
func printable(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// redeem exchanges the code at the token endpoint (client secret by HTTP
// Basic, RFC 6749 2.3.1) and returns the ID token and the access token's
// lifetime.
func (c *Client) redeem(ctx context.Context, prov *provider, code, verifier string) (string, time.Duration, error) {
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {c.cfg.RedirectURL},
		"client_id": {c.cfg.ClientID}, "code_verifier": {verifier}}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, prov.tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("%w: token endpoint: %w", ErrRefused, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(c.cfg.ClientID), url.QueryEscape(c.secret))
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w: token endpoint: %w", ErrRefused, err)
	}
	defer resp.Body.Close()
	var answer struct {
		IDToken   string `json:"id_token"`
		ExpiresIn int64  `json:"expires_in"`
		Error     string `json:"error"`
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err == nil {
		err = json.Unmarshal(data, &answer)
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		return "", 0, fmt.Errorf("%w: token endpoint: HTTP %d %s", ErrRefused, resp.StatusCode, printable(answer.Error))
	case err != nil:
		return "", 0, fmt.Errorf("%w: token endpoint: %w", ErrRefused, err)
	case answer.IDToken == "":
		return "", 0, fmt.Errorf("%w: token endpoint: no id_token", ErrRefused)
	}
	return answer.IDToken, time.Duration(max(answer.ExpiresIn, 0)) * time.Second, nil
}

// discover fetches the provider's metadata once it succeeds; the issuer
// it names must be the configured one exactly, and its endpoints https
// (or http on loopback).
func (c *Client) discover(ctx context.Context) (*provider, error) {
	c.mu.Lock()
	prov := c.prov
	c.mu.Unlock()
	if prov != nil {
		return prov, nil
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		Auth    string   `json:"authorization_endpoint"`
		Token   string   `json:"token_endpoint"`
		JWKSURI string   `json:"jwks_uri"`
		Methods []string `json:"code_challenge_methods_supported"`
	}
	if err := c.getJSON(ctx, strings.TrimSuffix(c.cfg.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
		return nil, fmt.Errorf("%w: discovery: %w", ErrRefused, err)
	}
	if doc.Issuer != c.cfg.Issuer {
		return nil, fmt.Errorf("%w: discovery names issuer %q, not %q", ErrRefused, printable(doc.Issuer), c.cfg.Issuer)
	}
	if len(doc.Methods) > 0 && !slices.Contains(doc.Methods, "S256") {
		return nil, fmt.Errorf("%w: discovery: the provider does not support PKCE with S256", ErrRefused)
	}
	for key, u := range map[string]string{"authorization_endpoint": doc.Auth, "token_endpoint": doc.Token} {
		if err := checkEndpoint(key, u); err != nil {
			return nil, fmt.Errorf("%w: discovery: %w", ErrRefused, err)
		}
	}
	prefix := DefaultCallerPrefix
	if c.cfg.CallerPrefix != nil {
		prefix = *c.cfg.CallerPrefix
	}
	ids, err := oauth.NewIDTokenVerifier(ctx, oauth.Config{Issuer: c.cfg.Issuer, JWKSURL: doc.JWKSURI,
		CallerClaim: c.cfg.CallerClaim, CallerPrefix: &prefix, GroupsClaim: c.cfg.GroupsClaim, RolesClaim: c.cfg.RolesClaim},
		c.cfg.ClientID, c.attrs, oauth.WithClock(c.now), oauth.WithLogger(c.log))
	if err != nil {
		return nil, fmt.Errorf("%w: discovery: %w", ErrRefused, err)
	}
	prov = &provider{authURL: doc.Auth, tokenURL: doc.Token, ids: ids}
	c.mu.Lock()
	c.prov = prov
	c.mu.Unlock()
	return prov, nil
}

func (c *Client) getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d (redirects are not followed)", resp.StatusCode)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(v)
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}
