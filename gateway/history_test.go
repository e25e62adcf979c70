package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// historyPolicies label secret reads, forbid writes to public/ after
// them, and cap reads at three per session.
const historyPolicies = `
@id("read-secrets") @label("sensitive")
permit (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secret/*" };

@id("workspace") permit (principal, action, resource in Driver::"workspace");

@id("no-public-after-sensitive") @reason("this session read sensitive data")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.session.labels.contains("sensitive") && context.args has path && context.args.path like "public/*" };

@id("three-reads") @reason("at most 3 reads per session")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.session.toolCalls >= 3 };
`

func (e *env) runIn(run, id, tool string, args map[string]any) *toolgatev1.RunToolResponse {
	e.t.Helper()
	resp, err := e.client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: tool, Args: mustStruct(e.t, args), Ctx: &toolgatev1.RunContext{RunId: run},
	})
	if err != nil {
		e.t.Fatalf("RunTool %s: %v", id, err)
	}
	return resp
}

func TestHistoryDecides(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": historyPolicies}})
	if err := os.MkdirAll(filepath.Join(e.workspace, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.workspace, "secret", "k"), []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		run, id, tool string
		args          map[string]any
		wantRule      string
		wantAllow     bool
	}{
		{"r1", "read-secret", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "write-after", "workspace.createFile", map[string]any{"path": "public/a", "content": "x"}, "no-public-after-sensitive", false},
		{"r2", "write-fresh-run", "workspace.createFile", map[string]any{"path": "public/a", "content": "x"}, "workspace", true},
		{"r1", "read-2", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "read-3", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "read-4", "workspace.readFile", map[string]any{"path": "secret/k"}, "three-reads", false},
	}
	for _, s := range steps {
		resp := e.runIn(s.run, s.id, s.tool, s.args)
		pc := resp.GetPolicyCheck()
		if (pc.GetDecision() == "allow") != s.wantAllow || pc.GetRuleId() != s.wantRule {
			t.Fatalf("%s: decision %s by %q (%s), want allow=%v by %q", s.id, pc.GetDecision(), pc.GetRuleId(), pc.GetReason(), s.wantAllow, s.wantRule)
		}
	}
	var rec evidence.DecisionRecord
	if err := json.Unmarshal(e.artifact("write-after", evidence.ArtifactPolicyDecision), &rec); err != nil {
		t.Fatal(err)
	}
	h := rec.History
	if h == nil || h.Slot != 1 || h.Calls != 1 || h.Claimed != 0 || strings.Join(h.Labels, ",") != "sensitive" {
		t.Errorf("the denied write's recorded history = %+v, want the facts at slot 1 with label sensitive", h)
	}
	if err := json.Unmarshal(e.artifact("read-3", evidence.ArtifactPolicyDecision), &rec); err != nil {
		t.Fatal(err)
	}
	if h := rec.History; h == nil || h.Claimed != 4 || h.ToolCalls != 2 || fmt.Sprint(h.LabelsAdded) != "[sensitive]" {
		t.Errorf("the third read's recorded history = %+v, want tool_calls 2, claimed slot 4, labels_added [sensitive]", h)
	}
	// The session records are not requests: verifying the whole store
	// reports the requests, each ok, and nothing else.
	var got []string
	err := evidence.VerifyAll(context.Background(), e.store, evidence.VerifyOptions{}, func(r evidence.VerifyReport) error {
		if r.Status != evidence.StatusOK {
			t.Errorf("verify --all: %s is %s %v", r.RequestID, r.Status, r.Problems)
		}
		got = append(got, r.RequestID)
		return nil
	})
	if want := []string{"read-2", "read-3", "read-4", "read-secret", "write-after", "write-fresh-run"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("verify --all reported %v (%v), want %v", got, err, want)
	}
}

// TestNoHistoryWithoutHistoryRules: policies that never read history
// leave nothing under sessions/.
func TestNoHistoryWithoutHistoryRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.mustCall("plain", "workspace.createFile", map[string]any{"path": "a", "content": "x"})
	keys, err := e.store.List(context.Background(), "sessions/")
	if err != nil || len(keys) != 0 {
		t.Fatalf("sessions/ holds %v (%v), want nothing", keys, err)
	}
}

// approvalHistoryPolicy holds counting.run for approval, labels the
// session of a call it lets run, and allows one such call per session.
const approvalHistoryPolicy = approvalPolicy + `
@id("one-count-per-session") @reason("one count per session")
forbid (principal, action == Action::"RunTool", resource == Tool::"counting.run")
when { context.session.toolCalls >= 1 };
`

