// Package oauth makes a front door an OAuth 2.1 resource server, as the MCP
// authorization specification asks of one: it verifies JWT access tokens
// signed by one configured issuer (keys from a JWKS file or URL) for one
// resource (RFC 8707 audience), maps their claims onto the caller name,
// groups and roles Cedar sees, answers a refused request with the 401 or
// 403 and WWW-Authenticate challenge clients discover the issuer from,
// and serves the protected-resource metadata of RFC 9728.
//
// A token is only ever verified: it is never logged, recorded or sent on
// (no token passthrough). What the gateway keeps of it is the issuer,
// subject and token id, in gateway.Identity.
package oauth

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The defaults of Config, in one place.
const (
	// DefaultJWKSRefresh is how long a JWKS fetched from jwks_url is used
	// before it is fetched again.
	DefaultJWKSRefresh = 10 * time.Minute
	// DefaultLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultLeeway = 60 * time.Second
	// DefaultCallerClaim is the claim naming the caller.
	DefaultCallerClaim = "sub"
	// DefaultCallerPrefix is put before the caller claim, so that a token
	// never names a caller of auth.keys by accident.
	DefaultCallerPrefix = "oauth:"
	// minRefetch is the least time between two fetches of jwks_url,
	// whatever asks for them (an unknown kid, an expired set).
	minRefetch = 30 * time.Second
	// maxLeeway bounds leeway: more would keep expired tokens alive.
	maxLeeway = 5 * time.Minute
	// maxJWKSRefresh bounds jwks_refresh: a revoked key must go away.
	maxJWKSRefresh = 24 * time.Hour
)

// DefaultAlgorithms are the signature algorithms accepted when algorithms
// is unset.
var DefaultAlgorithms = []string{"RS256", "PS256", "ES256", "ES384", "EdDSA"}

// supportedAlgorithms are those the JWKS decoder has keys for.
var supportedAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}

