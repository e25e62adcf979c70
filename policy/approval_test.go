package policy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const approvalDir = "testdata/approval"

// TestDecideWithApprovalRules is the semantics table of approval rules,
// decided over testdata/approval/policy.default.cedar.
func TestDecideWithApprovalRules(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, approvalDir)
	shell := func(caller, cmd string) Request {
		r := call("workspace.shell")
		r.Caller, r.Args = caller, map[string]any{"cmd": cmd}
		return r
	}
	write := func(size any) Request {
		r := call("workspace.writeFile")
		r.Args = map[string]any{"path": "a", "size": size}
		return r
	}
	tests := []struct {
		name      string
		req       Request
		word      string
		rule      string
		approvers string
		reason    string
	}{
		{"a call only an approval rule matches is held for that rule's group", shell("alice", "ls"),
			WordApprovalRequired, "shell_needs_ops", "ops", "runs arbitrary commands"},
		{"of two matching approval rules the first in the file is reported", shell("alice", "rm -rf tmp"),
			WordApprovalRequired, "shell_needs_ops", "ops", "runs arbitrary commands"},
		{"a permit without the mark allows at once although approval rules match too", shell("root", "rm -rf tmp"),
			WordAllow, "root_runs_shell", "", "permitted by policy root_runs_shell"},
		{"a forbid denies a call an approval rule would hold", shell("alice", "deploy prod"),
			WordDeny, "no_prod", "", "never on prod"},
		{"a forbid denies a call an unmarked permit would allow", shell("root", "deploy prod"),
			WordDeny, "no_prod", "", "never on prod"},
		{"an approval rule without a reason says who must approve", write(json.Number("5000")),
			WordApprovalRequired, "big_writes_need_ops", "ops", "policy big_writes_need_ops requires approval by a member of ops"},
		{"an approval rule that fails to evaluate denies instead of asking", write("huge"),
			WordDeny, RulePolicyError, "", ""},
		{"a call no permit matches is a default deny", write(json.Number("10")),
			WordDeny, RuleDefaultDeny, "", ""},
		{"an approver's action cannot be asked of Decide", func() Request { r := shell("alice", "ls"); r.Action = ActionApprove; return r }(),
			WordDeny, RulePolicyError, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tt.req)
			if d.Word() != tt.word || d.RuleID != tt.rule || d.Approvers != tt.approvers {
				t.Fatalf("Decide = %s by %q approvers %q (%s), want %s by %q approvers %q", d.Word(), d.RuleID, d.Approvers, d.Reason, tt.word, tt.rule, tt.approvers)
			}
			if tt.reason != "" && d.Reason != tt.reason {
				t.Errorf("reason %q, want %q", d.Reason, tt.reason)
			}
			if d.ApprovalRequired && d.Allow {
				t.Errorf("a held-back call is also allowed: %+v", d)
			}
			if !strings.HasPrefix(d.PolicySetDigest, "sha256:") {
				t.Errorf("no policy set digest: %+v", d)
			}
		})
	}
}

