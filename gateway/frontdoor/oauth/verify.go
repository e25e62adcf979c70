package oauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/ident"
)

// maxTokenBytes caps a token before anything of it is decoded.
const maxTokenBytes = 8 << 10

// maxKidBytes caps a kid, in a token header as in a JWKS.
const maxKidBytes = 256

// ErrInvalidToken is wrapped by every error of Verify but a missing scope:
// the token proves nothing (RFC 6750 invalid_token, HTTP 401).
var ErrInvalidToken = errors.New("oauth: invalid token")

// ErrInsufficientScope is wrapped by Verify's error for a valid token that
// lacks a required scope (RFC 6750 insufficient_scope, HTTP 403).
var ErrInsufficientScope = errors.New("oauth: insufficient scope")

// Verifier verifies access tokens for one resource, and answers for it.
type Verifier struct {
	cfg    Config // with defaults
	keys   keySource
	parser *jwt.Parser
	attrs  func(caller string) (groups, roles []string)
	meta   oauthex.ProtectedResourceMetadata
	now    func() time.Time
	log    *slog.Logger
}

// Option changes how NewVerifier builds a Verifier.
type Option func(*options)

type options struct {
	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	minGap time.Duration
}

// WithLogger sets the logger (default: discard). Tokens are never logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock tokens and the JWKS cache are checked against.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithHTTPClient sets the client jwks_url is fetched with (default: a
// 5 s timeout, no redirects).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// NewVerifier returns a verifier for cfg, which must be valid. It reads
// jwks_file (an error if it cannot) or fetches jwks_url once (a failure is
// logged; tokens are refused until a later fetch succeeds). attrs, when
// not nil, gives the groups and roles the configuration already has for
// a caller name; they are joined to the token's.
func NewVerifier(ctx context.Context, cfg *Config, attrs func(caller string) (groups, roles []string), opts ...Option) (*Verifier, error) {
	if cfg == nil {
		return nil, errors.New("oauth: NewVerifier: no configuration")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	o := options{log: slog.New(slog.DiscardHandler), now: time.Now, minGap: minRefetch}
	for _, opt := range opts {
		opt(&o)
	}
	c := cfg.withDefaults()
	v := &Verifier{cfg: c, attrs: attrs, now: o.now, log: o.log}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(c.Algorithms),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(*c.Leeway),
		jwt.WithIssuer(c.Issuer),
		jwt.WithTimeFunc(o.now),
		jwt.WithStrictDecoding(),
	)
	v.meta = oauthex.ProtectedResourceMetadata{
		Resource:               c.Resource,
		AuthorizationServers:   []string{c.Issuer},
		ScopesSupported:        c.ScopesSupported,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Toolgate",
	}
	if c.JWKSFile != "" {
		f, err := newFileKeys(c.JWKSFile, o.now, o.log)
		if err != nil {
			return nil, err
		}
		v.keys = f
		return v, nil
	}
	if o.client == nil {
		o.client = newURLClient()
	}
	u := &urlKeys{url: c.JWKSURL, client: o.client, ttl: c.JWKSRefresh, minGap: o.minGap, now: o.now, log: o.log}
	_, _ = u.fetchFunc(ctx)() // a failure is logged; refused tokens retry it
	v.keys = u
	return v, nil
}

// invalid wraps err as an invalid token.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidToken, fmt.Sprintf(format, args...))
}

