package policy

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	const rules = `@id("read") @reason("reads are harmless")
permit (principal, action, resource == Tool::"workspace.readFile");

permit (principal == Caller::"alice", action, resource in Driver::"workspace");

@id("no_secrets") @reason("secrets stay put")
forbid (principal, action, resource)
when { context.args has path && context.args.path like "secret/*" };

@id("strict_limit")
forbid (principal, action, resource == Tool::"workspace.shell")
when { context.args has limit && context.args.limit > 3 };
`
	e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": rules}))
	read := PolicyInfo{RuleID: "read", Effect: "permit", Reason: "reads are harmless", Position: "policy.default.cedar:1:1"}
	alice := PolicyInfo{RuleID: "policy.default.cedar:policy1", Effect: "permit", Position: "policy.default.cedar:4:1"}
	secrets := PolicyInfo{RuleID: "no_secrets", Effect: "forbid", Reason: "secrets stay put", Position: "policy.default.cedar:6:1"}
	determining := func(p PolicyInfo) PolicyInfo { p.Determining = true; return p }
	withArgs := func(r Request, args map[string]any) Request { r.Args = args; return r }
	byBob := func(r Request) Request { r.Caller = "bob"; return r }

	tests := []struct {
		name       string
		req        Request
		wantRule   string
		wantMatch  []PolicyInfo
		wantErrors int
	}{
		{"two permits decide together", call("workspace.readFile"), "read",
			[]PolicyInfo{determining(read), determining(alice)}, 0},
		{"a forbid overrules both permits", withArgs(call("workspace.readFile"), map[string]any{"path": "secret/key"}), "no_secrets",
			[]PolicyInfo{read, alice, determining(secrets)}, 0},
		{"nothing matches", byBob(call("workspace.createFile")), RuleDefaultDeny, nil, 0},
		{"an erroring forbid leaves no policy determining", withArgs(call("workspace.shell"), map[string]any{"limit": "big"}), RulePolicyError,
			[]PolicyInfo{alice}, 1},
		{"unknown policy set", func() Request { r := call("workspace.readFile"); r.PolicyRef = "nope"; return r }(), RuleUnknownPolicyRef, nil, 0},
		{"malformed request", Request{Caller: "alice", Action: "Delete", ToolID: "workspace.readFile", Driver: "workspace"}, RulePolicyError, nil, 1},
		{"the limit forbid matches", withArgs(call("workspace.shell"), map[string]any{"limit": json.Number("5")}), "strict_limit",
			[]PolicyInfo{alice, determining(PolicyInfo{RuleID: "strict_limit", Effect: "forbid", Reason: "", Position: "policy.default.cedar:10:1"})}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := e.Explain(context.Background(), tt.req)
			d := e.Decide(context.Background(), tt.req)
			if !reflect.DeepEqual(x.Decision, d) {
				t.Errorf("Explain's decision %+v differs from Decide's %+v", x.Decision, d)
			}
			if x.RuleID != tt.wantRule {
				t.Errorf("RuleID = %q (%s), want %q", x.RuleID, x.Reason, tt.wantRule)
			}
			if !reflect.DeepEqual(x.Matched, tt.wantMatch) {
				t.Errorf("Matched =\n%+v\nwant\n%+v", x.Matched, tt.wantMatch)
			}
			if len(x.Errors) != tt.wantErrors {
				t.Errorf("Errors = %q, want %d", x.Errors, tt.wantErrors)
			}
		})
	}
}

func TestExplainCancelled(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, shippedDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x := e.Explain(ctx, call("workspace.readFile"))
	if x.Allow || x.RuleID != RulePolicyError || len(x.Matched) != 0 {
		t.Errorf("Explain on a cancelled context = %+v, want a policy_error deny with no matches", x)
	}
}
