package gateway

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// selectionPolicies: a strict default, a lenient set a team keeps for one
// caller, and a shadow candidate that would allow everything.
var selectionPolicies = map[string]string{
	"policy.default.cedar":   readOnlyPolicy,
	"policy.lenient.cedar":   `@id("lenient_all") permit (principal, action, resource);`,
	"policy.candidate.cedar": `@id("candidate_all") permit (principal, action, resource);`,
}

// TestPolicyRefSelection: ctx.policy_ref can never make a shadow candidate
// decide, and with policies.selectable only the callers and groups it names
// select a set. A refused selection is a recorded deny; nothing runs.
func TestPolicyRefSelection(t *testing.T) {
	t.Parallel()
	keys := []config.KeyConfig{
		{Caller: "alice", Env: "KEY_ALICE"},
		{Caller: "ops-bot", Env: "KEY_OPS", Groups: []string{"ops"}},
	}
	getenv := func(name string) string {
		return map[string]string{"KEY_ALICE": "k-alice-0123456789", "KEY_OPS": "k-ops-0123456789"}[name]
	}
	shadows := map[string]string{"policy.default": "policy.candidate"}
	tests := []struct {
		name       string
		selectable []config.PolicySelection
		key, ref   string
		wantRule   string
	}{
		{"a shadow candidate is never selectable", nil, "k-alice-0123456789", "policy.candidate", RulePolicyRefNotSelectable},
		{"without selectable every enforcing set is", nil, "k-alice-0123456789", "policy.lenient", "lenient_all"},
		{"a set listed for a group is selectable by its members", []config.PolicySelection{{Groups: []string{"ops"}, Refs: []string{"policy.lenient"}}}, "k-ops-0123456789", "policy.lenient", "lenient_all"},
		{"a set listed for a group is not selectable by others", []config.PolicySelection{{Groups: []string{"ops"}, Refs: []string{"policy.lenient"}}}, "k-alice-0123456789", "policy.lenient", RulePolicyRefNotSelectable},
		{"a set listed for a caller is selectable by it", []config.PolicySelection{{Callers: []string{"alice"}, Refs: []string{"policy.lenient"}}}, "k-alice-0123456789", "policy.lenient", "lenient_all"},
		{"the default set needs no selection", []config.PolicySelection{}, "k-alice-0123456789", "policy.default", "default_deny"},
		{"selectable never reaches a shadow", []config.PolicySelection{{Callers: []string{"alice"}, Refs: []string{"policy.lenient"}}}, "k-alice-0123456789", "policy.candidate", RulePolicyRefNotSelectable},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{policies: selectionPolicies, keys: keys, getenv: getenv, shadows: shadows, selectable: tc.selectable})
			id := "sel-" + string(rune('a'+i))
			ctx := bearer(tc.key)
			resp, err := e.client.RunTool(ctx, &toolgatev1.RunToolRequest{
				RequestId: id, ToolId: "workspace.createFile",
				Args: mustStruct(t, map[string]any{"path": "pwned.txt", "content": "x"}),
				Ctx:  &toolgatev1.RunContext{PolicyRef: tc.ref},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetPolicyCheck().GetRuleId(); got != tc.wantRule {
				t.Fatalf("rule_id %q (%s), want %q", got, resp.GetPolicyCheck().GetReason(), tc.wantRule)
			}
			_, statErr := os.Stat(filepath.Join(e.workspace, "pwned.txt"))
			if ran := statErr == nil; ran != (tc.wantRule == "lenient_all") {
				t.Fatalf("file written = %v with rule %s", ran, tc.wantRule)
			}
			dec := decodeJSON(t, e.artifact(id, evidence.ArtifactPolicyDecision))
			if dec["rule_id"] != tc.wantRule || dec["policy_ref"] != tc.ref {
				t.Errorf("policy_decision.json: rule_id %v policy_ref %v", dec["rule_id"], dec["policy_ref"])
			}
			if tc.wantRule == RulePolicyRefNotSelectable {
				if _, ok := dec["shadow"]; ok || dec["policy_set_digest"] != "" {
					t.Errorf("a refused selection was evaluated: %v", dec)
				}
			}
			e.checkReplyIsStored(id, resp)

			// ListTools follows the same rule.
			list, err := e.client.ListTools(ctx, &toolgatev1.ListToolsRequest{PolicyRef: tc.ref})
			if err != nil {
				t.Fatal(err)
			}
			if listed := len(list.GetTools()) > 0; listed == (tc.wantRule == RulePolicyRefNotSelectable) {
				t.Errorf("ListTools under %s listed %d tools", tc.ref, len(list.GetTools()))
			}
		})
	}
}

func bearer(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
}

// TestNestedCallsInheritTheParentsPolicySet: guest code cannot choose a
// policy set; its calls are judged by the set its parent was judged by.
func TestNestedCallsInheritTheParentsPolicySet(t *testing.T) {
	t.Parallel()
	sb := &sandboxDriver{calls: []nestedStep{{"call-1", "workspace.shell", map[string]any{"command": "touch pwned"}}}}
	e := newEnv(t, envOptions{
		policies: map[string]string{
			"policy.default.cedar": `@id("guest_shell") permit (principal, action, resource);`,
			"policy.sandbox.cedar": `@id("run_sandbox") permit (principal, action == Action::"RunTool", resource == Tool::"sandbox.run");`,
		},
		extra: map[string]drivers.Driver{"sandbox": sb},
	})
	resp, err := e.client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
		RequestId: "inherit-1", ToolId: "sandbox.run", Ctx: &toolgatev1.RunContext{PolicyRef: "policy.sandbox"},
	})
	if err != nil || !resp.GetOk() {
		t.Fatalf("parent call: %v %v", resp, err)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "pwned")); err == nil {
		t.Fatal("the guest's shell call ran under another policy set than its parent's")
	}
	dec := decodeJSON(t, e.artifact("inherit-1:call-1", evidence.ArtifactPolicyDecision))
	if dec["policy_ref"] != "policy.sandbox" || dec["rule_id"] != "default_deny" {
		t.Errorf("nested decision: policy_ref %v rule_id %v, want the parent's set and default_deny", dec["policy_ref"], dec["rule_id"])
	}
}
