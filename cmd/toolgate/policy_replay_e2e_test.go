package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/replay"
)

// replayRecorded is the policy the recorded traffic was decided by: reads
// (two per session, none of secret/ for dev), creations held for ops'
// approval unless ops make them, sandboxed code whose guest may read.
const replayRecorded = `@id("read") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
@id("two-reads") @reason("at most two reads per session")
forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile") when { context.session.toolCalls >= 2 };
@id("no-secret-for-dev")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secret/*" && principal.groups.contains("dev") };
@id("ops-create") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile") when { principal.groups.contains("ops") };
@id("create-needs-ops") @approval("ops") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile");
@id("ops-approve") permit (principal, action == Action::"Approve", resource == Tool::"workspace.createFile") when { principal.groups.contains(context.group) };
@id("run-code") permit (principal, action == Action::"RunTool", resource == Tool::"code.run");
@id("guest-reads") permit (principal, action == Action::"CallTool", resource == Tool::"workspace.readFile") when { context has parentRequestId };
`

// replayTighter forbids reading hello.txt (with a reason a terminal would
// act on) and creating files holding a token (which reads the redacted
// argument), and holds code for approval.
var replayTighter = strings.Replace(replayRecorded, `@id("run-code") permit`, `@id("run-code") @approval("ops") permit`, 1) + `
@id("no-hello") @reason("hello \u{1b}[31m\u{202e}txt")
forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile") when { context.args has path && context.args.path == "hello.txt" };
@id("no-tokens") forbid (principal, action, resource == Tool::"workspace.createFile") when { context.args has content && context.args.content like "*ghp_*" };
`

// replayLooser drops both forbids and lets anyone create files at once.
const replayLooser = `@id("read") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
@id("create-all") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile");
@id("ops-approve") permit (principal, action == Action::"Approve", resource == Tool::"workspace.createFile") when { principal.groups.contains(context.group) };
@id("run-code") permit (principal, action == Action::"RunTool", resource == Tool::"code.run");
@id("guest-reads") permit (principal, action == Action::"CallTool", resource == Tool::"workspace.readFile") when { context has parentRequestId };
`

// replayReport is the part of `policy replay --json` the tests read.
type replayReport struct {
	Replayed      int `json:"replayed"`
	Unchanged     int `json:"unchanged"`
	Flipped       int `json:"flipped"`
	Unverified    int `json:"unverified"`
	NoShadow      int `json:"no_shadow"`
	NotReplayable []struct {
		RequestID string `json:"request_id"`
		Why       string `json:"why"`
	} `json:"not_replayable"`
	Flips []struct {
		RequestID string `json:"request_id"`
		From      string `json:"from"`
		To        string `json:"to"`
		RuleID    string `json:"rule_id"`
		Caller    string `json:"caller"`
		ToolID    string `json:"tool_id"`
	} `json:"flips"`
	Kinds map[string]struct {
		Count int `json:"count"`
		Rules map[string]struct {
			Count int `json:"count"`
		} `json:"rules"`
	} `json:"kinds"`
}

// flipLines renders r's flips as sorted "id from>to rule caller tool"
// lines, and its kinds as "kind rule count" lines.
func (r replayReport) flipLines() (flips, kinds []string) {
	for _, f := range r.Flips {
		flips = append(flips, strings.Join([]string{f.RequestID, f.From + ">" + f.To, f.RuleID, f.Caller, f.ToolID}, " "))
	}
	for k, kc := range r.Kinds {
		sum := 0
		for rule, rc := range kc.Rules {
			kinds = append(kinds, k+" "+rule+" "+strconv.Itoa(rc.Count))
			sum += rc.Count
		}
		if sum != kc.Count {
			kinds = append(kinds, k+" counts "+strconv.Itoa(kc.Count)+" but its rules "+strconv.Itoa(sum))
		}
	}
	slices.Sort(flips)
	slices.Sort(kinds)
	return flips, kinds
}

