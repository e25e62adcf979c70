package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

func TestParseCall(t *testing.T) {
	t.Parallel()
	base := recorded{id: "r1", caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read", groups: []string{"dev"}}
	tests := []struct {
		name string
		// edit changes the records before they are encoded; raw, when
		// set, replaces the encoded decision.
		edit       func(*evidence.RequestRecord, *evidence.DecisionRecord)
		raw        string
		redactions []evidence.Redaction
		wantFrom   string
		wantWhy    string
	}{
		{name: "an allow", wantFrom: "allow"},
		{name: "a call held for approval", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Decision = "approval_required"
			d.Approval = &evidence.DecisionApproval{ApprovalID: "a", Outcome: evidence.ApprovalPending}
		}, wantFrom: "approval_required"},
		{name: "an approved call is the policy's approval_required", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Approval = &evidence.DecisionApproval{ApprovalID: "a", Outcome: evidence.ApprovalApprove}
		}, wantFrom: "approval_required"},
		{name: "an approval's expiry is the policy's approval_required", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Decision = "deny"
			d.Approval = &evidence.DecisionApproval{ApprovalID: "a", Outcome: evidence.ApprovalExpired}
		}, wantFrom: "approval_required"},
		{name: "approved under another set: the set's word is not on record", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Approval = &evidence.DecisionApproval{ApprovalID: "a", Outcome: evidence.ApprovalApprove, PolicySetChanged: true}
		}, wantWhy: "under another policy set"},
		{name: "a deny the gateway made", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Decision, d.RuleID = "deny", "policy_ref_not_selectable"
		}, wantWhy: "decided by the gateway"},
		{name: "an unknown decision word", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Decision = "maybe"
		}, wantWhy: "is none of allow"},
		{name: "records of two requests", edit: func(r *evidence.RequestRecord, _ *evidence.DecisionRecord) {
			r.RequestID = "r2"
		}, wantWhy: "names request"},
		{name: "records of two callers", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Caller = "mallory"
		}, wantWhy: "disagree"},
		{name: "an approver's decision is no tool call", edit: func(_ *evidence.RequestRecord, d *evidence.DecisionRecord) {
			d.Action = "Approve"
		}, wantWhy: "not a tool call"},
		{name: "arguments that are not an object", edit: func(r *evidence.RequestRecord, _ *evidence.DecisionRecord) {
			r.Args = json.RawMessage(`[1,2]`)
		}, wantWhy: "args"},
		{name: "a field given twice", raw: `{"request_id":"r1","caller":"alice","caller":"bob"}`, wantWhy: "unreadable"},
		{name: "a field no gateway writes", raw: `{"request_id":"r1","verdict":"allow"}`, wantWhy: "unreadable"},
		{name: "trailing data", raw: `{"request_id":"r1"} {"request_id":"r1"}`, wantWhy: "unreadable"},
		{name: "a redacted argument is noted, not refused", redactions: []evidence.Redaction{
			{Rule: "github-pat", Artifact: evidence.ArtifactRequest, Path: "$.args.token"}}, wantFrom: "allow"},
		{name: "a redaction in a field every decision reads", redactions: []evidence.Redaction{
			{Rule: "x", Artifact: evidence.ArtifactRequest, Path: "$.caller"}}, wantWhy: "outside the arguments"},
		{name: "redactions whose places are not listed", redactions: []evidence.Redaction{
			{Rule: "x", Artifact: evidence.ArtifactRequest, Omitted: 3}}, wantWhy: "does not list"},
		{name: "a redaction in the decision's reason", redactions: []evidence.Redaction{
			{Rule: "x", Artifact: evidence.ArtifactPolicyDecision, Path: "$.reason"}}, wantFrom: "allow"},
		{name: "a redaction in the caller's groups", redactions: []evidence.Redaction{
			{Rule: "x", Artifact: evidence.ArtifactPolicyDecision, Path: "$.principal.groups[0]"}}, wantWhy: "rebuilt from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, d := base.requestRecord(), base.decisionRecord()
			if tc.edit != nil {
				tc.edit(&req, &d)
			}
			decision := mustJSON(t, d)
			if tc.raw != "" {
				decision = []byte(tc.raw)
			}
			c, err := ParseCall("r1", mustJSON(t, req), decision, tc.redactions)
			var nr *NotReplayable
			switch {
			case tc.wantWhy != "" && (!errors.As(err, &nr) || !strings.Contains(nr.Why, tc.wantWhy)):
				t.Fatalf("ParseCall: %v, want not replayable for %q", err, tc.wantWhy)
			case tc.wantWhy == "" && err != nil:
				t.Fatalf("ParseCall: %v", err)
			case tc.wantWhy == "" && (c.From != tc.wantFrom || c.Request.Caller != "alice" || c.Request.Args["path"] != "hello.txt" ||
				c.Request.RunID != "run-1" || len(c.Request.CallerAttrs.Groups) != 1):
				t.Fatalf("call %+v, want from %s with the recorded request", c, tc.wantFrom)
			}
		})
	}
}

func TestTopKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rest, want string
		ok         bool
	}{
		{".token", "token", true},
		{".env.TOKEN", "env", true},
		{".items[3]", "items", true},
		{".data<json>.x", "data", true},
		{`["API TOKEN"]`, "API TOKEN", true},
		{`["a\"]b"].c`, `a"]b`, true},
		{`["unterminated`, "", false},
		{`["x"`, "", false},
		{"[0]", "", false},
		{"", "", false},
		{".", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.rest, func(t *testing.T) {
			t.Parallel()
			if got, ok := topKey(tc.rest); got != tc.want || ok != tc.ok {
				t.Errorf("topKey(%q) = %q, %v; want %q, %v", tc.rest, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestGapsMissing(t *testing.T) {
	t.Parallel()
	const readsToken = `permit (principal, action, resource) when { context.args.token == "x" };`
	tests := []struct {
		name string
		g    gaps
		text string
		want string
	}{
		{name: "a redacted argument no rule names", g: gaps{argKeys: []string{"content"}}, text: readsToken},
		{name: "a redacted argument a rule reads", g: gaps{argKeys: []string{"token"}}, text: readsToken, want: `argument "token"`},
		{name: "a redacted argument whose name cannot be told", g: gaps{anyArg: true}, text: readsToken, want: "reads context.args"},
		{name: "a redacted argument, a set that reads no argument", g: gaps{anyArg: true},
			text: `permit (principal, action, resource);`},
		{name: "an argument name Cedar would escape", g: gaps{argKeys: []string{"tok\u202een"}}, text: readsToken, want: "redacted"},
		{name: "no caller attributes, a set reading groups", g: gaps{noPrincipal: true},
			text: `permit (principal, action, resource) when { principal.groups.contains("ops") };`, want: "caller attributes"},
		{name: "no tool attributes, a set reading tags", g: gaps{noTool: true},
			text: `permit (principal, action, resource) when { resource.tags.contains("net") };`, want: "tool attributes"},
		{name: "no history, a set reading it", g: gaps{noHistory: true},
			text: `forbid (principal, action, resource) when { context.session.calls > 3 };`, want: "session history"},
		{name: "no history, a set that does not read it", g: gaps{noHistory: true, noTool: true, noPrincipal: true},
			text: `permit (principal, action, resource);`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.g.missing(tc.text)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("missing: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReplayStore(t *testing.T) {
	t.Parallel()
	s := evidence.NewMemoryStore()
	calls := []recorded{
		{id: "a1", caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read", groups: []string{"dev"}},
		{id: "a2", caller: "alice", tool: "workspace.readFile", decision: "deny", rule: "no-secret", groups: []string{"dev"},
			args: `{"path":"secret/k"}`},
		{id: "b1", caller: "bob", tool: "workspace.readFile", decision: "allow", rule: "read", groups: []string{"ops"},
			args:       `{"path":"hello.txt","token":"[REDACTED:github-pat]"}`,
			redactions: []evidence.Redaction{{Rule: "github-pat", Artifact: evidence.ArtifactRequest, Path: "$.args.token"}}},
		{id: "old", caller: "bob", tool: "workspace.readFile", decision: "allow", rule: "read", noAttrs: true},
	}
	for _, c := range calls {
		putRecorded(t, s, c)
	}
	tests := []struct {
		name      string
		candidate string
		baseline  string
		filter    Filter
		want      string
	}{
		{name: "unchanged", candidate: storeRecorded, want: "replayed 4 unchanged 4 flips [] skipped []"},
		{name: "unchanged, with the recorded set as baseline", candidate: storeRecorded, baseline: storeRecorded,
			want: "replayed 4 unchanged 4 flips [] skipped []"},
		{name: "tighter, reading the redacted token and the groups old records lack", candidate: storeRecorded +
			`@id("no-dev") forbid (principal, action, resource) when { principal.groups.contains("dev") };
@id("no-token") forbid (principal, action, resource) when { context.args has token };`,
			want: "replayed 2 unchanged 1 flips [a1 allow>deny no-dev] skipped [b1 old]"},
		{name: "looser", candidate: `@id("read") permit (principal, action, resource == Tool::"workspace.readFile");`,
			want: "replayed 4 unchanged 3 flips [a2 deny>allow read] skipped []"},
		{name: "looser, bob only", candidate: `@id("read") permit (principal, action, resource == Tool::"workspace.readFile");`,
			filter: Filter{Caller: "bob"}, want: "replayed 2 unchanged 2 flips [] skipped []"},
		{name: "received before --since", candidate: storeRecorded, filter: Filter{Since: recordedAt.Add(time.Second)},
			want: "replayed 0 unchanged 0 flips [] skipped []"},
		{name: "received at --since, before --until", candidate: storeRecorded,
			filter: Filter{Since: recordedAt, Until: recordedAt.Add(time.Second)}, want: "replayed 4 unchanged 4 flips [] skipped []"},
		{name: "received at --until", candidate: storeRecorded, filter: Filter{Until: recordedAt},
			want: "replayed 0 unchanged 0 flips [] skipped []"},
		{name: "another tool", candidate: storeRecorded, filter: Filter{Tool: "workspace.createFile"},
			want: "replayed 0 unchanged 0 flips [] skipped []"},
		{name: "a baseline that is not the recorded set decides the from side",
			candidate: storeRecorded, baseline: `@id("all") permit (principal, action, resource);`,
			want: "replayed 4 unchanged 3 flips [a2 allow>deny no-secret] skipped []"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &Replayer{Candidate: writePolicies(t, tc.candidate)}
			if tc.baseline != "" {
				r.Baseline = writePolicies(t, tc.baseline)
			}
			rep, err := Replay(context.Background(), s, evidence.VerifyOptions{}, tc.filter, r)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(rep); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// summary renders a report's counts, flips and skipped ids on one line.
func summary(r *Report) string {
	var flips, skipped []string
	for _, f := range r.Flips {
		flips = append(flips, f.RequestID+" "+f.From+">"+f.To+" "+f.RuleID)
	}
	for _, s := range r.NotReplayable {
		skipped = append(skipped, s.RequestID)
	}
	return "replayed " + itoa(r.Replayed) + " unchanged " + itoa(r.Unchanged) +
		" flips [" + strings.Join(flips, ", ") + "] skipped [" + strings.Join(skipped, " ") + "]"
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestReportHostileText: request ids, callers, tools and reasons come from
// callers and policy authors; neither report lets them act on a terminal.
func TestReportHostileText(t *testing.T) {
	t.Parallel()
	rep := NewReport()
	hostile := "x\x1b]0;pwned\x07\u202eevil\u009b31m"
	c := Call{RequestID: hostile, Caller: hostile, ToolID: hostile}
	rep.Add(c, Outcome{From: "deny", To: "allow", RuleID: hostile, Reason: hostile})
	rep.Skip(hostile, hostile)
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "json": js.String()} {
		if strings.ContainsAny(out, "\x1b\x07\u202e\u009b") {
			t.Errorf("the %s report carries a raw control:\n%q", name, out)
		}
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Flips[0].Caller != hostile {
		t.Errorf("the JSON report does not decode to the text it escaped: %v, %q", err, back.Flips)
	}
}

// TestReportBounded: a report counts every call but lists only so many.
func TestReportBounded(t *testing.T) {
	t.Parallel()
	rep := NewReport()
	const n = 3*MaxListed + 7
	for i := range n {
		c := Call{RequestID: itoa(i), Caller: "c", ToolID: "t"}
		rep.Add(c, Outcome{From: "allow", To: "deny", RuleID: "r"})
		rep.Add(c, Outcome{Why: "no"})
	}
	kc := rep.Kinds["allow-to-deny"]
	if rep.Flipped != n || len(rep.Flips) != MaxListed || rep.FlipsOmitted != n-MaxListed ||
		rep.NotReplayableCount != n || len(rep.NotReplayable) != MaxListed || rep.NotReplayableOmitted != n-MaxListed ||
		kc.Count != n || kc.Rules["r"].Count != n || len(kc.Rules["r"].Samples) != MaxSamples {
		t.Errorf("flipped %d (listed %d, omitted %d), not replayable %d (listed %d, omitted %d), kind %d, samples %d",
			rep.Flipped, len(rep.Flips), rep.FlipsOmitted, rep.NotReplayableCount, len(rep.NotReplayable), rep.NotReplayableOmitted,
			kc.Count, len(kc.Rules["r"].Samples))
	}
}
