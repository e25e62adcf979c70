package gateway

import (
	"testing"

	"github.com/toolgate/toolgate/evidence"
)

// TestShadowPolicyIsRecordedNeverEnforced: a candidate policy set runs
// beside the enforcing one; its decision is on record, and a difference is
// counted, but only the enforcing set decides.
func TestShadowPolicyIsRecordedNeverEnforced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		policies: map[string]string{
			"policy.default.cedar":   readOnlyPolicy,
			"policy.candidate.cedar": `@id("lockdown") @reason("candidate: nothing runs") forbid (principal, action, resource);`,
		},
		shadows: map[string]string{"policy.default": "policy.candidate"},
	})
	tests := []struct {
		id, tool      string
		wantDecision  string
		wantDiffers   bool
		wantFlipsLeft int64
	}{
		{"sh-1", "workspace.readFile", "allow", true, 1},
		{"sh-2", "workspace.shell", "deny", false, 1},
	}
	for _, tc := range tests {
		resp := e.mustCall(tc.id, tc.tool, map[string]any{"path": "none.txt", "command": "true"})
		if resp.GetPolicyCheck().GetDecision() != tc.wantDecision {
			t.Fatalf("%s: enforced decision %v, want %s (the shadow must never decide)", tc.id, resp.GetPolicyCheck(), tc.wantDecision)
		}
		dec := decodeJSON(t, e.artifact(tc.id, evidence.ArtifactPolicyDecision))
		shadow, _ := dec["shadow"].(map[string]any)
		if shadow["policy_ref"] != "policy.candidate" || shadow["decision"] != "deny" || shadow["rule_id"] != "lockdown" || shadow["differs"] != tc.wantDiffers {
			t.Errorf("%s: shadow record = %v", tc.id, shadow)
		}
		if got := e.gw.ShadowFlips(); got != tc.wantFlipsLeft {
			t.Errorf("%s: ShadowFlips = %d, want %d", tc.id, got, tc.wantFlipsLeft)
		}
	}
	// A call under another policy set has no shadow.
	e2 := newEnv(t, envOptions{shadows: map[string]string{"other": "policy.default"}})
	e2.mustCall("sh-3", "workspace.readFile", map[string]any{"path": "x"})
	if _, ok := decodeJSON(t, e2.artifact("sh-3", evidence.ArtifactPolicyDecision))["shadow"]; ok {
		t.Error("a policy set without a shadow recorded one")
	}
}