// recordReplayTraffic runs real traffic through the binary: allows,
// denies by argument, by group and by session history, a call held for
// approval, approved and run, a call whose argument the redactor removed,
// and sandboxed code making a nested call. It returns the deployment's
// folder, whose audit/ holds the evidence.
func recordReplayTraffic(t *testing.T) *approvalDeployment {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, replayRecorded)
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.candidate.cedar"), []byte(replayLooser), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"ws/hello.txt": "hello\n", "ws/secret/k": "s3cr3t\n", "ws/notes.txt": "notes\n"})
	runner := execboxtest.NewWS(t, execboxtest.Script{
		execboxtest.Started(),
		execboxtest.CallTool("c1", "workspace", "readFile", map[string]any{"path": "notes.txt"}),
		execboxtest.AwaitResult("c1"),
		execboxtest.DoneFromResult("c1"),
	})
	cfg := `auth:
  keys:
    - {caller: alice, env: KEY_ALICE, groups: [dev]}
    - {caller: bob, env: KEY_BOB, groups: [ops]}
evidence: {url: file://./audit, spool_dir: none}
policies: {dir: policies, shadow: {policy.default: policy.candidate}}
drivers:
  workspace: {type: workspace, root: ./ws}
  sandbox: {type: execbox, url: "` + runner.URL + `"}
tools:
  code.run: {driver: sandbox, description: Run code}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KEY_ALICE=k-alice-0123456789", "KEY_BOB=k-bob-0123456789"}
	d := &approvalDeployment{dir: dir, srv: startServerEnv(t, dir, env, "--config", "toolgate.yaml"), env: env}
	call := func(caller, id, run, tool, args string, want int) string {
		t.Helper()
		out, stderr, code := d.as(t, caller, "call", "--request-id", id, "--run-id", run, "--tool", tool, "--args", args)
		if code != want {
			t.Fatalf("%s %s as %s: exit %d, want %d\n%s%s", id, tool, caller, code, want, out, stderr)
		}
		return out
	}
	call("alice", "r-read-1", "run-1", "workspace.readFile", `{"path":"hello.txt"}`, exitOK)
	call("alice", "r-read-2", "run-1", "workspace.readFile", `{"path":"hello.txt"}`, exitOK)
	call("alice", "r-read-3", "run-1", "workspace.readFile", `{"path":"hello.txt"}`, exitFailure)
	call("alice", "r-secret", "run-2", "workspace.readFile", `{"path":"secret/k"}`, exitFailure)
	call("bob", "r-secret-ops", "run-3", "workspace.readFile", `{"path":"secret/k"}`, exitOK)
	call("bob", "r-token", "run-4", "workspace.createFile",
		`{"path":"b.txt","content":"token=ghp_R8xk2Lq9ZtV4mW7nB1cJ5hD3fG6sA0pE2yU8"}`, exitOK)
	var pending struct {
		PendingApproval struct {
			ApprovalID string `json:"approval_id"`
		} `json:"pending_approval"`
	}
	json.Unmarshal([]byte(call("alice", "r-create", "run-5", "workspace.createFile", `{"path":"a.txt","content":"hello"}`, exitPending)), &pending)
	if out, stderr, code := d.as(t, "bob", "approvals", "approve", pending.PendingApproval.ApprovalID, "--reason", "fine"); code != exitOK {
		t.Fatalf("approve: exit %d\n%s%s", code, out, stderr)
	}
	call("alice", "r-create", "run-5", "workspace.createFile", `{"path":"a.txt","content":"hello"}`, exitOK)
	call("alice", "r-code", "run-6", "code.run", `{"code":"await workspace.readFile({path: 'notes.txt'})"}`, exitOK)
	return d
}

// writePolicyDir writes text as the default set of a new policy folder.
func writePolicyDir(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPolicyReplayEndToEnd replays real recorded traffic against a
// candidate that leaves the policy as it is (with and without the
// recorded set as baseline, which must reach every recorded decision), one
// that tightens it and one that loosens it, and checks every count and
// flip; the shadow report of the live shadow set, the same as the looser
// candidate, must agree with the replay.
func TestPolicyReplayEndToEnd(t *testing.T) {
	t.Parallel()
	d := recordReplayTraffic(t)
	audit := "file://" + filepath.Join(d.dir, "audit")
	same := writePolicyDir(t, replayRecorded)
	nested := nestedFolders(t, d.dir, "r-code")
	if len(nested) != 1 {
		t.Fatalf("nested calls of r-code: %v, want one", nested)
	}

	tests := []struct {
		name      string
		args      []string
		shadow    bool
		replayed  int
		unchanged int
		notRepl   []string
		flips     []string
		kinds     []string
		failOn    string
		wantExit  int
	}{
		{name: "the recorded policy, against the decisions on record", args: []string{"--candidate", same},
			replayed: 9, unchanged: 9, failOn: "deny-to-allow,allow-to-deny", wantExit: exitOK},
		{name: "the recorded policy as baseline reaches every recorded decision", args: []string{"--candidate", same, "--baseline", same},
			replayed: 9, unchanged: 9, failOn: "not-replayable", wantExit: exitOK},
		{name: "a tighter candidate", args: []string{"--candidate", writePolicyDir(t, replayTighter)},
			replayed: 8, unchanged: 5, notRepl: []string{"r-token"},
			flips: []string{
				"r-code allow>approval_required run-code alice code.run",
				"r-read-1 allow>deny no-hello alice workspace.readFile",
				"r-read-2 allow>deny no-hello alice workspace.readFile",
			},
			kinds:  []string{"allow-to-approval-required run-code 1", "allow-to-deny no-hello 2"},
			failOn: "deny-to-allow,allow-to-deny", wantExit: exitFailure},
		{name: "a looser candidate", args: []string{"--candidate", writePolicyDir(t, replayLooser)},
			replayed: 9, unchanged: 6,
			flips: []string{
				"r-create approval_required>allow create-all alice workspace.createFile",
				"r-read-3 deny>allow read alice workspace.readFile",
				"r-secret deny>allow read alice workspace.readFile",
			},
			kinds:  []string{"approval-required-to-allow create-all 1", "deny-to-allow read 2"},
			failOn: "deny-to-allow", wantExit: exitFailure},
		{name: "a looser candidate, only alice's reads", args: []string{"--candidate", writePolicyDir(t, replayLooser),
			"--caller", "alice", "--tool", "workspace.readFile"},
			replayed: 5, unchanged: 3,
			flips: []string{
				"r-read-3 deny>allow read alice workspace.readFile",
				"r-secret deny>allow read alice workspace.readFile",
			},
			kinds:  []string{"deny-to-allow read 2"},
			failOn: "allow-to-deny", wantExit: exitOK},
		{name: "the live shadow set agrees with replaying it", shadow: true,
			replayed: 9, unchanged: 6,
			flips: []string{
				"r-create approval_required>allow create-all alice workspace.createFile",
				"r-read-3 deny>allow read alice workspace.readFile",
				"r-secret deny>allow read alice workspace.readFile",
			},
			kinds:  []string{"approval-required-to-allow create-all 1", "deny-to-allow read 2"},
			failOn: "deny-to-allow", wantExit: exitFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"policy", "replay"}
			if tc.shadow {
				args = []string{"policy", "shadow-report"}
			}
			args = append(args, "--evidence", audit)
			args = append(args, tc.args...)
			out, stderr, code := runToolEnv(t, d.dir, nil, append(args, "--json")...)
			if code != exitOK {
				t.Fatalf("%v --json: exit %d\n%s%s", args, code, out, stderr)
			}
			var rep replayReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("--json output: %v\n%s", err, out)
			}
			flips, kinds := rep.flipLines()
			var notRepl []string
			for _, s := range rep.NotReplayable {
				notRepl = append(notRepl, s.RequestID)
			}
			if rep.Replayed != tc.replayed || rep.Unchanged != tc.unchanged || rep.Flipped != len(tc.flips) || rep.Unverified != 0 || rep.NoShadow != 0 ||
				!slices.Equal(flips, tc.flips) || !slices.Equal(kinds, tc.kinds) || !slices.Equal(notRepl, tc.notRepl) {
				t.Errorf("replayed %d, unchanged %d, flipped %d, unverified %d\nflips %q\nkinds %q\nnot replayable %+v\nwant replayed %d, unchanged %d\nflips %q\nkinds %q\nnot replayable %q",
					rep.Replayed, rep.Unchanged, rep.Flipped, rep.Unverified, flips, kinds, rep.NotReplayable,
					tc.replayed, tc.unchanged, tc.flips, tc.kinds, tc.notRepl)
			}
			for _, s := range rep.NotReplayable {
				if s.RequestID == "r-token" && !strings.Contains(s.Why, `argument "content" was redacted`) {
					t.Errorf("r-token is not replayable for %q, want the redacted argument named", s.Why)
				}
			}
			if tc.failOn == "" {
				return
			}
			text, stderr, code := runToolEnv(t, d.dir, nil, append(args, "--fail-on", tc.failOn)...)
			if code != tc.wantExit {
				t.Errorf("--fail-on %s: exit %d, want %d\n%s%s", tc.failOn, code, tc.wantExit, text, stderr)
			}
			if strings.ContainsAny(text, "\x1b\u202e") || strings.ContainsAny(out, "\x1b\u202e") {
				t.Errorf("a rule's reason reached the terminal raw:\n%q\n%q", text, out)
			}
			for _, f := range flips {
				if id, _, _ := strings.Cut(f, " "); !strings.Contains(text, id) {
					t.Errorf("the text report does not name flipped request %s:\n%s", id, text)
				}
			}
		})
	}
}

// TestPolicyReplayTamperedRequest: a recorded decision rewritten after the
// fact fails verification; replay reports it and decides nothing on it.
func TestPolicyReplayTamperedRequest(t *testing.T) {
	t.Parallel()
	d := recordReplayTraffic(t)
	key := filepath.Join(d.dir, "audit", "requests", "r-secret", "policy_decision.json")
	data, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Replace(data, []byte(`"decision": "deny"`), []byte(`"decision": "allow"`), 1)
	if bytes.Equal(forged, data) {
		t.Fatalf("no decision to forge in\n%s", data)
	}
	if err := os.WriteFile(key, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runToolEnv(t, d.dir, nil, "policy", "replay", "--evidence", "file://"+filepath.Join(d.dir, "audit"),
		"--candidate", writePolicyDir(t, replayLooser), "--json", "--fail-on", "unverified")
	if code != exitFailure {
		t.Fatalf("exit %d, want 1 (--fail-on unverified)\n%s%s", code, out, stderr)
	}
	var rep replayReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	flips, _ := rep.flipLines()
	if rep.Unverified != 1 || rep.Replayed != 8 || len(rep.NotReplayable) != 1 || rep.NotReplayable[0].RequestID != "r-secret" ||
		!strings.Contains(rep.NotReplayable[0].Why, "evidence fails verification (mismatch)") ||
		strings.Contains(strings.Join(flips, "\n"), "r-secret") {
		t.Errorf("replayed %d, unverified %d, not replayable %+v, flips %q: want r-secret reported as failing verification and not replayed",
			rep.Replayed, rep.Unverified, rep.NotReplayable, flips)
	}
}

// TestReplayKnowsTheGatewaysOwnRules: replay refuses to decide again what
// the gateway, not a policy set, decided; it must know every such rule.
func TestReplayKnowsTheGatewaysOwnRules(t *testing.T) {
	t.Parallel()
	for _, rule := range []string{gateway.RuleUnknownTool, gateway.RuleApprovalStale, policy.RulePolicyRefNotSelectable, policy.RuleHistoryError} {
		if !replay.GatewayRule(rule) {
			t.Errorf("replay would decide a call the gateway denied by %s again", rule)
		}
	}
	for _, rule := range []string{policy.RuleDefaultDeny, policy.RulePolicyError, policy.RuleUnknownPolicyRef} {
		if replay.GatewayRule(rule) {
			t.Errorf("replay takes %s, a policy set's decision, for the gateway's", rule)
		}
	}
}