// TestDecideApproval: who may approve a pending call, decided over
// testdata/approval.
func TestDecideApproval(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, approvalDir)
	pending := func(approver string, groups []string, cmd string) ApprovalRequest {
		return ApprovalRequest{
			Approver: approver, ApproverAttrs: CallerAttributes{Groups: groups},
			ToolID: "workspace.shell", Driver: "workspace",
			Requester: "alice", RequestID: "req-1", Group: "ops",
			Args: map[string]any{"cmd": cmd},
		}
	}
	with := func(a ApprovalRequest, edit func(*ApprovalRequest)) ApprovalRequest { edit(&a); return a }
	ops := []string{"ops"}
	tests := []struct {
		name string
		req  ApprovalRequest
		word string
		rule string
	}{
		{"a member of the group whom an Approve permit authorises may approve", pending("bob", ops, "ls"),
			WordAllow, "ops_approve_shell"},
		{"a caller outside the group is refused whatever the policies say", pending("carol", nil, "ls"),
			WordDeny, RuleNotInApprovalGroup},
		{"membership of another group does not make an approver", pending("carol", []string{"security"}, "ls"),
			WordDeny, RuleNotInApprovalGroup},
		{"a group spelt other than the rule's is refused", with(pending("bob", []string{"Ops"}, "ls"), func(a *ApprovalRequest) { a.Group = "Ops" }),
			WordDeny, RuleNotInApprovalGroup},
		{"the requester may not approve their own call", with(pending("alice", ops, "rm -rf tmp"), func(a *ApprovalRequest) {}),
			WordDeny, RuleSelfApprovalDenied},
		{"self-approval passes through a permit marked @self_approval", with(pending("alice", ops, "ls"), func(a *ApprovalRequest) { a.ApproverAttrs.Roles = []string{"lead"} }),
			WordAllow, "leads_self_approve_ls"},
		{"a self-approval permit does not stretch beyond its conditions", with(pending("alice", ops, "rm -rf tmp"), func(a *ApprovalRequest) { a.ApproverAttrs.Roles = []string{"lead"} }),
			WordDeny, RuleSelfApprovalDenied},
		{"a forbid on Approve refuses an authorised approver", pending("bob", ops, "deploy prod"),
			WordDeny, "no_prod_approvals"},
		{"a permit that names no action does not make everyone an approver", with(pending("bob", ops, "ls"), func(a *ApprovalRequest) { a.PolicyRef = "legacy" }),
			WordDeny, RuleDefaultDeny},
		{"a permit marked @approval does not authorise an approver", with(pending("bob", ops, "ls"), func(a *ApprovalRequest) { a.PolicyRef = "marked" }),
			WordDeny, RuleDefaultDeny},
		{"an Approve permit that fails to evaluate denies", with(pending("bob", ops, ""), func(a *ApprovalRequest) {
			a.ToolID, a.Args = "workspace.writeFile", map[string]any{"size": "huge"}
		}), WordDeny, RulePolicyError},
		{"an unknown policy set denies", with(pending("bob", ops, "ls"), func(a *ApprovalRequest) { a.PolicyRef = "nope" }),
			WordDeny, RuleUnknownPolicyRef},
		{"an approval request without a requester denies", with(pending("bob", ops, "ls"), func(a *ApprovalRequest) { a.Requester = "" }),
			WordDeny, RulePolicyError},
		{"an approval request without a request id denies", with(pending("bob", ops, "ls"), func(a *ApprovalRequest) { a.RequestID = "" }),
			WordDeny, RulePolicyError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.DecideApproval(context.Background(), tt.req)
			if d.Word() != tt.word || d.RuleID != tt.rule {
				t.Fatalf("DecideApproval = %s by %q (%s), want %s by %q", d.Word(), d.RuleID, d.Reason, tt.word, tt.rule)
			}
			if d.ApprovalRequired || d.Reason == "" {
				t.Errorf("DecideApproval = %+v: approval required, or no reason", d)
			}
		})
	}
}

func TestDecideApprovalFailsClosedOnCancel(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, approvalDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := e.DecideApproval(ctx, ApprovalRequest{Approver: "bob", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}},
		ToolID: "workspace.shell", Driver: "workspace", Requester: "alice", RequestID: "r", Group: "ops"})
	if d.Allow || d.RuleID != RulePolicyError {
		t.Fatalf("DecideApproval with a cancelled context = %+v, want a policy_error deny", d)
	}
}