var (
	// prefixPattern is a caller_prefix that keeps the caller name valid.
	prefixPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._@:-]{0,63})?$`)
	// claimPattern is a claim name we look up.
	claimPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}$`)
	// scopePattern is RFC 6749's scope-token; it also keeps a scope safe
	// inside the quoted string of a WWW-Authenticate header.
	scopePattern = regexp.MustCompile(`^[\x21\x23-\x5B\x5D-\x7E]{1,128}$`)
	// resourcePathPattern keeps the resource's path usable as a route.
	resourcePathPattern = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)*$`)
	// rolePattern is a role or group name mapped from a scope.
	rolePattern = regexp.MustCompile(`^[^\x00-\x1f\x7f]{1,256}$`)
)

// Config is an OAuth resource server's settings, the oauth key of a door's
// section (front_doors.mcp.oauth). Zero fields take the defaults above.
type Config struct {
	// Resource is this server's resource identifier: the audience a token
	// must name (RFC 8707) and the "resource" of the metadata (RFC 9728),
	// e.g. https://gw.example.com/mcp. Required; https, or http on a
	// loopback host; no query or fragment.
	Resource string `yaml:"resource"`
	// Issuer is the authorization server: a token's iss must equal it
	// exactly, and the metadata lists it in authorization_servers.
	// Required; https, or http on a loopback host.
	Issuer string `yaml:"issuer"`
	// JWKSFile is a JSON Web Key Set file holding the issuer's public
	// keys, read again whenever its modification time or size changes.
	JWKSFile string `yaml:"jwks_file" secret:"public"`
	// JWKSURL is where the issuer publishes its JWKS (https, or http on a
	// loopback host). Give jwks_file or jwks_url. Fetched at start (a
	// failure is logged and tokens are refused until a fetch succeeds),
	// again after jwks_refresh, and at once for a token whose kid is
	// unknown; never more often than every 30 s, with a 5 s timeout, a
	// 1 MiB cap and no redirects. A failed fetch keeps the set it had,
	// for at most four times jwks_refresh.
	JWKSURL string `yaml:"jwks_url"`
	// JWKSRefresh is how long a fetched set is used before it is fetched
	// again; default 10m, at least 30s, at most 24h.
	JWKSRefresh time.Duration `yaml:"jwks_refresh"`
	// Algorithms are the signature algorithms accepted (the token header's
	// alg); default RS256, PS256, ES256, ES384, EdDSA. "none" and the
	// shared-secret HS* are refused.
	Algorithms []string `yaml:"algorithms"`
	// Leeway is the clock skew allowed on exp, nbf and iat; default 60s,
	// at most 5m. Set 0s for none.
	Leeway *time.Duration `yaml:"leeway"`
	// RequiredScopes must all be granted by a token (its scope or scp
	// claim); a token missing one is answered 403 insufficient_scope.
	RequiredScopes []string `yaml:"required_scopes"`
	// ScopesSupported are published in the metadata; default
	// required_scopes.
	ScopesSupported []string `yaml:"scopes_supported"`
	// CallerClaim is the claim whose value names the caller: sub (the
	// default), email, client_id, azp …; a string.
	CallerClaim string `yaml:"caller_claim"`
	// CallerPrefix is put before the claim's value; default "oauth:". The
	// result is the caller Cedar sees, and must be a valid caller name
	// (as auth.keys.caller) or the token is refused. An empty prefix lets
	// a token name an auth.keys caller: set it so only on purpose.
	CallerPrefix *string `yaml:"caller_prefix"`
	// GroupsClaim and RolesClaim name claims (a string array, or a
	// space-separated string) whose values become the caller's groups and
	// roles in Cedar; unset, none are read.
	GroupsClaim string `yaml:"groups_claim"`
	RolesClaim  string `yaml:"roles_claim"`
	// ScopeRoles gives the roles listed to a token granting the scope:
	// {toolgate.approve: [approver]}.
	ScopeRoles map[string][]string `yaml:"scope_roles"`
}

// withDefaults returns c with every unset field at its default.
func (c Config) withDefaults() Config {
	if c.JWKSRefresh == 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = slices.Clone(DefaultAlgorithms)
	}
	if c.Leeway == nil {
		l := DefaultLeeway
		c.Leeway = &l
	}
	if len(c.ScopesSupported) == 0 {
		c.ScopesSupported = slices.Clone(c.RequiredScopes)
	}
	if c.CallerClaim == "" {
		c.CallerClaim = DefaultCallerClaim
	}
	if c.CallerPrefix == nil {
		p := DefaultCallerPrefix
		c.CallerPrefix = &p
	}
	return c
}

// Validate checks the settings; each error starts with the key at fault.
// It touches neither the file system nor the network.
func (c *Config) Validate() error {
	d := c.withDefaults()
	if err := checkURL("resource", d.Resource, true); err != nil {
		return err
	}
	if err := checkURL("issuer", d.Issuer, true); err != nil {
		return err
	}
	switch {
	case d.JWKSFile == "" && d.JWKSURL == "":
		return errors.New("jwks_file: give jwks_file or jwks_url (the issuer's public keys)")
	case d.JWKSFile != "" && d.JWKSURL != "":
		return errors.New("jwks_url: give jwks_file or jwks_url, not both")
	case d.JWKSURL != "":
		if err := checkURL("jwks_url", d.JWKSURL, false); err != nil {
			return err
		}
	}
	if d.JWKSRefresh < minRefetch || d.JWKSRefresh > maxJWKSRefresh {
		return fmt.Errorf("jwks_refresh: %v: must be between %v and %v", d.JWKSRefresh, minRefetch, maxJWKSRefresh)
	}
	if err := checkAlgorithms(d.Algorithms); err != nil {
		return err
	}
	if *d.Leeway < 0 || *d.Leeway > maxLeeway {
		return fmt.Errorf("leeway: %v: must be between 0s and %v", *d.Leeway, maxLeeway)
	}
	return d.validateClaims()
}

// validateClaims checks the keys that map a token's claims.
func (c Config) validateClaims() error {
	for key, scopes := range [][]string{c.RequiredScopes, c.ScopesSupported} {
		for _, s := range scopes {
			if !scopePattern.MatchString(s) {
				return fmt.Errorf("%s: %q: not a scope (printable ASCII without spaces, quotes or backslashes)",
					[]string{"required_scopes", "scopes_supported"}[key], s)
			}
		}
	}
	for key, claim := range []string{c.CallerClaim, c.GroupsClaim, c.RolesClaim} {
		if claim != "" && !claimPattern.MatchString(claim) {
			return fmt.Errorf("%s: %q: must match %s", []string{"caller_claim", "groups_claim", "roles_claim"}[key], claim, claimPattern)
		}
	}
	if !prefixPattern.MatchString(*c.CallerPrefix) {
		return fmt.Errorf("caller_prefix: %q: must match %s, so that the caller name stays valid", *c.CallerPrefix, prefixPattern)
	}
	for _, scope := range slices.Sorted(maps.Keys(c.ScopeRoles)) {
		roles := c.ScopeRoles[scope]
		if !scopePattern.MatchString(scope) {
			return fmt.Errorf("scope_roles: %q: not a scope", scope)
		}
		if len(roles) == 0 {
			return fmt.Errorf("scope_roles.%s: list the roles the scope gives", scope)
		}
		for _, r := range roles {
			if !rolePattern.MatchString(r) {
				return fmt.Errorf("scope_roles.%s: %q: a role is 1 to 256 characters without control characters", scope, r)
			}
		}
	}
	return nil
}

// checkAlgorithms refuses what can never verify a public-key signature.
func checkAlgorithms(algs []string) error {
	for _, a := range algs {
		switch {
		case strings.EqualFold(a, "none"):
			return errors.New("algorithms: none: unsigned tokens are never accepted")
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return fmt.Errorf("algorithms: %s: shared-secret algorithms are refused (a JWKS holds public keys, "+
				"and HS* verified with a public key lets anyone sign)", a)
		case !slices.Contains(supportedAlgorithms, a):
			return fmt.Errorf("algorithms: %q: not supported (supported: %s)", a, strings.Join(supportedAlgorithms, ", "))
		}
	}
	return nil
}

// checkURL checks an absolute https URL (or http on a loopback host),
// without credentials or fragment; identifier URLs (resource, issuer) also
// without a query, and a resource's path must be usable as a route.
func checkURL(key, raw string, identifier bool) error {
	if raw == "" {
		return fmt.Errorf("%s: required", key)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	switch {
	case u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname())):
		return fmt.Errorf("%s: %q: must be an https URL (http only on a loopback host)", key, raw)
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%s: %q: must be an absolute URL with a host", key, raw)
	case u.User != nil:
		return fmt.Errorf("%s: %q: must not carry credentials", key, raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("%s: %q: must not have a fragment", key, raw)
	case identifier && (u.RawQuery != "" || u.ForceQuery):
		return fmt.Errorf("%s: %q: must not have a query", key, raw)
	case key == "resource" && (!resourcePathPattern.MatchString(strings.TrimSuffix(u.EscapedPath(), "/")) || strings.HasSuffix(u.Path, "//")):
		return fmt.Errorf("%s: %q: the path may hold only letters, digits and ._~- between slashes", key, raw)
	}
	return nil
}

// loopbackHost reports whether host names this machine only.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
