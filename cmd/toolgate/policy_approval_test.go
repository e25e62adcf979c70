package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// approvalRules hold a shell call for ops, let root run it at once, and let
// members of ops approve it.
const approvalRules = `@id("shell_needs_ops") @approval("ops") @reason("runs arbitrary commands")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");

@id("root_runs_shell")
permit (principal == Caller::"root", action, resource == Tool::"workspace.shell");

@id("ops_approve_shell")
permit (principal, action == Action::"Approve", resource == Tool::"workspace.shell")
when { principal.groups.contains(context.group) };
`

func TestPolicyAuthorizeApproval(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": approvalRules})
	shell := []string{"--tool", "workspace.shell", "--args", `{"command": "ls"}`}
	approve := append([]string{"--action", "Approve", "--requester", "alice", "--group", "ops"}, shell...)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"a call held for approval says so and names the group", append([]string{"--caller", "alice"}, shell...), exitFailure, []string{
			"decision:   approval_required\n", "approvers:  a member of ops must approve this exact call\n",
			"rule_id:    shell_needs_ops\n", "reason:     runs arbitrary commands\n",
			"  * permit shell_needs_ops at policy.default.cedar:1:1 @approval(ops): runs arbitrary commands\n"}},
		{"an unmarked permit allows at once and alone decides", append([]string{"--caller", "root"}, shell...), exitOK, []string{
			"decision:   allow\n", "rule_id:    root_runs_shell\n",
			"    permit shell_needs_ops at policy.default.cedar:1:1 @approval(ops)", "  * permit root_runs_shell at policy.default.cedar:4:1\n"}},
		{"a member of ops may approve", append([]string{"--caller", "bob", "--groups", "ops"}, approve...), exitOK, []string{
			"decision:   allow\n", "rule_id:    ops_approve_shell\n"}},
		{"the requester may not approve their own call", append([]string{"--caller", "alice", "--groups", "ops"}, approve...), exitFailure, []string{
			"decision:   deny\n", "rule_id:    self_approval_denied\n"}},
		{"a caller outside the group may not approve", append([]string{"--caller", "carol"}, approve...), exitFailure, []string{
			"rule_id:    approver_not_in_group\n"}},
		{"an approval without its requester is a usage error", append([]string{"--caller", "bob", "--action", "Approve", "--group", "ops"}, shell...), exitError, []string{
			"caller is required"}},
		{"requester and group belong to Approve only", append([]string{"--caller", "bob", "--requester", "alice", "--group", "ops"}, shell...), exitError, []string{
			`approval is only for action "Approve"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkAuthorize(t, dir, tc.args, tc.wantCode, tc.want)
		})
	}
}

func TestPolicyAuthorizeApprovalJSON(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": approvalRules})
	out, stderr, code := runTool(t, ".", "policy", "authorize", "--json", "--policies", dir,
		"--caller", "alice", "--tool", "workspace.shell", "--args", `{"command": "ls"}`)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d:\n%s%s", code, exitFailure, out, stderr)
	}
	var got struct {
		Decision  string `json:"decision"`
		Approvers string `json:"approvers"`
		RuleID    string `json:"rule_id"`
		Matched   []struct {
			RuleID      string `json:"rule_id"`
			Approval    string `json:"approval"`
			Determining bool   `json:"determining"`
		} `json:"matched"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Decision != "approval_required" || got.Approvers != "ops" || got.RuleID != "shell_needs_ops" ||
		len(got.Matched) != 1 || got.Matched[0].Approval != "ops" || !got.Matched[0].Determining {
		t.Fatalf("got %+v, want approval_required by shell_needs_ops for ops, the rule marked as deciding", got)
	}
	want := map[string]any{}
	if err := json.Unmarshal([]byte(out), &want); err != nil || !reflect.DeepEqual(want["approvers"], "ops") {
		t.Fatalf("approvers is not a top-level field: %v", want)
	}
}

func TestPolicyTestCommandAssertsApprovals(t *testing.T) {
	t.Parallel()
	cases := `{"tests": [
		{"name": "shell waits for ops", "request": {"caller": "alice", "tool": "workspace.shell"},
		 "expect": {"decision": "approval_required", "approvers": "ops"}},
		{"name": "bob approves", "request": {"caller": "bob", "groups": ["ops"], "action": "Approve", "tool": "workspace.shell",
		 "approval": {"requester": "alice", "group": "ops"}}, "expect": {"decision": "allow", "rule_id": "ops_approve_shell"}},
		{"name": "alice approves herself", "request": {"caller": "alice", "groups": ["ops"], "action": "Approve", "tool": "workspace.shell",
		 "approval": {"requester": "alice", "group": "ops"}}, "expect": {"decision": "allow"}}
	]}`
	dir := policyFolder(t, map[string]string{"policy.default.cedar": approvalRules, "a.test.json": cases})
	out, stderr, code := runTool(t, ".", "policy", "test", dir)
	file := filepath.Join(dir, "a.test.json")
	if code != exitFailure || !strings.Contains(out, "2 passed, 1 failed\n") ||
		!strings.Contains(out, file+`: test "alice approves herself": decision: want allow, got deny (rule_id self_approval_denied: `) {
		t.Fatalf("exit %d, output:\n%s%s\nwant the self-approval case failing", code, out, stderr)
	}
}
