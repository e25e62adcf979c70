package policy

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRequestSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    RequestSpec
		want    Request
		wantErr string
	}{
		{"workspace tool gets the workspace driver and RunTool",
			RequestSpec{Caller: "alice", Tool: "workspace.readFile"},
			Request{Caller: "alice", Action: ActionRunTool, ToolID: "workspace.readFile", Driver: "workspace", RequestID: "dry-run", Args: map[string]any{}}, ""},
		{"a parent request makes a nested CallTool",
			RequestSpec{Caller: "alice", Tool: "workspace.readFile", Ctx: SpecContext{ParentRequestID: "outer"}},
			Request{Caller: "alice", Action: ActionCallTool, ToolID: "workspace.readFile", Driver: "workspace", RequestID: "dry-run", ParentRequestID: "outer", Args: map[string]any{}}, ""},
		{"every field is carried over",
			RequestSpec{Caller: "bot", Tool: "tpmjs.hello", Driver: "tpmjs", Action: ActionRunTool, Args: map[string]any{"n": json.Number("1")},
				Ctx:            SpecContext{RequestID: "r1", RunID: "run", StepID: "step", PolicyRef: "strict"},
				ToolAttributes: &SpecToolAttributes{Package: "@tpmjs/hello", Export: "hello", Version: "1.0.0", Tags: []string{"demo"}}},
			Request{Caller: "bot", Action: ActionRunTool, ToolID: "tpmjs.hello", Driver: "tpmjs", RequestID: "r1", RunID: "run", StepID: "step", PolicyRef: "strict",
				Args: map[string]any{"n": json.Number("1")}, Tool: ToolAttributes{Package: "@tpmjs/hello", Export: "hello", Version: "1.0.0", Tags: []string{"demo"}}}, ""},
		{"a session becomes the history, caller labels merged into labels",
			RequestSpec{Caller: "alice", Tool: "workspace.readFile", Session: &SpecSession{Calls: 4, ToolCalls: 2, Labels: []string{"sensitive"},
				CallerLabels: []string{"flagged", "sensitive"}, CallsLastMinute: 9, ToolCallsLastMinute: 3}},
			Request{Caller: "alice", Action: ActionRunTool, ToolID: "workspace.readFile", Driver: "workspace", RequestID: "dry-run", Args: map[string]any{},
				History: History{Calls: 4, ToolCalls: 2, Labels: []string{"flagged", "sensitive"}, CallsLastMinute: 9, ToolCallsLastMinute: 3}}, ""},
		{"a negative count", RequestSpec{Caller: "alice", Tool: "workspace.readFile", Session: &SpecSession{Calls: -1}}, Request{}, "must not be negative"},
		{"more tool calls than calls", RequestSpec{Caller: "alice", Tool: "workspace.readFile", Session: &SpecSession{Calls: 1, ToolCalls: 2}},
			Request{}, "toolCalls 2 is more than calls 1"},
		{"more tool calls than calls in the last minute",
			RequestSpec{Caller: "alice", Tool: "workspace.readFile", Session: &SpecSession{ToolCallsLastMinute: 1}},
			Request{}, "toolCallsLastMinute 1 is more than callsLastMinute 0"},
		{"a label the policy language refuses", RequestSpec{Caller: "alice", Tool: "workspace.readFile", Session: &SpecSession{Labels: []string{"a b"}}},
			Request{}, `label "a b"`},
		{"no caller", RequestSpec{Tool: "workspace.readFile"}, Request{}, "caller is required"},
		{"no tool", RequestSpec{Caller: "alice"}, Request{}, "tool is required"},
		{"no driver for another driver's tool", RequestSpec{Caller: "alice", Tool: "tpmjs.hello"}, Request{}, `driver is required for tool "tpmjs.hello"`},
		{"a lookalike prefix is not the workspace", RequestSpec{Caller: "alice", Tool: "workspaces.x"}, Request{}, "driver is required"},
		{"unknown action", RequestSpec{Caller: "alice", Tool: "workspace.readFile", Action: "Delete"}, Request{}, `action "Delete" must be`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.In(testCatalog).Request()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Request() error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Request() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestShippedPolicyTests runs the test file shipped beside the example
// policy, as `toolgate policy test policies` does.
func TestShippedPolicyTests(t *testing.T) {
	t.Parallel()
	rep, err := RunTests(context.Background(), shippedDir, testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() != 0 || rep.Passed() < 7 {
		t.Fatalf("%d passed, %d failed: %+v", rep.Passed(), rep.Failed(), rep.Results)
	}
	rules := make(map[string]bool)
	for _, r := range rep.Results {
		rules[r.Got.RuleID] = true
	}
	for _, want := range []string{"workspace_read_only", RuleDefaultDeny, RuleUnknownPolicyRef} {
		if !rules[want] {
			t.Errorf("no shipped test exercises rule %s", want)
		}
	}
}

const allowReads = `@id("read") @reason("reads are harmless")
permit (principal, action, resource == Tool::"workspace.readFile");
`

func TestRunTestsReportsMismatches(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{
		DefaultRef + ".cedar": allowReads,
		"b.test.json": `{"tests": [
			{"name": "read passes", "request": {"caller": "a", "tool": "workspace.readFile"}, "expect": {"decision": "allow", "rule_id": "read"}},
			{"name": "shell wrongly expected", "request": {"caller": "a", "tool": "workspace.shell"}, "expect": {"decision": "allow"}},
			{"name": "wrong rule", "request": {"caller": "a", "tool": "workspace.readFile"}, "expect": {"decision": "allow", "rule_id": "other"}}
		]}`,
		"a.test.json": `{"tests": [{"name": "deny without rule", "request": {"caller": "a", "tool": "x.y", "driver": "x"}, "expect": {"decision": "deny"}}]}`,
	})
	rep, err := RunTests(context.Background(), dir, testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed() != 2 || rep.Failed() != 2 {
		t.Fatalf("%d passed, %d failed, want 2 and 2", rep.Passed(), rep.Failed())
	}
	var names []string
	for _, r := range rep.Results {
		names = append(names, filepath.Base(r.File)+"/"+r.Case.Name)
	}
	wantOrder := []string{"a.test.json/deny without rule", "b.test.json/read passes", "b.test.json/shell wrongly expected", "b.test.json/wrong rule"}
	if !reflect.DeepEqual(names, wantOrder) {
		t.Errorf("results in order %q, want %q", names, wantOrder)
	}
	wantMismatch := map[string]string{
		"shell wrongly expected": `decision: want allow, got deny (rule_id default_deny: no permit policy in policy.default.cedar matched caller "a" calling tool "workspace.shell")`,
		"wrong rule":             "rule_id: want other, got read (rule_id read: reads are harmless)",
	}
	for _, r := range rep.Results {
		want, failing := wantMismatch[r.Case.Name]
		if r.Passed() == failing {
			t.Errorf("%s: passed %v, mismatches %q", r.Case.Name, r.Passed(), r.Mismatches)
			continue
		}
		if failing && (len(r.Mismatches) != 1 || r.Mismatches[0] != want) {
			t.Errorf("%s: mismatches %q, want [%q]", r.Case.Name, r.Mismatches, want)
		}
	}
}

func TestRunTestsErrors(t *testing.T) {
	t.Parallel()
	okTest := `{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.readFile"}, "expect": {"decision": "allow"}}]}`
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"no test files", map[string]string{DefaultRef + ".cedar": allowReads}, []string{"no .test.json files"}},
		{"policies do not load", map[string]string{DefaultRef + ".cedar": "permit (principal action resource);", "p.test.json": okTest},
			[]string{"policy.default.cedar:1:"}},
		{"unknown top-level field", map[string]string{"p.test.json": `{"tests": [], "extra": 1}`}, []string{"p.test.json", `unknown field "extra"`}},
		{"unknown field in a case", map[string]string{"p.test.json": `{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.x", "colour": 1}, "expect": {"decision": "allow"}}]}`},
			[]string{"tests[0]", `unknown field "colour"`}},
		{"unknown field in expect", map[string]string{"p.test.json": `{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.x"}, "expect": {"decision": "allow", "reason": "x"}}]}`},
			[]string{`unknown field "reason"`}},
		{"syntax error has a position", map[string]string{"p.test.json": "{\"tests\": [\n  {\"name\": \"n\",,}\n]}"}, []string{"p.test.json:2:16: invalid character"}},
		{"trailing data", map[string]string{"p.test.json": okTest + " {}"}, []string{"p.test.json:1:" + strconv.Itoa(len(okTest)+2) + ": unexpected data after the JSON value"}},
		{"no tests", map[string]string{"p.test.json": `{"tests": []}`}, []string{`"tests" holds no test`}},
		{"every problem of a file is reported", map[string]string{"p.test.json": `{"tests": [
			{"request": {"caller": "a", "tool": "workspace.x"}, "expect": {"decision": "allow"}},
			{"name": "d", "request": {"caller": "a", "tool": "workspace.x"}, "expect": {"decision": "permit"}},
			{"name": "d", "request": {"caller": "a", "tool": "other.x"}, "expect": {"decision": "deny"}}
		]}`}, []string{"tests[0]: name is required", `tests[1] "d": expect.decision "permit" must be "allow", "deny" or "approval_required"`,
			`tests[2] "d": name is already used`, `tests[2] "d": request: driver is required`}},
		{"every broken file is reported", map[string]string{"a.test.json": "[", "b.test.json": "{}", "c.test.json": okTest},
			[]string{"a.test.json:1:2: unexpected end of JSON input", `b.test.json: "tests" holds no test`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := tt.files[DefaultRef+".cedar"]; !ok {
				tt.files[DefaultRef+".cedar"] = allowReads
			}
			_, err := RunTests(context.Background(), policyDir(t, tt.files), testCatalog)
			if err == nil {
				t.Fatal("RunTests succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestRunTestsNoTestsIsErrNoTests(t *testing.T) {
	t.Parallel()
	_, err := RunTests(context.Background(), policyDir(t, map[string]string{DefaultRef + ".cedar": allowReads}), testCatalog)
	if !errors.Is(err, ErrNoTests) {
		t.Fatalf("RunTests = %v, want ErrNoTests", err)
	}
}

// FuzzParseTestFile checks that any test file either fails to parse or
// yields cases that satisfy the documented rules and run without failing
// to produce a decision.
func FuzzParseTestFile(f *testing.F) {
	f.Add([]byte(`{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.readFile", "args": {"n": 1e3}}, "expect": {"decision": "allow", "rule_id": "workspace_read_only"}}]}`))
	f.Add([]byte(`{"tests": [{"name": "n", "request": {"caller": "a", "tool": "t.x", "driver": "t", "tool_attributes": {"tags": ["a"]}, "ctx": {"parent_request_id": "p"}}, "expect": {"decision": "deny"}}]}`))
	f.Add([]byte(`{"tests": [{"name": "n"}], "x": 1}`))
	f.Add([]byte(`{"tests": null}`))
	f.Add([]byte(`{"tests": [{"name": "n", "request": {"caller": "a", "tool": "workspace.shell"}, "expect": {"decision": "approval_required", "approvers": "ops"}}]}`))
	f.Add([]byte(`{"tests": [{"name": "n", "request": {"caller": "b", "groups": ["ops"], "action": "Approve", "approval": {"requester": "a", "group": "ops"}, "tool": "workspace.shell"}, "expect": {"decision": "deny", "rule_id": "default_deny"}}]}`))
	f.Add([]byte(`{"tests": [{"name": "n", "request": {"caller": "b", "action": "Approve", "approval": {"requester": "a", "group": "Ops"}, "tool": "workspace.shell"}, "expect": {"decision": "approval_required"}}]}`))
	e := mustLoad(f, shippedDir)
	f.Fuzz(func(t *testing.T, src []byte) {
		cases, err := ParseTestFile("f.test.json", src, testCatalog)
		if err != nil {
			if len(cases) != 0 {
				t.Fatalf("ParseTestFile returned %d cases with error %v", len(cases), err)
			}
			return
		}
		if len(cases) == 0 {
			t.Fatal("ParseTestFile accepted a file without tests")
		}
		seen := make(map[string]bool)
		for _, tc := range cases {
			if tc.Name == "" || seen[tc.Name] {
				t.Fatalf("accepted an empty or duplicate name %q", tc.Name)
			}
			seen[tc.Name] = true
			switch d := tc.Expect.Decision; {
			case d == WordApprovalRequired && tc.Request.IsApproval():
				t.Fatalf("accepted decision %q for an approver", d)
			case d != WordAllow && d != WordDeny && d != WordApprovalRequired:
				t.Fatalf("accepted decision %q", d)
			}
			if err := checkSpec(tc.Request); err != nil {
				t.Fatalf("accepted a case whose request is invalid: %v", err)
			}
			res := runCase(context.Background(), e, "f.test.json", tc)
			if res.Got.RuleID == "" {
				t.Fatalf("case %q got no rule id", tc.Name)
			}
			wantPass := res.Got.Word() == tc.Expect.Decision && (tc.Expect.RuleID == "" || tc.Expect.RuleID == res.Got.RuleID) &&
				(tc.Expect.Approvers == "" || tc.Expect.Approvers == res.Got.Approvers)
			if res.Passed() != wantPass {
				t.Fatalf("case %q: passed %v, want %v (%q)", tc.Name, res.Passed(), wantPass, res.Mismatches)
			}
			if res.Got.Allow && (res.Got.ApprovalRequired || res.Got.RuleID == RuleDefaultDeny) {
				t.Fatalf("case %q: allowed with %+v", tc.Name, res.Got)
			}
		}
	})
}

// publishedBy stands in for a gateway's catalog: the tools
// "<driver>.<target>" the named drivers publish.
type publishedBy []string

func (p publishedBy) DriverOf(id string) (string, bool) {
	driver, _, ok := strings.Cut(id, ".")
	return driver, ok && slices.Contains(p, driver)
}

// testCatalog is the default configuration's: its workspace driver
// publishes every "workspace.<operation>".
var testCatalog Catalog = publishedBy{"workspace"}
