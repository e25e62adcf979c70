package gateway

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/policy"
)

// AnonymousCaller is the caller name used when authentication is off, which
// the gateway allows only on a loopback listener.
const AnonymousCaller = config.AnonymousCaller

// Identity is what a front door learned about a caller beyond its name,
// when the caller proved who it is with something other than an API key
// of auth.keys (an OAuth access token). Cedar sees its groups and roles
// joined to those auth.keys gives the same caller name; request.json
// records where it came from, outside the canonical request hash, so a
// retry under a refreshed token is the same request. It never holds the
// credential itself.
type Identity struct {
	// Method is how the caller authenticated: "oauth".
	Method string `json:"method"`
	// Issuer, Subject and TokenID are the token's iss, sub and jti.
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	TokenID string `json:"jti,omitempty"`
	// Groups and Roles are added to the caller's Cedar attributes.
	Groups []string `json:"-"`
	Roles  []string `json:"-"`
}

// Bounds of an Identity. Its fields come from a token an identity
// provider signed, and end up in request.json and in Cedar's entities.
const (
	maxIdentityField = 1024
	maxIdentityNames = 256
)

// identityMethodPattern keeps Method a plain word, as front door names are.
const identityMethodPattern = ident.Word

// validateIdentity checks what a door says about caller beyond its name.
// The caller name must then be one auth.keys could have given, since a
// token's claim, not the configuration, chose it.
func validateIdentity(caller string, id *Identity) error {
	if id == nil {
		return nil
	}
	if !ident.CallerName.MatchString(caller) {
		return fmt.Errorf("caller %q: must match %s", ident.Clip(caller), ident.CallerName)
	}
	if !identityMethodPattern.MatchString(id.Method) {
		return fmt.Errorf("identity.method %q: must match %s", ident.Clip(id.Method), identityMethodPattern)
	}
	for _, f := range []struct{ name, value string }{{"issuer", id.Issuer}, {"subject", id.Subject}, {"jti", id.TokenID}} {
		if err := ident.ValidatePrintable(f.value, maxIdentityField); err != nil {
			return fmt.Errorf("identity.%s: %w", f.name, err)
		}
	}
	for _, f := range []struct {
		name  string
		names []string
	}{{"groups", id.Groups}, {"roles", id.Roles}} {
		if len(f.names) > maxIdentityNames {
			return fmt.Errorf("identity.%s: %d names, the limit is %d", f.name, len(f.names), maxIdentityNames)
		}
		for _, n := range f.names {
			if n == "" {
				return fmt.Errorf("identity.%s: an empty name", f.name)
			}
			if err := ident.ValidatePrintable(n, maxCtxFieldSize); err != nil {
				return fmt.Errorf("identity.%s: %w", f.name, err)
			}
		}
	}
	return nil
}

// callerAttrs are the caller's Cedar attributes: those auth.keys gives its
// name, joined to the groups and roles its identity proved.
func (g *Gateway) callerAttrs(caller string, id *Identity) policy.CallerAttributes {
	attrs := g.auth.Attributes(caller)
	if id == nil {
		return attrs
	}
	return policy.CallerAttributes{Groups: union(attrs.Groups, id.Groups), Roles: union(attrs.Roles, id.Roles)}
}

// authRecord is request.json's auth: where the identity came from, never
// its groups (the decision records what Cedar saw) nor the credential.
func authRecord(id *Identity) *evidence.RequestAuth {
	if id == nil {
		return nil
	}
	return &evidence.RequestAuth{Method: id.Method, Issuer: id.Issuer, Subject: id.Subject, TokenID: id.TokenID}
}

// traceParentPattern is a W3C traceparent of version 00.
var traceParentPattern = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$`)

// traceID returns the trace id of a W3C traceparent ("" for ""), or an
// error when it is malformed or names the invalid all-zero trace or span.
func traceID(traceParent string) (string, error) {
	if traceParent == "" {
		return "", nil
	}
	m := traceParentPattern.FindStringSubmatch(traceParent)
	if m == nil || m[1] == "00000000000000000000000000000000" || m[2] == "0000000000000000" {
		return "", fmt.Errorf("trace_parent %q: want a W3C traceparent 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids",
			ident.Clip(traceParent))
	}
	return m[1], nil
}

// ToolsAllowedAs returns those of ids (catalog tool ids, in order) that
// policy could allow caller, with identity's attributes, to run under
// policyRef ("" for the default set): the filter of ListToolsAs applied to
// a page a door already holds, with no limit of its own. Ids that are not
// in the catalog (registry ids included) are dropped.
func (g *Gateway) ToolsAllowedAs(ctx context.Context, caller string, identity *Identity, policyRef string, ids []string) ([]string, error) {
	if caller == "" {
		return nil, status.Error(codes.Unauthenticated, "caller: missing; authenticate before ToolsAllowedAs")
	}
	if err := validateIdentity(caller, identity); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	attrs := g.callerAttrs(caller, identity)
	ref, listed, err := g.listScope(caller, attrs, policyRef)
	if err != nil {
		return nil, err
	}
	if !listed {
		return []string{}, nil
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		t, ok := g.tools[id]
		if ok && g.mayList(ctx, caller, attrs, ref, id, t) {
			out = append(out, id)
		}
	}
	return out, nil
}

// SubscribePolicyChanges returns a channel that receives a value after
// each policy reload that swapped the sets in (a pending value is never
// doubled: a slow reader sees one change for many), and a function that
// ends the subscription and closes the channel; calling it again does
// nothing. No goroutine serves a subscription.
func (g *Gateway) SubscribePolicyChanges() (<-chan struct{}, func()) {
	return g.changes.subscribe()
}

// policyChanges fans a policy swap out to its subscribers. Its zero value
// has none.
type policyChanges struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

func (p *policyChanges) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	if p.subs == nil {
		p.subs = map[chan struct{}]struct{}{}
	}
	p.subs[ch] = struct{}{}
	p.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.subs, ch)
			p.mu.Unlock()
			// Removed under the lock fire sends under: nothing sends on it
			// any more.
			close(ch)
		})
	}
}

// fire tells every subscriber, without blocking: a subscriber with a
// change pending needs no second one.
func (p *policyChanges) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// union returns the sorted union of two lists, without repeats.
func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
