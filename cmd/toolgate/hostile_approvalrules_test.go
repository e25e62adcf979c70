package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileApprovalRules (approval rules): a rule that demands human
// approval must never let the call run at once, and a malformed approval
// rule must stop the gateway rather than be read some other way.
func TestHostileApprovalRules(t *testing.T) {
	t.Parallel()
	t.Run("a call only an approval rule permits does not run", func(t *testing.T) {
		dir := t.TempDir()
		writePolicy(t, dir, `@id("shell_needs_ops") @approval("ops") @reason("runs commands")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");
`)
		srv := startServer(t, dir)
		rule, decision, out := callDecision(t, dir, nil, "--addr", srv.addr, "--request-id", "appr-1",
			"--tool", "workspace.shell", "--args", `{"command": "touch pwned"}`)
		if decision == "allow" || rule != "shell_needs_ops" {
			t.Fatalf("rule %q decision %q, want the approval rule reported and no allow:\n%s", rule, decision, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "workspace", "pwned")); err == nil {
			t.Fatal("the shell ran without approval")
		}
	})

	const permit = `permit (principal, action, resource == Tool::"workspace.shell");` + "\n"
	for _, tc := range []struct {
		name, policy string
		want         []string
	}{
		{"an approval mark on a forbid, which would deny whoever approves",
			"@id(\"ok\") " + permit + "\n@id(\"no_rm\") @approval(\"ops\")\nforbid (principal, action, resource);\n",
			[]string{"policy.default.cedar:3:1:", "@approval is allowed only on a permit"}},
		{"an approval group that is not a plain lower-case name",
			"@id(\"shell\")\n@approval(\"ops; rm -rf /\")\n" + permit,
			[]string{"policy.default.cedar:1:1:", "the group must be 1 to 64 characters"}},
		{"an approval mark given twice",
			"@id(\"shell\")\n@approval(\"ops\")\n@approval(\"anyone\")\n" + permit,
			[]string{"policy.default.cedar:3:", "duplicate annotation: @approval"}},
		{"a self-approval mark with another value than allowed",
			"@id(\"self\") @self_approval(\"true\")\npermit (principal, action == Action::\"Approve\", resource);\n",
			[]string{"policy.default.cedar:1:1:", `the only value is "allowed"`}},
		{"a rule posing as the gateway's refusal of a self-approval",
			"@id(\"self_approval_denied\")\n" + permit,
			[]string{"policy.default.cedar:1:1:", "reserved"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePolicy(t, dir, tc.policy)
			for _, args := range [][]string{
				{"serve", "--listen", "127.0.0.1:0"},
				{"policy", "validate", "policies"},
			} {
				out, stderr, code := runTool(t, dir, args...)
				if code == exitOK {
					t.Fatalf("%v accepted the folder:\n%s%s", args, out, stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("%v: stderr lacks %q:\n%s", args, w, stderr)
					}
				}
			}
		})
	}
}