// TestApprovedCallsClaimTheirHistory: a call let through by an approval
// claims its slot and adds its labels as an allowed one does, whether the
// approval is its own or borrowed under a new request id; and an approved
// call is judged on its history at its use, so one the session's limit
// caught up with while it waited is denied by that limit.
func TestApprovedCallsClaimTheirHistory(t *testing.T) {
	t.Parallel()
	labelled := strings.Replace(approvalHistoryPolicy, `@approval("ops")`, `@approval("ops") @label("counted")`, 1)
	tests := []struct {
		name string
		// retryID is the request id the approved call is sent again
		// under ("" for its own).
		retryID string
	}{
		{name: "own request id"},
		{name: "borrowed under a new request id", retryID: "retry-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{policy: labelled})
			apr := e.pendingID("alice", "held-1", map[string]any{"n": 1})
			other := e.pendingID("alice", "held-2", map[string]any{"n": 2})
			e.mustDecide("bob", apr, "approve", "ok")
			e.mustDecide("bob", other, "approve", "ok")
			id := cmp.Or(tt.retryID, "held-1")
			if ran := e.mustRun("alice", id, map[string]any{"n": 1}); !ran.GetOk() || e.driver.runs.Load() != 1 {
				t.Fatalf("the approved call: %v, %d runs", ran, e.driver.runs.Load())
			}
			var d evidence.DecisionRecord
			e.record(e.lastDecisionKey(id), &d)
			if h := d.History; h == nil || h.Claimed != 1 || fmt.Sprint(h.LabelsAdded) != "[counted]" {
				t.Fatalf("the approved call's history = %+v, want slot 1 claimed with label counted", h)
			}
			// The second approval was granted before the first call ran;
			// at its use the session has had its one count.
			resp := e.mustRun("alice", "held-2", map[string]any{"n": 2})
			if pc := resp.GetPolicyCheck(); resp.GetOk() || pc.GetRuleId() != "one-count-per-session" || e.driver.runs.Load() != 1 {
				t.Fatalf("the second approved call after the session's limit: %v, %d runs", resp, e.driver.runs.Load())
			}
		})
	}
}

// lastDecisionKey is the key of the newest attempt's policy_decision.json
// of request id.
func (e *approvalEnv) lastDecisionKey(id string) string {
	e.t.Helper()
	key := evidence.Key(id, evidence.ArtifactPolicyDecision)
	for n := 2; ; n++ {
		k := evidence.AttemptKey(id, n, evidence.ArtifactPolicyDecision)
		if _, err := e.store.Get(context.Background(), k); err != nil {
			return key
		}
		key = k
	}
}

// TestRateLimitDenyStands: a call over a rate limit is denied by the
// limit and does not run, though finding its retry hint decided it again
// on later facts, which allow it; the hint is in its reason.
func TestRateLimitDenyStands(t *testing.T) {
	t.Parallel()
	const rate = `
@id("workspace") permit (principal, action, resource in Driver::"workspace");

@id("two-creates-a-minute") @reason("at most 2 file creations a minute")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.caller.toolCallsLastMinute >= 2 };
`
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": rate}})
	for i, run := range []string{"r1", "r2"} {
		if resp := e.runIn(run, fmt.Sprintf("create-%d", i), "workspace.createFile", map[string]any{"path": run, "content": "x"}); !resp.GetOk() {
			t.Fatalf("create in %s: %v", run, resp)
		}
	}
	resp := e.runIn("r3", "create-over", "workspace.createFile", map[string]any{"path": "r3", "content": "x"})
	pc := resp.GetPolicyCheck()
	if resp.GetOk() || pc.GetRuleId() != "two-creates-a-minute" || !strings.Contains(pc.GetReason(), "(retry after ") {
		t.Fatalf("the third create in a minute: ok=%v %s by %q (%s), want a deny by two-creates-a-minute with a retry hint",
			resp.GetOk(), pc.GetDecision(), pc.GetRuleId(), pc.GetReason())
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "r3")); !os.IsNotExist(err) {
		t.Errorf("the denied create ran: r3 exists (%v)", err)
	}
	// The hint is also a field a client reads without parsing the reason,
	// in whole seconds, at most the window and its last second away; it is
	// stored in response.json and a replay gives it back.
	if ms := pc.GetRetryAfterMs(); ms <= 0 || ms > 61000 || ms%1000 != 0 {
		t.Errorf("policy_check.retry_after_ms = %d, want whole seconds in (0, 61s]", ms)
	}
	var stored evidence.ResponseRecord
	if err := json.Unmarshal(e.artifact("create-over", evidence.ArtifactResponse), &stored); err != nil {
		t.Fatal(err)
	}
	if stored.PolicyCheck.RetryAfterMS != pc.GetRetryAfterMs() {
		t.Errorf("response.json retry_after_ms = %d, want %d", stored.PolicyCheck.RetryAfterMS, pc.GetRetryAfterMs())
	}
	replay := e.runIn("r3", "create-over", "workspace.createFile", map[string]any{"path": "r3", "content": "x"})
	if !proto.Equal(replay, resp) {
		t.Errorf("the replay %v differs from the first answer %v", replay, resp)
	}
	for i, run := range []string{"r1", "r2"} {
		if ms := e.runIn(run, fmt.Sprintf("replay-%d", i), "workspace.readFile", map[string]any{"path": run}).GetPolicyCheck().GetRetryAfterMs(); ms != 0 {
			t.Errorf("an allowed call carries retry_after_ms %d", ms)
		}
	}
}
