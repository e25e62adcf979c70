package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostileCall runs `toolgate call` and returns the decoded policy_check
// with the raw output.
func callDecision(t *testing.T, dir string, env []string, args ...string) (ruleID, decision, out string) {
	t.Helper()
	out, stderr, _ := runToolEnv(t, dir, env, append([]string{"call"}, args...)...)
	var resp struct {
		PolicyCheck struct {
			Decision string `json:"decision"`
			RuleID   string `json:"rule_id"`
			Reason   string `json:"reason"`
		} `json:"policy_check"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("call %v: %v\n%s%s", args, err, out, stderr)
	}
	return resp.PolicyCheck.RuleID, resp.PolicyCheck.Decision, out
}

// writeFiles writes name → content below dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostilePolicySelection (class 1): a caller cannot pick the policy set
// that judges its call. The folder holds a strict default, a shadow
// candidate that permits everything, and a lenient set a team keeps for
// its ops group; the attacker names the permissive sets in ctx.policy_ref
// and asks for the shell.
func TestHostilePolicySelection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"policies/policy.default.cedar":   `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`,
		"policies/policy.candidate.cedar": `@id("candidate_all") permit (principal, action, resource);`,
		"policies/policy.lenient.cedar":   `@id("lenient_all") permit (principal, action, resource);`,
		"toolgate.yaml": `
auth:
  keys:
    - {caller: attacker, env: KEY_ATTACKER}
    - {caller: ops-bot, env: KEY_OPS, groups: [ops]}
policies:
  dir: ./policies
  reload_interval: 50ms
  shadow: {policy.default: policy.candidate}
  selectable:
    - {groups: [ops], refs: [policy.lenient]}
`,
	})
	env := []string{"KEY_ATTACKER=k-attacker-0123456789", "KEY_OPS=k-ops-0123456789"}
	srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")
	marker := filepath.Join(dir, "workspace", "pwned")
	shell := func(t *testing.T, id, key, ref string) (string, string, string) {
		t.Helper()
		return callDecision(t, dir, env, "--addr", srv.addr, "--key-env", key, "--request-id", id,
			"--tool", "workspace.shell", "--args", `{"command": "touch pwned"}`, "--policy-ref", ref)
	}
	refused := func(t *testing.T, rule, decision, out, ref string) {
		t.Helper()
		if rule != "policy_ref_not_selectable" || decision != "deny" || !strings.Contains(out, ref) {
			t.Fatalf("rule %q decision %q, want a policy_ref_not_selectable deny naming %s:\n%s", rule, decision, ref, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the shell ran")
		}
		rec, err := os.ReadFile(filepath.Join(dir, "toolgate-evidence", "requests", idOf(out), "policy_decision.json"))
		if err != nil || !strings.Contains(string(rec), `"rule_id": "policy_ref_not_selectable"`) {
			t.Fatalf("the refusal is not on record: %v\n%s", err, rec)
		}
	}

	t.Run("naming the shadow candidate", func(t *testing.T) {
		rule, decision, out := shell(t, "sel-shadow", "KEY_ATTACKER", "policy.candidate")
		refused(t, rule, decision, out, "policy.candidate")
	})
	t.Run("naming a set selectable only by another group", func(t *testing.T) {
		rule, decision, out := shell(t, "sel-lenient", "KEY_ATTACKER", "policy.lenient")
		refused(t, rule, decision, out, "policy.lenient")
	})
	t.Run("naming the shadow candidate after it was reloaded", func(t *testing.T) {
		writeFiles(t, dir, map[string]string{"policies/policy.candidate.cedar": `@id("candidate_v2") permit (principal, action, resource);`})
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(srv.log.String(), "policies reloaded") {
			if time.Now().After(deadline) {
				t.Fatalf("the change was not reloaded:\n%s", srv.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		rule, decision, out := shell(t, "sel-shadow-2", "KEY_ATTACKER", "policy.candidate")
		refused(t, rule, decision, out, "policy.candidate")
	})
	t.Run("listing tools under the shadow candidate lists none", func(t *testing.T) {
		out, stderr, code := runToolEnv(t, dir, env, "tools", "--addr", srv.addr, "--key-env", "KEY_ATTACKER", "--policy-ref", "policy.candidate")
		if code != exitOK || strings.Contains(out, "workspace.") {
			t.Fatalf("exit %d, tools listed under a shadow set:\n%s%s", code, out, stderr)
		}
	})
	t.Run("the group the set is given to may select it", func(t *testing.T) {
		rule, decision, out := callDecision(t, dir, env, "--addr", srv.addr, "--key-env", "KEY_OPS", "--request-id", "sel-ops",
			"--tool", "workspace.readFile", "--args", `{"path": "none.txt"}`, "--policy-ref", "policy.lenient")
		if rule != "lenient_all" || decision != "allow" {
			t.Fatalf("ops-bot under policy.lenient: rule %q decision %q\n%s", rule, decision, out)
		}
	})
}

// idOf returns the request id of a response from its first evidence ref.
func idOf(out string) string {
	var resp struct {
		EvidenceRefs []string `json:"evidence_refs"`
	}
	if json.Unmarshal([]byte(out), &resp) != nil || len(resp.EvidenceRefs) == 0 {
		return ""
	}
	parts := strings.Split(resp.EvidenceRefs[0], "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// TestHostilePolicyValidation (class 10): a folder without a schema of its
// own is validated against the gateway's built-in schema. A dead forbid (a
// mistyped action or attribute), an annotation the gateway does not
// implement, and a folder schema that weakens the model are all refused,
// by serve at start and by `toolgate policy validate`, with file:line:col.
func TestHostilePolicyValidation(t *testing.T) {
	t.Parallel()
	const permitShell = `@id("shell") permit (principal, action, resource == Tool::"workspace.shell");` + "\n"
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"a forbid with a mistyped action", map[string]string{
			"policy.default.cedar": permitShell + "@id(\"no_rm\")\nforbid (principal, action == Action::\"RunTol\", resource == Tool::\"workspace.shell\");\n",
		}, []string{"policy.default.cedar:2:1:", "unrecognized action `Action::\"RunTol\"`"}},
		{"a forbid with a mistyped attribute", map[string]string{
			"policy.default.cedar": permitShell + "@id(\"no_evil\")\nforbid (principal, action, resource) when { resource.pakage like \"evil*\" };\n",
		}, []string{"policy.default.cedar:2:1:", "attribute `pakage` on entity type `Tool` not found"}},
		{"a permit marked with a misspelt approval annotation", map[string]string{
			"policy.default.cedar": "@id(\"shell\")\n@approve(\"ops\")\npermit (principal, action, resource == Tool::\"workspace.shell\");\n",
		}, []string{"policy.default.cedar:1:1:", "unknown annotation @approve"}},
		{"a folder schema that drops an attribute", map[string]string{
			"policy.default.cedar": permitShell,
			"toolgate.cedarschema": "entity Caller { groups: Set<String> };\n",
		}, []string{"toolgate.cedarschema", "entity Caller: drops attribute `roles`"}},
		{"a folder schema that redefines Tool", map[string]string{
			"policy.default.cedar": permitShell,
			"toolgate.cedarschema": "entity Tool { driver: Long, package: String, export: String, version: String, tags: Set<String> };\n",
		}, []string{"toolgate.cedarschema", "entity Tool: changes its parent types", "changes the type of attribute `driver`"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{}
			for name, text := range tc.files {
				files[filepath.Join("policies", name)] = text
			}
			writeFiles(t, dir, files)
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