// TestLoadChecksApprovalAnnotations: every malformed approval rule is
// refused at load, with the file and line of the policy.
func TestLoadChecksApprovalAnnotations(t *testing.T) {
	t.Parallel()
	permit := "permit (principal, action, resource == Tool::\"workspace.shell\");"
	tests := []struct {
		name string
		src  string
		want string // a regexp one line of the error must match
	}{
		{"an approval mark on a forbid", "\n@approval(\"ops\")\nforbid (principal, action, resource);",
			`p\.cedar:2:1: policy "p\.cedar:policy0": @approval is allowed only on a permit`},
		{"an empty group", "@approval(\"\")\n" + permit, `p\.cedar:1:1: .*@approval\(""\): the group must be`},
		{"an approval mark without a group", "@approval\n" + permit, `p\.cedar:1:1: .*@approval\(""\): the group must be`},
		{"an upper-case group", "@approval(\"Ops\")\n" + permit, `p\.cedar:1:1: .*@approval\("Ops"\): the group must be`},
		{"a group with a space", "@approval(\"ops team\")\n" + permit, `p\.cedar:1:1: .*the group must be`},
		{"a group of 65 characters", "@approval(\"" + strings.Repeat("a", 65) + "\")\n" + permit, `p\.cedar:1:1: .*the group must be`},
		{"two approval marks on one permit", "permit (principal, action, resource);\n@approval(\"ops\") @approval(\"security\")\n" + permit,
			`p\.cedar:2:\d+: parse error.*duplicate annotation: @approval`},
		{"a self-approval value other than allowed", "@self_approval(\"yes\")\npermit (principal, action == Action::\"Approve\", resource);",
			`p\.cedar:1:1: .*@self_approval\("yes"\): the only value is "allowed"`},
		{"a self-approval mark on a forbid", "@self_approval(\"allowed\")\nforbid (principal, action == Action::\"Approve\", resource);",
			`p\.cedar:1:1: .*@self_approval is allowed only on a permit`},
		{"a self-approval mark beside an approval mark", "@self_approval(\"allowed\") @approval(\"ops\")\n" + permit,
			`p\.cedar:1:1: .*@self_approval cannot be combined with @approval`},
		{"a rule posing as the gateway's self-approval refusal", "@id(\"self_approval_denied\")\n" + permit,
			`p\.cedar:1:1: @id\("self_approval_denied"\) is reserved`},
		{"a rule posing as the gateway's group refusal", "@id(\"approver_not_in_group\")\n" + permit,
			`p\.cedar:1:1: @id\("approver_not_in_group"\) is reserved`},
		{"an Approve rule reading a misspelt context attribute", "permit (principal, action == Action::\"Approve\", resource) when { context.approver == \"x\" };",
			`p\.cedar:1:1: .*context has no attribute .approver.`},
		{"a RunTool rule reading the approver's context", "permit (principal, action == Action::\"RunTool\", resource) when { context.requester == \"x\" };",
			`p\.cedar:1:1: .*requester`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := policyDir(t, map[string]string{"p.cedar": tt.src})
			e, err := Load(dir)
			if err == nil {
				t.Fatalf("Load succeeded with refs %v, want an error", e.Refs())
			}
			lines := strings.Split(err.Error(), "\n")
			re := regexp.MustCompile("^" + regexp.QuoteMeta(dir+string(filepath.Separator)) + tt.want)
			if !slices.ContainsFunc(lines, re.MatchString) {
				t.Errorf("no line of the error matches %q:\n%s", tt.want, err)
			}
		})
	}
}

func TestFolderSchemaCannotLoosenApprove(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{
		SchemaFile: "action \"Approve\" appliesTo { principal: [Caller], resource: [Tool], context: { requestId: String } };",
		"p.cedar":  "",
	})
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), `action Action::"Approve": declared differently`) {
		t.Fatalf("Load = %v, want the redeclared Approve action refused", err)
	}
}

func TestLoadAcceptsApprovalRules(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"@approval(\"ops\") permit (principal, action, resource);",
		"@approval(\"" + strings.Repeat("z", 64) + "\") permit (principal, action, resource);",
		"@approval(\"sec.team_2-on-call\") permit (principal, action, resource);",
		"@self_approval(\"allowed\") permit (principal, action == Action::\"Approve\", resource) when { context.selfApproval && context.requester == \"x\" };",
	} {
		mustLoad(t, policyDir(t, map[string]string{"p.cedar": src}))
	}
}

// TestExplainMarksApprovalRules: a dry run lists which matching rules
// decided, and their approval groups.
func TestExplainMarksApprovalRules(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, approvalDir)
	r := call("workspace.shell")
	r.Args = map[string]any{"cmd": "rm -rf tmp"}
	x := e.Explain(context.Background(), r)
	got := make([]string, 0, len(x.Matched))
	for _, m := range x.Matched {
		got = append(got, m.RuleID+"/"+m.Approval+"/"+map[bool]string{true: "*", false: "-"}[m.Determining])
	}
	want := []string{"shell_needs_ops/ops/*", "shell_rm_needs_security/security/*"}
	if !x.ApprovalRequired || !slices.Equal(got, want) {
		t.Fatalf("Explain = %s, matched %v; want approval_required, matched %v", x.Word(), got, want)
	}

	r.Caller = "root"
	if x = e.Explain(context.Background(), r); !x.Allow || !slices.Equal(determiningIDs(x), []string{"root_runs_shell"}) {
		t.Fatalf("Explain = %s, decided by %v; want allow decided by root_runs_shell alone", x.Word(), determiningIDs(x))
	}

	a := ApprovalRequest{Approver: "alice", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}, Roles: []string{"lead"}},
		ToolID: "workspace.shell", Driver: "workspace", Requester: "alice", RequestID: "r", Group: "ops", Args: map[string]any{"cmd": "ls"}}
	if x = e.ExplainApproval(context.Background(), a); !x.Allow || !slices.Equal(determiningIDs(x), []string{"leads_self_approve_ls"}) {
		t.Fatalf("ExplainApproval = %s, decided by %v; want allow decided by leads_self_approve_ls alone", x.Word(), determiningIDs(x))
	}
}

