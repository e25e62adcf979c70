package console

import (
	"context"
	"errors"
	"sync"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/policy"
)

// keyChecker is what sign-in needs of the gateway.
type keyChecker interface {
	CallerForKey(key string) (string, bool)
	Authenticator() *gateway.Authenticator
}

// readDecider is what deciding reads needs of the policy sets.
type readDecider interface {
	Engine() *policy.Engine
}

// access signs people in with the gateway's API keys and decides their
// reads with Cedar's Action::"ReadEvidence".
type access struct {
	keys      keyChecker
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

func newAccess(keys keyChecker, policies readDecider, policyRef string) *access {
	return &access{keys: keys, policies: policies, policyRef: policyRef, cache: map[readKey]bool{}}
}

var errBadKey = errors.New("console: unknown API key")

func (a *access) SignIn(_ context.Context, key string) (browse.Person, error) {
	if key == "" {
		return browse.Person{}, errBadKey
	}
	caller, ok := a.keys.CallerForKey(key)
	if !ok || caller == "" || caller == gateway.AnonymousCaller {
		return browse.Person{}, errBadKey
	}
	return browse.Person{Name: caller, Groups: a.keys.Authenticator().Attributes(caller).Groups}, nil
}

func (a *access) MayRead(ctx context.Context, p browse.Person, s *browse.Summary) bool {
	eng := a.policies.Engine()
	k := readKey{p.Name, s.ID}
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
		Reader: p.Name, ReaderAttrs: auth.Attributes(p.Name),
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