// Verify checks token (the bearer credential, without "Bearer ") and
// returns the caller it proves: size, alg allow-list, kid, signature, exp
// (required), nbf and iat within the leeway, iss, aud, the caller claim,
// then the required scopes. It never logs or keeps token.
func (v *Verifier) Verify(ctx context.Context, token string) (frontdoor.Principal, error) {
	if len(token) > maxTokenBytes {
		return frontdoor.Principal{}, invalid("longer than %d bytes", maxTokenBytes)
	}
	if strings.Count(token, ".") != 2 {
		return frontdoor.Principal{}, invalid("not a JWS compact token")
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keyFunc(ctx)); err != nil {
		return frontdoor.Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	aud, err := claims.GetAudience()
	if err != nil || !oauthex.MatchesResource(aud, v.cfg.Resource) {
		return frontdoor.Principal{}, invalid("audience does not name this resource")
	}
	p, err := v.principal(claims)
	if err != nil {
		return frontdoor.Principal{}, err
	}
	scopes, err := claimStrings(claims, "scope")
	if err == nil && scopes == nil {
		scopes, err = claimStrings(claims, "scp")
	}
	if err != nil {
		return frontdoor.Principal{}, invalid("scope: %v", err)
	}
	for _, s := range scopes {
		p.Identity.Roles = union(p.Identity.Roles, v.cfg.ScopeRoles[s])
	}
	var missing []string
	for _, s := range v.cfg.RequiredScopes {
		if !slices.Contains(scopes, s) {
			missing = append(missing, s)
		}
	}
	if missing != nil {
		return frontdoor.Principal{}, fmt.Errorf("%w: missing %s", ErrInsufficientScope, strings.Join(missing, " "))
	}
	return p, nil
}

// keyFunc finds the key for a token's header: a kid is required, crit
// headers are refused (none is understood), and the key must suit alg.
func (v *Verifier) keyFunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			return nil, errors.New("crit header: no extension is understood")
		}
		if typ, ok := t.Header["typ"]; ok && !acceptedType(typ) {
			return nil, fmt.Errorf("typ %q: not an access token", fmt.Sprint(typ))
		}
		kid, _ := t.Header["kid"].(string)
		switch {
		case kid == "":
			return nil, errors.New("kid header missing")
		case len(kid) > maxKidBytes:
			// No published key has such a kid (ParseJWKS skips them);
			// refused before it reaches a log line.
			return nil, fmt.Errorf("kid header longer than %d bytes", maxKidBytes)
		}
		set, err := v.keys.keys(ctx, kid)
		if err != nil {
			return nil, err
		}
		keys := set.Lookup(kid, t.Method.Alg())
		if len(keys) == 0 {
			return nil, fmt.Errorf("no key %q for %s in the issuer's key set", kid, t.Method.Alg())
		}
		vs := jwt.VerificationKeySet{}
		for _, k := range keys {
			vs.Keys = append(vs.Keys, k)
		}
		return vs, nil
	}
}

// acceptedType is a typ header of a JWT access token (RFC 9068), or of a
// plain JWT, as many issuers send.
func acceptedType(typ any) bool {
	s, _ := typ.(string)
	switch strings.ToLower(s) {
	case "jwt", "at+jwt", "application/at+jwt":
		return true
	}
	return false
}

// principal maps verified claims onto the caller and its identity.
func (v *Verifier) principal(claims jwt.MapClaims) (frontdoor.Principal, error) {
	name, _ := claims[v.cfg.CallerClaim].(string)
	if name == "" {
		return frontdoor.Principal{}, invalid("claim %s: missing or not a string", v.cfg.CallerClaim)
	}
	caller := *v.cfg.CallerPrefix + name
	if !ident.CallerName.MatchString(caller) {
		return frontdoor.Principal{}, invalid("claim %s: the caller name it gives does not match %s", v.cfg.CallerClaim, ident.CallerName)
	}
	sub, _ := claims["sub"].(string)
	jti, _ := claims["jti"].(string)
	id := &gateway.Identity{Method: "oauth", Issuer: v.cfg.Issuer, Subject: sub, TokenID: jti}
	var err error
	if v.cfg.GroupsClaim != "" {
		if id.Groups, err = claimStrings(claims, v.cfg.GroupsClaim); err != nil {
			return frontdoor.Principal{}, invalid("claim %s: %v", v.cfg.GroupsClaim, err)
		}
	}
	if v.cfg.RolesClaim != "" {
		if id.Roles, err = claimStrings(claims, v.cfg.RolesClaim); err != nil {
			return frontdoor.Principal{}, invalid("claim %s: %v", v.cfg.RolesClaim, err)
		}
	}
	if v.attrs != nil {
		groups, roles := v.attrs(caller)
		id.Groups, id.Roles = union(id.Groups, groups), union(id.Roles, roles)
	}
	return frontdoor.Principal{Caller: caller, Identity: id}, nil
}

// claimStrings reads a claim that is a string array or a space-separated
// string; nil when it is absent. Empty values are dropped.
func claimStrings(claims jwt.MapClaims, name string) ([]string, error) {
	switch c := claims[name].(type) {
	case nil:
		return nil, nil
	case string:
		return union(nil, strings.Fields(c)), nil
	case []any:
		out := make([]string, 0, len(c))
		for _, e := range c {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("want strings")
			}
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return union(nil, out), nil
	}
	return nil, errors.New("want a string array or a space-separated string")
}

// union appends to a the elements of b it lacks.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