func determiningIDs(x Explanation) []string {
	var out []string
	for _, m := range x.Matched {
		if m.Determining {
			out = append(out, m.RuleID)
		}
	}
	return out
}

// TestRunTestsAssertsApprovals: a test file asserts approval_required, its
// group, and approver decisions; a wrong group is a failing case.
func TestRunTestsAssertsApprovals(t *testing.T) {
	t.Parallel()
	rep, err := RunTests(context.Background(), approvalDir, testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() != 0 || rep.Passed() != 4 {
		t.Fatalf("%d passed, %d failed: %+v", rep.Passed(), rep.Failed(), rep.Results)
	}

	src := `{"tests": [{"name": "wrong group", "request": {"caller": "alice", "tool": "workspace.shell"},
		"expect": {"decision": "approval_required", "approvers": "security"}}]}`
	cases, err := ParseTestFile("f.test.json", []byte(src), testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	res := runCase(context.Background(), mustLoad(t, approvalDir), "f.test.json", cases[0])
	if res.Passed() || !strings.Contains(strings.Join(res.Mismatches, "\n"), "approvers: want security, got \"ops\"") {
		t.Fatalf("a wrong approval group passed or was misreported: %q", res.Mismatches)
	}
}

func TestParseTestFileRefusesImpossibleApprovalCases(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, request, decision, want string }{
		{"an approver expected to need approval",
			`{"caller": "b", "action": "Approve", "tool": "workspace.shell", "approval": {"requester": "a", "group": "ops"}}`,
			"approval_required", `is impossible for action "Approve"`},
		{"an Approve request without its pending call",
			`{"caller": "b", "action": "Approve", "tool": "workspace.shell"}`,
			"allow", "approval (requester and group) is required"},
		{"an Approve request without a requester",
			`{"caller": "b", "action": "Approve", "tool": "workspace.shell", "approval": {"group": "ops"}}`,
			"allow", "approval: caller is required"},
		{"an Approve request with a malformed group",
			`{"caller": "b", "action": "Approve", "tool": "workspace.shell", "approval": {"requester": "a", "group": "Ops"}}`,
			"allow", `approval.group "Ops" must be`},
		{"an approval block on a RunTool request",
			`{"caller": "b", "tool": "workspace.shell", "approval": {"requester": "a", "group": "ops"}}`,
			"allow", `approval is only for action "Approve"`},
		{"an unknown decision word",
			`{"caller": "b", "tool": "workspace.shell"}`,
			"pending", `must be "allow", "deny" or "approval_required"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := `{"tests": [{"name": "n", "request": ` + tt.request + `, "expect": {"decision": "` + tt.decision + `"}}]}`
			_, err := ParseTestFile("f.test.json", []byte(src), testCatalog)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseTestFile = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestLiveDecidesApproversWithTheSetsInForce(t *testing.T) {
	t.Parallel()
	l, err := NewLive(approvalDir)
	if err != nil {
		t.Fatal(err)
	}
	a := ApprovalRequest{Approver: "bob", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}}, Requester: "alice",
		Group: "ops", ToolID: "workspace.shell", Driver: "workspace", RequestID: "r", Args: map[string]any{"cmd": "ls"}}
	if d := l.DecideApproval(context.Background(), a); !d.Allow || d.RuleID != "ops_approve_shell" {
		t.Fatalf("Live.DecideApproval = %+v, want allow by ops_approve_shell", d)
	}
}

func TestHasApprovalRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"an @approval permit in the default set", map[string]string{"policy.default.cedar": "@approval(\"ops\") permit (principal, action, resource);"}, true},
		{"an @approval permit in another set only", map[string]string{
			"policy.default.cedar": "permit (principal, action, resource);",
			"strict.cedar":         "@id(\"held\") @approval(\"ops\") permit (principal, action, resource);",
		}, true},
		{"plain permits and forbids", map[string]string{"policy.default.cedar": "permit (principal, action, resource);\nforbid (principal, action, resource) when { context.args has x };"}, false},
		{"an Approve permit without any @approval rule", map[string]string{"policy.default.cedar": "permit (principal, action == Action::\"Approve\", resource);"}, false},
		{"no policies", map[string]string{"policy.default.cedar": ""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustLoad(t, policyDir(t, tt.files)).HasApprovalRules(); got != tt.want {
				t.Fatalf("HasApprovalRules() = %v, want %v", got, tt.want)
			}
		})
	}
	if !mustLoad(t, approvalDir).HasApprovalRules() {
		t.Error("the approval test folder has @approval rules, HasApprovalRules says none")
	}
}
