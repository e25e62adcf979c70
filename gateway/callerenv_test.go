package gateway

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/evidence"
)

// TestCallerEnvThatWouldBlindTheEvidenceIsRefused: a shell env value the
// gateway itself writes in evidence (a tool id, a decision word, a driver
// name, the request id) or too short to be a secret is refused before the
// request is claimed, and the error names the variable, not the value.
func TestCallerEnvThatWouldBlindTheEvidenceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cases := []struct{ name, value string }{
		{"the tool id", "workspace.shell"},
		{"another tool id", "workspace.readFile"},
		{"the decision word allow", "allow"},
		{"a common word", "localhost"},
		{"seven bytes", "abc1234"},
		{"the request id", "blind-request-id-7"},
		{"a driver name in capitals", "WORKSPACE"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "blind-request-id-" + string(rune('0'+i))
			value := tc.value
			if tc.name == "the request id" {
				value = id
			}
			_, err := e.call(context.Background(), id, "workspace.shell", map[string]any{
				"command": "true", "env": map[string]any{"BLIND": value},
			})
			wantCode(t, err, codes.InvalidArgument, "args.env.BLIND")
			if strings.Contains(err.Error(), ": "+value) {
				t.Errorf("the error quotes the value: %v", err)
			}
			if names := e.artifactNames(id); len(names) != 0 {
				t.Errorf("the request was claimed: %v", names)
			}
		})
	}
}

// TestCallerEnvIsHiddenOnlyInToolOutput: a caller's env value equal to the
// rule id that allows the call, and also printed by the command, is
// replaced in request.json and in the output where it stands alone, but
// the decision, the rule id and the command stay on record.
func TestCallerEnvIsHiddenOnlyInToolOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const value = "allow_workspace"
	resp := e.mustCall("blind-rule", "workspace.shell", map[string]any{
		"command": `echo "$V"; echo "x${V}y"; echo allow_workspace`,
		"env":     map[string]any{"V": value},
	})
	out := resp.GetToolResult().GetStdout()
	if want := "[REDACTED:caller-secret]\nxallow_workspacey\n[REDACTED:caller-secret]\n"; out != want {
		t.Errorf("stdout %q, want %q: only standalone occurrences go", out, want)
	}
	if resp.GetPolicyCheck().GetRuleId() != value || resp.GetPolicyCheck().GetDecision() != "allow" {
		t.Errorf("policy_check blinded: %v", resp.GetPolicyCheck())
	}
	decision := string(e.artifact("blind-rule", evidence.ArtifactPolicyDecision))
	if !strings.Contains(decision, `"rule_id": "allow_workspace"`) || !strings.Contains(decision, `"decision": "allow"`) {
		t.Errorf("policy_decision.json blinded:\n%s", decision)
	}
	req := decodeJSON(t, e.artifact("blind-rule", evidence.ArtifactRequest))
	args := req["args"].(map[string]any)
	if got := args["env"].(map[string]any)["V"]; got != "[REDACTED:caller-secret]" {
		t.Errorf("request.json env value %v, want the marker in place", got)
	}
	if !strings.Contains(args["command"].(string), "echo allow_workspace") {
		t.Errorf("request.json command blinded: %v", args["command"])
	}
	e.checkReplyIsStored("blind-rule", resp)
	m, err := evidence.ParseManifest(e.artifact("blind-rule", evidence.ArtifactManifest))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, r := range m.Redactions {
		found[r.Artifact+" "+r.Rule+" "+r.Path] = true
	}
	for _, want := range []string{
		"request.json caller-secret $.args.env.V",
		"tool_result.json caller-secret $.stdout",
		"response.json caller-secret $.tool_result.stdout",
	} {
		if !found[want] {
			t.Errorf("manifest lacks %q: %v", want, m.Redactions)
		}
	}
}
