package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// policyFolder writes files into a fresh policy folder and returns it.
func policyFolder(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	broken := policyFolder(t, map[string]string{
		"policy.default.cedar": "@id(\"a\")\npermit (principal, action, resource)\nwhen { context.nope };\n\n" +
			"@id(\"b\")\npermit (principal == User::\"x\", action, resource);\n",
	})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"shipped policies", []string{"validate", "../../policies"}, exitOK, []string{"ok: 1 policy set(s)", "policy.default"}},
		{"check is an alias", []string{"check", "../../policies"}, exitOK, []string{"ok: 1 policy set(s)"}},
		{"every problem of a file", []string{"validate", broken}, exitFailure, []string{
			filepath.Join(broken, "policy.default.cedar") + ":1:1: policy \"a\": context has no attribute `nope`",
			filepath.Join(broken, "policy.default.cedar") + ":5:1: policy \"b\": unrecognized entity type `User`",
		}},
		{"missing folder", []string{"validate", filepath.Join(broken, "nope")}, exitFailure, []string{"nope"}},
		{"no folder", []string{"validate"}, exitError, []string{"usage: toolgate policy validate DIR"}},
		{"the built-in schema", []string{"schema"}, exitOK, []string{"entity Tool in [Driver] {", `action "RunTool", "CallTool" appliesTo {`,
			`action "Approve" appliesTo {`, "type ApproveContext = {", "selfApproval: Bool,", "requester: String,"}},
		{"a folder schema may only add", []string{"validate", policyFolder(t, map[string]string{
			"policy.default.cedar": `@id("r") permit (principal, action, resource);`,
			"toolgate.cedarschema": "entity Caller { groups: Set<String> };",
		})}, exitFailure, []string{"toolgate.cedarschema: a policy folder's schema may only add to the gateway's built-in schema: entity Caller: drops attribute `roles`"}},
		{"unknown subcommand", []string{"frob"}, exitError, []string{`unknown command "frob"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, ".", append([]string{"policy"}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s%s", code, tc.wantCode, out, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+stderr, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, stderr)
				}
			}
		})
	}
}

// authorizeRules exercises every part of a dry run: two permits, a forbid
// that overrules them, attribute and argument tests, and a rule that fails
// to evaluate (an argument of the wrong type).
const authorizeRules = `@id("read") @reason("reads are harmless")
permit (principal, action, resource == Tool::"workspace.readFile");

@id("alice_workspace")
permit (principal == Caller::"alice", action, resource in Driver::"workspace");

@id("no_secrets") @reason("secrets stay put")
forbid (principal, action, resource)
when { context.args has path && context.args.path like "secret/*" };

@id("safe_packages")
permit (principal, action == Action::"RunTool", resource in Driver::"tpmjs")
when { resource.package like "@safe/*" && resource.tags.contains("read-only") && resource.version == "1.2.0" };

@id("sandbox_reads_runs")
permit (principal, action == Action::"CallTool", resource == Tool::"exec.run")
when { context has parentRequestId && context.parentRequestId == "outer-1" };

@id("small_batches")
permit (principal == Caller::"batch", action, resource == Tool::"workspace.batch")
when { context.args has size && context.args.size < 10 };
`

func TestPolicyAuthorize(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": authorizeRules})
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"allowed read", []string{"--caller", "bob", "--tool", "workspace.readFile"}, exitOK,
			[]string{"decision:   allow\n", "rule_id:    read\n", "reason:     reads are harmless\n", "policy_ref: policy.default (sha256:",
				"  * permit read at policy.default.cedar:1:1: reads are harmless\n"}},
		{"every matching permit is listed", []string{"--caller", "alice", "--tool", "workspace.readFile"}, exitOK,
			[]string{"  * permit read at", "  * permit alice_workspace at policy.default.cedar:4:1\n"}},
		{"a forbid overrules the permits", []string{"--caller", "alice", "--tool", "workspace.readFile", "--args", `{"path": "secret/key"}`}, exitFailure,
			[]string{"decision:   deny\n", "rule_id:    no_secrets\n", "    permit read at", "    permit alice_workspace at", "  * forbid no_secrets at policy.default.cedar:7:1: secrets stay put\n"}},
		{"nothing matches", []string{"--caller", "bob", "--tool", "workspace.shell"}, exitFailure,
			[]string{"rule_id:    default_deny\n", "matched:    no policy\n"}},
		{"tool attributes", []string{"--caller", "bob", "--tool", "tpmjs.cat", "--driver", "tpmjs", "--package", "@safe/cat", "--export", "cat", "--version", "1.2.0", "--tags", "net, read-only"}, exitOK,
			[]string{"rule_id:    safe_packages\n"}},
		{"tool attributes that do not match", []string{"--caller", "bob", "--tool", "tpmjs.cat", "--driver", "tpmjs", "--package", "@safe/cat", "--version", "1.2.0", "--tags", "net"}, exitFailure,
			[]string{"rule_id:    default_deny\n"}},
		{"a parent request makes a CallTool", []string{"--caller", "bob", "--tool", "exec.run", "--driver", "exec", "--parent-request-id", "outer-1"}, exitOK,
			[]string{"rule_id:    sandbox_reads_runs\n"}},
		{"an explicit RunTool is not a CallTool", []string{"--caller", "bob", "--tool", "exec.run", "--driver", "exec", "--parent-request-id", "outer-1", "--action", "RunTool"}, exitFailure,
			[]string{"rule_id:    default_deny\n"}},
		{"numbers compare as numbers", []string{"--caller", "batch", "--tool", "workspace.batch", "--args", `{"size": 9}`}, exitOK,
			[]string{"rule_id:    small_batches\n"}},
		{"evaluation errors are printed", []string{"--caller", "batch", "--tool", "workspace.batch", "--args", `{"size": "big"}`}, exitFailure,
			[]string{"rule_id:    policy_error\n", "error:      policy.default.cedar:19:1: rule small_batches: "}},
		{"unknown policy set", []string{"--caller", "bob", "--tool", "workspace.readFile", "--policy-ref", "strict"}, exitFailure,
			[]string{"rule_id:    unknown_policy_ref\n", `no policy set named "strict"`}},
		{"driver required off the workspace", []string{"--caller", "bob", "--tool", "tpmjs.cat"}, exitError,
			[]string{`driver is required for tool "tpmjs.cat"`}},
		{"caller required", []string{"--tool", "workspace.readFile"}, exitError, []string{"caller is required"}},
		{"bad action", []string{"--caller", "bob", "--tool", "workspace.readFile", "--action", "Delete"}, exitError, []string{`action "Delete"`}},
		{"args not an object", []string{"--caller", "bob", "--tool", "workspace.readFile", "--args", "[1]"}, exitError, []string{"--args: want one JSON object"}},
		{"args with trailing data", []string{"--caller", "bob", "--tool", "workspace.readFile", "--args", "{} {}"}, exitError, []string{"--args"}},
		{"stray argument", []string{"--caller", "bob", "--tool", "workspace.readFile", "extra"}, exitError, []string{"unexpected arguments"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkAuthorize(t, dir, tc.args, tc.wantCode, tc.want)
		})
	}
}

func TestPolicyAuthorizeJSON(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": authorizeRules})
	type matched struct {
		RuleID      string `json:"rule_id"`
		Effect      string `json:"effect"`
		Reason      string `json:"reason"`
		Position    string `json:"position"`
		Determining bool   `json:"determining"`
	}
	type explanation struct {
		Decision        string    `json:"decision"`
		RuleID          string    `json:"rule_id"`
		Reason          string    `json:"reason"`
		PolicyRef       string    `json:"policy_ref"`
		PolicySetDigest string    `json:"policy_set_digest"`
		Matched         []matched `json:"matched"`
		Errors          []string  `json:"errors"`
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     explanation
	}{
		{"forbid over permits", []string{"--caller", "alice", "--tool", "workspace.readFile", "--args", `{"path": "secret/key"}`}, exitFailure, explanation{
			Decision: "deny", RuleID: "no_secrets", Reason: "secrets stay put", PolicyRef: "policy.default",
			Matched: []matched{
				{"read", "permit", "reads are harmless", "policy.default.cedar:1:1", false},
				{"alice_workspace", "permit", "", "policy.default.cedar:4:1", false},
				{"no_secrets", "forbid", "secrets stay put", "policy.default.cedar:7:1", true},
			},
			Errors: []string{},
		}},
		{"nothing matches", []string{"--caller", "bob", "--tool", "workspace.shell"}, exitFailure, explanation{
			Decision: "deny", RuleID: "default_deny", PolicyRef: "policy.default",
			Reason:  `no permit policy in policy.default.cedar matched caller "bob" calling tool "workspace.shell"`,
			Matched: []matched{}, Errors: []string{},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "authorize", "--json", "--policies", dir}, tc.args...)
			out, stderr, code := runTool(t, ".", args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s%s", code, tc.wantCode, out, stderr)
			}
			var got explanation
			dec := json.NewDecoder(strings.NewReader(out))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("output is not the documented JSON: %v\n%s", err, out)
			}
			if !strings.HasPrefix(got.PolicySetDigest, "sha256:") {
				t.Errorf("policy_set_digest = %q", got.PolicySetDigest)
			}
			got.PolicySetDigest = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPolicyAuthorizeLoadError(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": "permit (principal action resource);\n"})
	_, stderr, code := runTool(t, ".", "policy", "authorize", "--policies", dir, "--caller", "a", "--tool", "workspace.readFile")
	if code != exitError || !strings.Contains(stderr, "policy.default.cedar:1:") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit %d naming the file and line", code, stderr, exitError)
	}
}

// TestPolicyAuthorizeShipped checks the dry run on the shipped folder, the
// default for --policies, from a checkout's root.
func TestPolicyAuthorizeShipped(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	out, stderr, code := runTool(t, dir, "policy", "authorize", "--caller", "alice", "--tool", "workspace.readFile", "--action", "CallTool", "--args", `{"path": "a.txt"}`)
	if code != exitOK || !strings.Contains(out, "rule_id:    workspace_read_only\n") {
		t.Fatalf("exit %d, output:\n%s%s", code, out, stderr)
	}
}

func TestPolicyTestCommand(t *testing.T) {
	t.Parallel()
	rules := `@id("read") @reason("reads are harmless")
permit (principal, action, resource == Tool::"workspace.readFile");
`
	failing := policyFolder(t, map[string]string{
		"policy.default.cedar": rules,
		"policy.default.test.json": `{"tests": [
			{"name": "read", "request": {"caller": "a", "tool": "workspace.readFile"}, "expect": {"decision": "allow", "rule_id": "read"}},
			{"name": "shell", "request": {"caller": "a", "tool": "workspace.shell"}, "expect": {"decision": "allow", "rule_id": "shell_ok"}}
		]}`,
	})
	malformed := policyFolder(t, map[string]string{
		"policy.default.cedar": rules,
		"a.test.json":          `{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.readFile", "tool_id": "x"}, "expect": {"decision": "allow"}}]}`,
	})
	empty := policyFolder(t, map[string]string{"policy.default.cedar": rules})
	shellFile := filepath.Join(failing, "policy.default.test.json")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"shipped tests pass", []string{"../../policies"}, exitOK, []string{"7 passed, 0 failed\n"}},
		{"a failing case is explained", []string{failing}, exitFailure, []string{
			shellFile + `: test "shell": decision: want allow, got deny (rule_id default_deny: no permit policy in policy.default.cedar matched caller "a" calling tool "workspace.shell")` + "\n",
			shellFile + `: test "shell": rule_id: want shell_ok, got default_deny (rule_id default_deny: `,
			"1 passed, 1 failed\n",
		}},
		{"unknown fields are errors", []string{malformed}, exitError, []string{filepath.Join(malformed, "a.test.json"), `unknown field "tool_id"`}},
		{"a folder without tests fails", []string{empty}, exitFailure, []string{"no .test.json files"}},
		{"no folder", nil, exitError, []string{"usage: toolgate policy test DIR"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, ".", append([]string{"policy", "test"}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; output:\n%s%s", code, tc.wantCode, out, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out+stderr, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, stderr)
				}
			}
			if strings.Contains(out, `test "read"`) {
				t.Errorf("a passing case is reported as failing:\n%s", out)
			}
		})
	}
}

