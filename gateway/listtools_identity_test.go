package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// liveGateway is a gateway whose policy folder a test rewrites and
// reloads (policy.Live, as `serve` runs it), over a catalog of fake
// tools served by counting drivers, and a registry.
type liveGateway struct {
	t      testing.TB
	dir    string
	gw     *Gateway
	store  evidence.Store
	driver *countingDriver
}

type liveOptions struct {
	tools      map[string]Tool // default: fake.run on driver "fake"
	keys       []config.KeyConfig
	selectable []config.PolicySelection
	policies   map[string]string // file name → text
}

func newLiveGateway(t testing.TB, o liveOptions) *liveGateway {
	t.Helper()
	lg := &liveGateway{t: t, dir: t.TempDir(), store: evidence.NewMemoryStore(), driver: &countingDriver{
		out: drivers.Result{Stdout: "ran\n"},
	}}
	lg.write(o.policies)
	live, err := policy.NewLive(lg.dir)
	if err != nil {
		t.Fatal(err)
	}
	if o.tools == nil {
		o.tools = map[string]Tool{"fake.run": {Driver: "fake", Target: "run"}}
	}
	auth, err := callerauth.New(o.keys, func(string) string { return "a-key-for-tests" })
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lg.gw, err = New(Options{
		Decider: live, Store: lg.store, Redactor: red, Auth: auth, Instance: "test-host",
		Drivers: map[string]drivers.Driver{"fake": lg.driver, "other": &countingDriver{}},
		Tools:   o.tools, Registry: &Registry{Driver: "fake", Bind: (&tpmjs.DriverConfig{}).BindTool}, Selectable: o.selectable, Now: fixedClock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// write replaces the policy folder's files with files.
func (lg *liveGateway) write(files map[string]string) {
	lg.t.Helper()
	old, _ := filepath.Glob(filepath.Join(lg.dir, "*.cedar"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			lg.t.Fatal(err)
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(lg.dir, name), []byte(text), 0o600); err != nil {
			lg.t.Fatal(err)
		}
	}
}

// reload writes files and reloads them, failing unless they were swapped in.
func (lg *liveGateway) reload(files map[string]string) {
	lg.t.Helper()
	lg.write(files)
	swapped, err := lg.gw.ReloadPolicies()
	if err != nil || !swapped {
		lg.t.Fatalf("reload: swapped %v, %v", swapped, err)
	}
}

// ruleTemplates are the rules random policy sets are made of: by tool,
// driver, tag, caller, group, argument and approval.
var ruleTemplates = []string{
	`permit (principal, action, resource in Driver::"fake");`,
	`permit (principal, action, resource in Driver::"other") when { principal.groups.contains("dev") };`,
	`permit (principal == Caller::"alice", action, resource == Tool::"fake.t03");`,
	`permit (principal == Caller::"bob", action, resource) when { resource.tags.contains("read-only") };`,
	`forbid (principal, action, resource) when { resource.tags.contains("net") };`,
	`forbid (principal == Caller::"alice", action, resource == Tool::"other.t14");`,
	`permit (principal, action, resource) when { context.args has x };`,
	`@approval("ops") permit (principal, action, resource == Tool::"other.t20");`,
	`permit (principal, action, resource) when { principal.roles.contains("admin") };`,
}

// randomPolicy is a policy set of a few random rules.
func randomPolicy(r *rand.Rand) string {
	var b strings.Builder
	for i, n := 0, 1+r.IntN(4); i < n; i++ {
		fmt.Fprintf(&b, "@id(\"r%d\")\n%s\n", i, ruleTemplates[r.IntN(len(ruleTemplates))])
	}
	return b.String()
}

// propertyCatalog is 24 tools over two drivers, with tags.
func propertyCatalog() map[string]Tool {
	tools := map[string]Tool{}
	tags := [][]string{nil, {"read-only"}, {"net"}, {"read-only", "net"}}
	for i := range 24 {
		driver := "fake"
		if i >= 12 {
			driver = "other"
		}
		tools[fmt.Sprintf("%s.t%02d", driver, i)] = Tool{Driver: driver, Target: "run", Tags: tags[i%len(tags)]}
	}
	return tools
}

// TestToolsAllowedAsMatchesListToolsAs: for random policies, callers,
// policy refs and pages of ids, ToolsAllowedAs keeps exactly the ids of
// the page that ListToolsAs lists, in the page's order, and drops ids
// outside the catalog (registry ids, unknown ids) whatever policy says.
func TestToolsAllowedAsMatchesListToolsAs(t *testing.T) {
	t.Parallel()
	keys := []config.KeyConfig{
		{Caller: "alice", Env: "K1", Groups: []string{"dev"}},
		{Caller: "bob", Env: "K2", Roles: []string{"admin"}},
		{Caller: "carol", Env: "K3", Groups: []string{"ops"}},
	}
	lg := newLiveGateway(t, liveOptions{
		tools: propertyCatalog(), keys: keys,
		selectable: []config.PolicySelection{{Groups: []string{"dev"}, Refs: []string{"policy.alt"}}},
		policies:   map[string]string{"policy.default.cedar": "", "policy.alt.cedar": ""},
	})
	catalog := lg.gw.catalogIDs()
	outside := []string{"nosuch.tool", "@scope/pkg::run", "left-pad::pad", "fake.t03 ", ""}
	r := rand.New(rand.NewPCG(16, 2026))
	ctx := context.Background()
	// Some pages must be filtered to something and some to less than
	// their catalog ids, or the property holds of nothing.
	var kept, cut int
	for iter := range 60 {
		lg.reload(map[string]string{"policy.default.cedar": randomPolicy(r), "policy.alt.cedar": randomPolicy(r)})
		caller := []string{"alice", "bob", "carol", "dave"}[r.IntN(4)]
		ref := []string{"", "policy.default", "policy.alt", "policy.none"}[r.IntN(4)]
		page := slices.Clone(catalog)
		r.Shuffle(len(page), func(i, j int) { page[i], page[j] = page[j], page[i] })
		page = append(page[:r.IntN(len(page)+1)], outside[:r.IntN(len(outside)+1)]...)
		r.Shuffle(len(page), func(i, j int) { page[i], page[j] = page[j], page[i] })

		listed, err := lg.gw.ListToolsAs(ctx, caller, nil, &toolgatev1.ListToolsRequest{PolicyRef: ref, Limit: maxListLimit})
		if err != nil {
			t.Fatalf("iteration %d: ListToolsAs: %v", iter, err)
		}
		inList := map[string]bool{}
		for _, tool := range listed.GetTools() {
			inList[tool.GetToolId()] = true
		}
		var want []string
		for _, id := range page {
			if inList[id] {
				want = append(want, id)
			}
		}
		got, err := lg.gw.ToolsAllowedAs(ctx, caller, nil, ref, page)
		if err != nil {
			t.Fatalf("iteration %d: ToolsAllowedAs: %v", iter, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("iteration %d, caller %s, policy_ref %q, page %v:\nToolsAllowedAs %v\nListToolsAs     %v",
				iter, caller, ref, page, got, want)
		}
		inCatalog := slices.DeleteFunc(slices.Clone(page), func(id string) bool { return !slices.Contains(catalog, id) })
		if len(got) > 0 {
			kept++
		}
		if len(got) < len(inCatalog) {
			cut++
		}
	}
	if kept < 10 || cut < 10 {
		t.Fatalf("of 60 pages, %d kept a tool and %d lost one: the random policies decide too little", kept, cut)
	}
	t.Run("a registry id that policy allows is still dropped", func(t *testing.T) {
		lg.reload(map[string]string{"policy.default.cedar": "permit (principal, action, resource);", "policy.alt.cedar": ""})
		got, err := lg.gw.ToolsAllowedAs(ctx, "alice", nil, "", []string{"left-pad::pad", "fake.t00"})
		if err != nil || !slices.Equal(got, []string{"fake.t00"}) {
			t.Fatalf("ToolsAllowedAs = %v, %v", got, err)
		}
	})
	t.Run("both refuse what ListToolsAs refuses", func(t *testing.T) {
		for _, tc := range []struct {
			name, caller, ref string
			code              codes.Code
		}{
			{"an empty caller", "", "", codes.Unauthenticated},
			{"a policy_ref with a control character", "alice", "policy.\x01", codes.InvalidArgument},
			{"a policy_ref over the limit", "alice", strings.Repeat("p", maxCtxFieldSize+1), codes.InvalidArgument},
		} {
			_, errList := lg.gw.ListToolsAs(ctx, tc.caller, nil, &toolgatev1.ListToolsRequest{PolicyRef: tc.ref})
			_, errAllowed := lg.gw.ToolsAllowedAs(ctx, tc.caller, nil, tc.ref, catalog)
			if status.Code(errList) != tc.code || status.Code(errAllowed) != tc.code {
				t.Errorf("%s: ListToolsAs %v, ToolsAllowedAs %v; want %v", tc.name, errList, errAllowed, tc.code)
			}
		}
	})
}

// groupPolicy allows fake.run only to callers in group "reviewers", and
// Approve-like roles nothing: the rule reads principal.groups.
const groupPolicy = `
@id("reviewers_only") @reason("only reviewers run it")
permit (principal, action, resource == Tool::"fake.run") when { principal.groups.contains("reviewers") };
@id("admins_run_all") @reason("admins run anything")
permit (principal, action, resource) when { principal.roles.contains("admin") };
`

// TestIdentityGroupsReachCedar: a caller whose token proved group
// "reviewers" (and no auth.keys entry gives it) is allowed by a rule on
// principal.groups, for a call, a listing and a page filter; the same
// caller without the identity, or with other groups, is denied.
func TestIdentityGroupsReachCedar(t *testing.T) {
	t.Parallel()
	lg := newLiveGateway(t, liveOptions{
		keys:     []config.KeyConfig{{Caller: "oauth:erin", Env: "K", Groups: []string{"staff"}}},
		policies: map[string]string{"policy.default.cedar": groupPolicy},
	})
	ctx := context.Background()
	reviewer := &Identity{Method: "oauth", Issuer: "https://idp.example", Subject: "erin", Groups: []string{"reviewers"}}
	for i, tc := range []struct {
		name      string
		identity  *Identity
		wantAllow bool
		wantRule  string
	}{
		{"the token's group allows the call", reviewer, true, "reviewers_only"},
		{"the token's role allows the call", &Identity{Method: "oauth", Roles: []string{"admin"}}, true, "admins_run_all"},
		{"without the identity only auth.keys' groups count, and deny", nil, false, ""},
		{"another group of the token does not allow", &Identity{Method: "oauth", Groups: []string{"staff", "dev"}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := lg.driver.runs.Load()
			id := fmt.Sprintf("groups-%d", i)
			resp, err := lg.gw.Run(ctx, "oauth:erin", Call{FrontDoor: "mcp", Identity: tc.identity, Request: &toolgatev1.RunToolRequest{
				RequestId: id, ToolId: "fake.run", Args: mustStruct(t, map[string]any{}),
			}})
			if err != nil {
				t.Fatal(err)
			}
			allowed := resp.GetPolicyCheck().GetDecision() == "allow"
			if allowed != tc.wantAllow || (tc.wantAllow && resp.GetPolicyCheck().GetRuleId() != tc.wantRule) {
				t.Fatalf("decision %v by %s, want allow=%v by %q", resp.GetPolicyCheck().GetDecision(), resp.GetPolicyCheck().GetRuleId(), tc.wantAllow, tc.wantRule)
			}
			if ran := lg.driver.runs.Load() - runs; (ran == 1) != tc.wantAllow {
				t.Fatalf("the driver ran %d times", ran)
			}
			listed, err := lg.gw.ToolsAllowedAs(ctx, "oauth:erin", tc.identity, "", []string{"fake.run"})
			if err != nil || (len(listed) == 1) != tc.wantAllow {
				t.Fatalf("ToolsAllowedAs = %v, %v; want listed=%v", listed, err, tc.wantAllow)
			}
		})
	}
	t.Run("the groups of auth.keys stay", func(t *testing.T) {
		got := lg.gw.callerAttrs("oauth:erin", reviewer)
		if !slices.Equal(got.Groups, []string{"reviewers", "staff"}) {
			t.Fatalf("groups %v, want the union", got.Groups)
		}
	})
}

// BenchmarkToolsAllowedAs1000 filters a page of 1,000 catalog tools, half
// of them denied by a tag rule, as a door's tools/list does, beside
// ListToolsAs of the same 1,000 tools.
func BenchmarkToolsAllowedAs1000(b *testing.B) {
	tools := map[string]Tool{}
	for i := range 1000 {
		tools[fmt.Sprintf("fake.t%04d", i)] = Tool{Driver: "fake", Target: "run", Tags: [][]string{nil, {"net"}}[i%2]}
	}
	lg := newLiveGateway(b, liveOptions{tools: tools, policies: map[string]string{"policy.default.cedar": `
permit (principal, action, resource in Driver::"fake");
forbid (principal, action, resource) when { resource.tags.contains("net") };`}})
	page := lg.gw.catalogIDs()
	ctx := context.Background()
	b.Run("ToolsAllowedAs", func(b *testing.B) {
		identity := &Identity{Method: "oauth", Groups: []string{"dev"}}
		for b.Loop() {
			got, err := lg.gw.ToolsAllowedAs(ctx, "oauth:erin", identity, "", page)
			if err != nil || len(got) != 500 {
				b.Fatalf("%d tools, %v", len(got), err)
			}
		}
	})
	b.Run("ListToolsAs", func(b *testing.B) {
		for b.Loop() {
			resp, err := lg.gw.ListToolsAs(ctx, "oauth:erin", &Identity{Method: "oauth", Groups: []string{"dev"}}, &toolgatev1.ListToolsRequest{Limit: maxListLimit})
			if err != nil || len(resp.GetTools()) != 500 {
				b.Fatalf("%d tools, %v", len(resp.GetTools()), err)
			}
		}
	})
}
