package oauth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// IDTokenVerifier verifies OpenID Connect ID tokens issued to one client:
// the access-token verifier's checks (size, alg allow-list, kid,
// signature against the issuer's JWKS, exp required, nbf and iat within
// the leeway, iss exactly, the caller claim and its mapping), with the
// audience being the client id instead of a resource, and the nonce the
// sign-in sent.
type IDTokenVerifier struct {
	v        *Verifier
	clientID string
}

// NewIDTokenVerifier returns a verifier of ID tokens for clientID, signed
// by cfg.Issuer with the keys of cfg.JWKSFile or cfg.JWKSURL, and mapped
// to a caller by cfg's claim keys. cfg.Resource, RequiredScopes and
// ScopeRoles are not used: an ID token is not an access token.
func NewIDTokenVerifier(ctx context.Context, cfg Config, clientID string, attrs func(caller string) (groups, roles []string), opts ...Option) (*IDTokenVerifier, error) {
	if clientID == "" {
		return nil, fmt.Errorf("oauth: NewIDTokenVerifier: no client id")
	}
	cfg.Resource, cfg.RequiredScopes, cfg.ScopesSupported, cfg.ScopeRoles = cfg.Issuer, nil, nil, nil
	v, err := NewVerifier(ctx, &cfg, attrs, opts...)
	if err != nil {
		return nil, err
	}
	return &IDTokenVerifier{v: v, clientID: clientID}, nil
}

// Verify checks an ID token and that its nonce claim is nonce, and returns
// the caller it proves and when the token expires.
func (iv *IDTokenVerifier) Verify(ctx context.Context, token, nonce string) (frontdoor.Principal, time.Time, error) {
	v := iv.v
	if len(token) > maxTokenBytes {
		return frontdoor.Principal{}, time.Time{}, invalid("longer than %d bytes", maxTokenBytes)
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keyFunc(ctx)); err != nil {
		return frontdoor.Principal{}, time.Time{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	aud, err := claims.GetAudience()
	if err != nil || !slices.Contains(aud, iv.clientID) {
		return frontdoor.Principal{}, time.Time{}, invalid("audience does not name this client")
	}
	// With several audiences, the authorized party must be this client
	// (OpenID Connect Core 3.1.3.7).
	if azp, ok := claims["azp"]; (ok || len(aud) > 1) && azp != iv.clientID {
		return frontdoor.Principal{}, time.Time{}, invalid("azp does not name this client")
	}
	got, _ := claims["nonce"].(string)
	if nonce == "" || subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
		return frontdoor.Principal{}, time.Time{}, invalid("nonce is not the one this sign-in sent")
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return frontdoor.Principal{}, time.Time{}, invalid("exp missing")
	}
	p, err := v.principal(claims)
	if err != nil {
		return frontdoor.Principal{}, time.Time{}, err
	}
	p.Identity.Method = "oidc"
	return p, exp.Time, nil
}
