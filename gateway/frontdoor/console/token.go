package console

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/canonb64"
)

// TokenVerifier verifies an OAuth access token: a front door configured
// with an issuer (front_doors.mcp.oauth) is one. A person may sign in to
// the console with a token it accepts, as a caller may call with it.
type TokenVerifier interface {
	VerifyBearer(ctx context.Context, token string) (frontdoor.Principal, error)
}

// signInToken signs in with an access token one of the verifiers
// accepts; ok is false when none does.
func (a *access) signInToken(ctx context.Context, token string) (name string, id *gateway.Identity, expires time.Time, ok bool) {
	for _, v := range a.tokens {
		p, err := v.VerifyBearer(ctx, token)
		if err != nil || p.Caller == "" || p.Caller == gateway.AnonymousCaller {
			continue
		}
		return p.Caller, p.Identity, tokenExpiry(token), true
	}
	return "", nil, time.Time{}, false
}

// tokenExpiry reads the exp claim of a token a verifier has already
// accepted, so that the session ends with it; zero when it has none
// readable (the verifier requires one, so that does not happen).
func tokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := canonb64.RawURL(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return time.Time{}
	}
	exp, err := claims.Exp.Int64()
	if err != nil || exp <= 0 {
		return time.Time{}
	}
	return time.Unix(exp, 0)
}
