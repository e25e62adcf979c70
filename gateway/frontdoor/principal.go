package frontdoor

import (
	"context"
	"errors"

	"github.com/toolgate/toolgate/gateway"
)

// Principal is an authenticated caller as a door sees it: the caller name
// Cedar decides on, and, when a BearerVerifier authenticated it rather
// than an API key of auth.keys, what else it proved.
type Principal struct {
	// Caller is the name Cedar sees as Caller::"<name>".
	Caller string
	// Identity is nil for an API key or anonymous caller.
	Identity *gateway.Identity
}

// BearerVerifier is implemented by an opened Door that accepts bearer
// tokens other than the API keys of auth.keys (OAuth access tokens). The
// plumbing of the door's address tries it on an Authorization: Bearer
// token that is no API key; never on a /k/<key>/ path key, which lands in
// logs and histories. A token one door's verifier accepts is accepted on
// every door of the same address: Cedar still decides every call.
type BearerVerifier interface {
	// VerifyBearer returns the principal token proves, or an error that
	// says why it proves nothing. It must not keep or log token.
	VerifyBearer(ctx context.Context, token string) (Principal, error)
}

// Drainer is implemented by an opened Door that holds requests open
// without end (event streams). Servers.Shutdown calls Drain before it
// stops the listeners and waits for requests in flight, so that such
// requests end; one that arrives after Drain, before the listener is
// closed, must end at once too.
type Drainer interface {
	Drain()
}

// PrincipalFrom is CallerFrom with the Identity a BearerVerifier found:
// nil for a caller of auth.keys or an anonymous one. Its error is
// CallerFrom's.
func PrincipalFrom(ctx context.Context) (Principal, error) {
	r, ok := ctx.Value(callerKey{}).(callerResult)
	if !ok {
		return Principal{}, errors.New("frontdoor: no caller: the request did not come through the front-door plumbing")
	}
	return Principal{Caller: r.caller, Identity: r.identity}, r.err
}

// WithPrincipal returns ctx carrying p as PrincipalFrom (and its caller as
// CallerFrom) reports it, for tests of a door's handlers.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, callerKey{}, callerResult{caller: p.Caller, identity: p.Identity})
}
