package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// entityRules decide on everything the cached entities carry: the
// caller's name, groups and roles, and the tool's driver and catalog
// attributes.
const entityRules = `
@id("ops") permit (principal, action == Action::"RunTool", resource) when { principal.groups.contains("ops") };
@id("admin") permit (principal, action == Action::"RunTool", resource) when { principal.roles.contains("admin") };
@id("alice") permit (principal == Caller::"alice", action == Action::"RunTool", resource == Tool::"fs.read");
@id("tagged") permit (principal, action == Action::"RunTool", resource) when { resource.tags.contains("safe") && resource.driver == "tpmjs" };
@id("pkg") forbid (principal, action == Action::"RunTool", resource) when { resource.package == "@evil/pkg" && resource.version == "6.6.6" };
`

// TestCachedEntitiesNeverCarryAnotherCallsAttributes attacks the entity
// cache: calls whose names, groups, roles or tool attributes differ only
// slightly (or so that a naive key would collide) follow one another on one
// Engine, twice, and every decision must be the one an Engine without a
// cache makes. A cached caller entity served for another identity would
// turn a deny into an allow.
func TestCachedEntitiesNeverCarryAnotherCallsAttributes(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{DefaultRef + ".cedar": entityRules})
	cached := mustLoad(t, dir)
	uncached := mustLoad(t, dir)
	uncached.entities = nil
	req := func(caller string, groups, roles []string, tool, driver string, attrs ToolAttributes) Request {
		return Request{Caller: caller, CallerAttrs: CallerAttributes{Groups: groups, Roles: roles}, Action: ActionRunTool,
			RequestID: "r", ToolID: tool, Driver: driver, Tool: attrs}
	}
	cases := []struct {
		name  string
		req   Request
		allow bool
	}{
		{"a member of ops is allowed", req("bob", []string{"ops"}, nil, "x", "w", ToolAttributes{}), true},
		{"the same caller without the group is then denied", req("bob", nil, nil, "x", "w", ToolAttributes{}), false},
		{"another caller does not inherit the group", req("carol", nil, nil, "x", "w", ToolAttributes{}), false},
		{"a group moved into the roles does not count as a group", req("bob", nil, []string{"ops"}, "x", "w", ToolAttributes{}), false},
		{"a caller whose name spells another's key is denied", req("bob\x00ops", nil, nil, "x", "w", ToolAttributes{}), false},
		{"a group split across two names is not the group", req("bob", []string{"o", "ps"}, nil, "x", "w", ToolAttributes{}), false},
		{"a name and group that concatenate alike are told apart", req("bo", []string{"bops"}, nil, "x", "w", ToolAttributes{}), false},
		{"a role is honoured", req("dave", nil, []string{"admin"}, "x", "w", ToolAttributes{}), true},
		{"the role is gone when the token no longer carries it", req("dave", nil, nil, "x", "w", ToolAttributes{}), false},
		{"alice may read", req("alice", nil, nil, "fs.read", "w", ToolAttributes{}), true},
		{"alice's tool under another id is not hers", req("alice", nil, nil, "fs.read2", "w", ToolAttributes{}), false},
		{"a safe tpmjs tool is allowed", req("eve", nil, nil, "t", "tpmjs", ToolAttributes{Tags: []string{"safe"}}), true},
		{"the same tool without the tag is denied", req("eve", nil, nil, "t", "tpmjs", ToolAttributes{}), false},
		{"the same tool under another driver is denied", req("eve", nil, nil, "t", "workspace", ToolAttributes{Tags: []string{"safe"}}), false},
		{"a forbidden package version is denied to ops", req("bob", []string{"ops"}, nil, "p", "tpmjs", ToolAttributes{Package: "@evil/pkg", Version: "6.6.6"}), false},
		{"another version of it is allowed to ops", req("bob", []string{"ops"}, nil, "p", "tpmjs", ToolAttributes{Package: "@evil/pkg", Version: "6.6.7"}), true},
	}
	for pass := range 2 {
		for _, c := range cases {
			t.Run(fmt.Sprintf("pass %d: %s", pass+1, c.name), func(t *testing.T) {
				got := cached.Decide(context.Background(), c.req)
				want := uncached.Decide(context.Background(), c.req)
				if got.Allow != c.allow || got.Allow != want.Allow || got.RuleID != want.RuleID {
					t.Fatalf("cached engine: allow=%v rule=%s; uncached: allow=%v rule=%s; want allow=%v",
						got.Allow, got.RuleID, want.Allow, want.RuleID, c.allow)
				}
			})
		}
	}
}

// TestEntityCacheIsBounded: callers choose their names and a token's
// groups, so a flood of distinct identities must not grow the cache past
// its bound, and calls past the bound are still decided right.
func TestEntityCacheIsBounded(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": entityRules}))
	for i := range 2*maxCachedEntities + 10 {
		groups := []string{fmt.Sprintf("g%d", i)}
		if i%2 == 0 {
			groups = append(groups, "ops")
		}
		d := e.Decide(context.Background(), Request{Caller: fmt.Sprintf("c%d", i), CallerAttrs: CallerAttributes{Groups: groups},
			Action: ActionRunTool, RequestID: "r", ToolID: fmt.Sprintf("tool%d", i), Driver: "w"})
		if d.Allow != (i%2 == 0) {
			t.Fatalf("call %d: allow=%v, want %v", i, d.Allow, i%2 == 0)
		}
	}
	e.entities.mu.RLock()
	defer e.entities.mu.RUnlock()
	if n, m := len(e.entities.callers), len(e.entities.tools); n > maxCachedEntities || m > maxCachedEntities {
		t.Fatalf("cache holds %d callers and %d tools, bound %d", n, m, maxCachedEntities)
	}
}

// TestEntityCacheUnderConcurrentCallers runs identities that differ in
// their groups at once on one Engine (run with -race): each call gets its
// own identity's decision.
func TestEntityCacheUnderConcurrentCallers(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": entityRules}))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 300 {
				ops := rng.IntN(2) == 0
				var groups []string
				if ops {
					groups = []string{"ops"}
				}
				d := e.Decide(context.Background(), Request{Caller: fmt.Sprintf("c%d", rng.IntN(4)), CallerAttrs: CallerAttributes{Groups: groups},
					Action: ActionRunTool, RequestID: "r", ToolID: "x", Driver: "w"})
				if d.Allow != ops {
					errs <- fmt.Errorf("worker %d: groups %v: allow=%v", w, groups, d.Allow)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
