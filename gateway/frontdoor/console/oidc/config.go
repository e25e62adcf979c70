// Package oidc signs people in to the console with an OpenID Connect
// provider: the authorization-code flow with PKCE (S256), a random state
// bound to the browser by a short-lived cookie, a nonce checked in the ID
// token, the provider found by discovery (its issuer must match exactly)
// and the ID token verified against its JWKS by package oauth's verifier.
// It knows nothing of sessions: Finish returns the caller the ID token
// proves, and the console starts the session.
package oidc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
)

// CallbackPath is where the provider sends the browser back; the
// redirect URL is the console's origin and this path, nothing else.
const CallbackPath = browse.ExternalCallbackPath

// Config is the console's oidc section.
type Config struct {
	// Issuer is the provider's issuer identifier: discovery is fetched
	// from <issuer>/.well-known/openid-configuration and must name it
	// exactly, as must every ID token's iss.
	Issuer string `yaml:"issuer"`
	// ClientID is the console's client id at the provider: the audience
	// of its ID tokens.
	ClientID string `yaml:"client_id"`
	// ClientSecret is read from a file or an environment variable, never
	// from the configuration itself.
	ClientSecret ClientSecret `yaml:"client_secret"`
	// RedirectURL is the console's own origin followed by
	// /signin/oidc/callback, as registered at the provider.
	RedirectURL string `yaml:"redirect_url"`
	// Scopes asked for besides openid (default: profile email).
	Scopes []string `yaml:"scopes"`
	// CallerClaim, CallerPrefix, GroupsClaim and RolesClaim map the ID
	// token's claims as front_doors.mcp.oauth's keys of the same names
	// do (default: sub, prefixed "oidc:").
	CallerClaim  string  `yaml:"caller_claim"`
	CallerPrefix *string `yaml:"caller_prefix"`
	GroupsClaim  string  `yaml:"groups_claim"`
	RolesClaim   string  `yaml:"roles_claim"`
}

// DefaultCallerPrefix is put before the caller claim's value.
const DefaultCallerPrefix = "oidc:"

var (
	clientIDPattern = regexp.MustCompile(`^[\x21-\x7E]{1,256}$`)
	scopePattern    = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,128}$`)
)

// Configured reports whether the section is set.
func (c *Config) Configured() bool { return c != nil && c.Issuer != "" }

// Validate checks the section for a console that serves TLS (tls) or
// not; each error names the key at fault. It reads neither files nor the
// network: the secret is read when the console starts.
func (c *Config) Validate(tls bool) error {
	if err := checkEndpoint("issuer", c.Issuer); err != nil {
		return err
	}
	if u, _ := url.Parse(c.Issuer); u.RawQuery != "" || u.ForceQuery {
		return fmt.Errorf("console.oidc.issuer %q: must not have a query", c.Issuer)
	}
	if !clientIDPattern.MatchString(c.ClientID) {
		return errors.New("console.oidc.client_id: required, 1 to 256 printable characters")
	}
	switch s := c.ClientSecret; {
	case s.File == "" && s.Env == "":
		return errors.New("console.oidc.client_secret: give file or env (the secret is never written in the configuration)")
	case s.File != "" && s.Env != "":
		return errors.New("console.oidc.client_secret: give file or env, not both")
	}
	if err := checkRedirect(c.RedirectURL, tls); err != nil {
		return err
	}
	for _, s := range c.Scopes {
		if !scopePattern.MatchString(s) {
			return fmt.Errorf("console.oidc.scopes: %q: not a scope", s)
		}
	}
	return nil
}

// CheckListen refuses a redirect URL on loopback that cannot be the
// console listening on listen: another port, or a console that is not on
// loopback (a redirect to this machine's loopback would then reach
// whatever listens there, not the console). A redirect to another host
// name is the console's public name behind a proxy, which cannot be
// checked here.
func (c *Config) CheckListen(listen string) error {
	u, err := url.Parse(c.RedirectURL)
	if err != nil || !loopback(u.Hostname()) {
		return nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil // the listener's own check reports it
	}
	if !loopback(host) {
		return fmt.Errorf("console.oidc.redirect_url %q: on loopback, but console.listen %q is not", c.RedirectURL, listen)
	}
	if port != "0" && u.Port() != port {
		return fmt.Errorf("console.oidc.redirect_url %q: not the port of console.listen %q", c.RedirectURL, listen)
	}
	return nil
}

// checkRedirect: the console's own origin (https, or http on loopback
// when the console serves no TLS) and the callback path, nothing more.
func checkRedirect(raw string, tls bool) error {
	if err := checkEndpoint("redirect_url", raw); err != nil {
		return err
	}
	u, _ := url.Parse(raw)
	switch {
	case u.Path != CallbackPath || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery:
		return fmt.Errorf("console.oidc.redirect_url %q: must be the console's origin followed by %s", raw, CallbackPath)
	case tls && u.Scheme != "https":
		return fmt.Errorf("console.oidc.redirect_url %q: the console serves TLS: https", raw)
	}
	return nil
}

// checkEndpoint accepts an absolute https URL, or http on a loopback
// host, without credentials or fragment.
func checkEndpoint(key, raw string) error {
	if raw == "" {
		return fmt.Errorf("console.oidc.%s: required", key)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("console.oidc.%s: %w", key, err)
	case u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname())):
		return fmt.Errorf("console.oidc.%s %q: must be https (http only on a loopback host)", key, raw)
	case u.Host == "" || u.Opaque != "" || u.User != nil || strings.Contains(raw, "#"):
		return fmt.Errorf("console.oidc.%s %q: must be an absolute URL with a host, without credentials or fragment", key, raw)
	}
	return nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
