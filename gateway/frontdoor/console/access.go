package console

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/policy"
)

// keyChecker is what sign-in needs of the gateway.
type keyChecker interface {
	CallerForKey(key string) (string, bool)
	Authenticator() *callerauth.Authenticator
}

// readDecider is what deciding reads needs of the policy sets.
type readDecider interface {
	Engine() *policy.Engine
}

// access signs people in with the gateway's API keys and decides their
// reads with Cedar's Action::"ReadEvidence".
type access struct {
	keys      keyChecker
	tokens    []TokenVerifier
	policies  readDecider
	policyRef string
	// cache keeps decisions per policy engine (a reload is a new engine,
	// so a changed rule is never answered from the cache), reader and
	// request: a listing scans the index, and decides each request once.
	mu    sync.Mutex
	eng   *policy.Engine
	cache map[readKey]bool
}

type readKey struct{ reader, request string }

// maxCached bounds the cache; past it, it starts again.
const maxCached = 1 << 20

func newAccess(keys keyChecker, policies readDecider, policyRef string, tokens ...TokenVerifier) *access {
	return &access{keys: keys, tokens: tokens, policies: policies, policyRef: policyRef, cache: map[readKey]bool{}}
}

var errBadKey = errors.New("console: unknown API key")

// SignIn takes an API key of auth.keys, or else an access token one of
// the token verifiers accepts.
func (a *access) SignIn(ctx context.Context, key string) (browse.Person, error) {
	if key == "" {
		return browse.Person{}, errBadKey
	}
	if caller, ok := a.keys.CallerForKey(key); ok && caller != "" && caller != gateway.AnonymousCaller {
		return browse.Person{Name: caller, Groups: a.keys.Authenticator().Attributes(caller).Groups}, nil
	}
	name, id, expires, ok := a.signInToken(ctx, key)
	if !ok {
		return browse.Person{}, errBadKey
	}
	p := browse.Person{Name: name, Expires: expires, Groups: a.attrs(name, id).Groups}
	if id != nil {
		p.Identity = id
	}
	return p, nil
}

// attrs are a person's Cedar attributes: auth.keys' for the name, and
// what a token sign-in proved.
func (a *access) attrs(name string, id *gateway.Identity) policy.CallerAttributes {
	at := a.keys.Authenticator().Attributes(name)
	if id == nil {
		return at
	}
	return policy.CallerAttributes{Groups: union(at.Groups, id.Groups), Roles: union(at.Roles, id.Roles)}
}

func union(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// identityOf is the token identity a person signed in with, nil for a key.
func identityOf(p browse.Person) *gateway.Identity {
	id, _ := p.Identity.(*gateway.Identity)
	return id
}

func (a *access) MayRead(ctx context.Context, p browse.Person, s *browse.Summary) bool {
	eng := a.policies.Engine()
	attrs := a.attrs(p.Name, identityOf(p))
	// The same name signed in by two tokens may carry other groups: the
	// groups and roles are part of the key.
	k := readKey{p.Name + "\x00" + strings.Join(attrs.Groups, "\x00") + "\x00\x00" + strings.Join(attrs.Roles, "\x00"), s.ID}
	a.mu.Lock()
	if a.eng != eng || len(a.cache) >= maxCached {
		a.eng, a.cache = eng, map[readKey]bool{}
	}
	allow, ok := a.cache[k]
	a.mu.Unlock()
	if ok {
		return allow
	}
	auth := a.keys.Authenticator()
	d := eng.DecideRead(ctx, policy.ReadRequest{
		Reader: p.Name, ReaderAttrs: attrs,
		Requester: s.Caller, RequesterAttrs: auth.Attributes(s.Caller),
		ToolID: s.Tool, Driver: s.Driver, RequestID: s.ID, CallPolicyRef: s.PolicyRef, RunID: s.RunID,
		PolicyRef: a.policyRef,
	})
	if ctx.Err() != nil {
		return false // a cancelled decision is a deny, and not kept
	}
	a.mu.Lock()
	if a.eng == eng {
		a.cache[k] = d.Allow
	}
	a.mu.Unlock()
	return d.Allow
}