// TestPolicyAuthorizeGroups: the dry run takes the caller's groups and
// roles, as the gateway takes them from its auth configuration.
func TestPolicyAuthorizeGroups(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("ops_shell") permit (principal, action, resource == Tool::"workspace.shell")
when { principal.groups.contains("ops") && principal.roles.contains("oncall") };`)
	base := []string{"policy", "authorize", "--policies", filepath.Join(dir, "policies"), "--caller", "alice", "--tool", "workspace.shell"}
	if _, _, code := runTool(t, dir, append(base, "--groups", "ops, dev", "--roles", "oncall")...); code != exitOK {
		t.Errorf("ops + oncall: exit %d, want allow", code)
	}
	if _, _, code := runTool(t, dir, append(base, "--groups", "dev")...); code != exitFailure {
		t.Errorf("dev only: exit %d, want deny", code)
	}
}

// checkAuthorize runs policy authorize on the folder dir with args and
// fails t unless it exits wantCode with every string of want in its output.
func checkAuthorize(t *testing.T, dir string, args []string, wantCode int, want []string) {
	t.Helper()
	out, stderr, code := runTool(t, ".", append([]string{"policy", "authorize", "--policies", dir}, args...)...)
	if code != wantCode {
		t.Fatalf("exit %d, want %d; output:\n%s%s", code, wantCode, out, stderr)
	}
	for _, w := range want {
		if !strings.Contains(out+stderr, w) {
			t.Errorf("output lacks %q:\n%s%s", w, out, stderr)
		}
	}
}
