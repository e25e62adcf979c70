package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// guestPolicy lets callers run sandboxed code whose guest may call
// free.run at once and gated.run once an ops member approved the call.
const guestPolicy = `
@id("run_code") permit (principal, action == Action::"RunTool", resource in Driver::"sandbox");

@id("guest_free") permit (principal, action == Action::"CallTool", resource == Tool::"free.run")
when { context has parentRequestId };

@id("guest_needs_ops") @approval("ops") @reason("counts irreversibly")
permit (principal, action == Action::"CallTool", resource == Tool::"gated.run")
when { context has parentRequestId };

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"gated.run")
when { principal.groups.contains(context.group) };
`

// guestEnv is a gateway on a loopback listener whose code.run is an
// execbox driver in front of a scripted runner, whose guest may call
// free.run and gated.run, two counting drivers.
type guestEnv struct {
	t         *testing.T
	live      *policy.Live
	policyDir string
	gw        *Gateway
	store     evidence.Store
	clock     *fakeClock
	client    toolgatev1.ToolGatewayClient
	runner    *execboxtest.Runner
	free      *countingDriver
	gated     *countingDriver
}

// newGuestEnv builds a guestEnv whose WebSocket runner plays script.
func newGuestEnv(t *testing.T, script execboxtest.Script) *guestEnv {
	t.Helper()
	return newGuestEnvWith(t, guestOptions{script: script})
}

// guestOptions are the options of newGuestEnvWith.
type guestOptions struct {
	script execboxtest.Script
	// stdio: the runner is a process speaking stdio, not a WebSocket
	// server.
	stdio bool
	// sandbox, when set, serves code.run instead of the execbox driver.
	sandbox drivers.Driver
	// wrap, when set, wraps the store.
	wrap func(evidence.Store) evidence.Store
	// signer, when set, is the gateway's signing key.
	signer *evidence.Signer
}

// newGuestEnvWith builds a guestEnv as o says.
func newGuestEnvWith(t *testing.T, o guestOptions) *guestEnv {
	t.Helper()
	sandbox, wrap := o.sandbox, o.wrap
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(guestPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := policy.NewLive(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := evidence.NewFileStore(filepath.Join(dir, "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &guestEnv{t: t, store: store, live: live, policyDir: dir, free: &countingDriver{}, gated: &countingDriver{},
		clock: &fakeClock{t: time.Now()}}
	if sandbox == nil {
		cfg := execbox.Config{Timeout: 10 * time.Second}
		if o.stdio {
			e.runner = execboxtest.NewStdio(t, o.script)
			cfg.Command = e.runner.Command
		} else {
			e.runner = execboxtest.NewWS(t, o.script)
			cfg.URL = e.runner.URL
		}
		if sandbox, err = execbox.New(cfg); err != nil {
			t.Fatal(err)
		}
	}
	auth, err := callerauth.New(approvalKeys, func(name string) string {
		return strings.ToLower(strings.TrimPrefix(name, "KEY_")) + "-key"
	})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		e.store = wrap(store)
	}
	e.gw, err = New(Options{
		Decider: live, Store: e.store, Redactor: red, Auth: auth, Signer: o.signer, Instance: "test-host", Now: e.clock.Now,
		Drivers: map[string]drivers.Driver{"sandbox": sandbox, "free": e.free, "gated": e.gated},
		Tools: map[string]Tool{"code.run": {Driver: "sandbox", Target: "run"},
			"free.run": {Driver: "free", Target: "run"}, "gated.run": {Driver: "gated", Target: "run"}},
		Approvals: ApprovalOptions{TTL: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.client = toolgatev1.NewToolGatewayClient(serve(t, e.gw))
	return e
}

// run calls code.run as alice.
func (e *guestEnv) run(id string) *toolgatev1.RunToolResponse {
	e.t.Helper()
	resp, err := e.client.RunTool(as("alice"), &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: "code.run", Args: mustStruct(e.t, map[string]any{"code": "return await gated.run({n: 1})"}),
	})
	if err != nil {
		e.t.Fatalf("RunTool %s: %v", id, err)
	}
	return resp
}

// decide decides approval id as bob, over the RPC.
func (e *guestEnv) decide(id, decision, reason string) {
	e.t.Helper()
	if _, err := e.client.DecideApproval(as("bob"), &toolgatev1.DecideApprovalRequest{
		ApprovalId: id, Decision: decision, Reason: reason,
	}); err != nil {
		e.t.Fatalf("DecideApproval %s %s: %v", decision, id, err)
	}
}

func (e *guestEnv) keys(id string) []string {
	e.t.Helper()
	keys, err := e.store.List(context.Background(), evidence.RequestPrefix(id))
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

func (e *guestEnv) has(id, name string) bool {
	e.t.Helper()
	return slices.Contains(e.keys(id), evidence.Key(id, name))
}

// toolCalls returns, for each runner session, the call ids the host
// answered, in order.
func (e *guestEnv) toolCalls() [][]string {
	var out [][]string
	for _, session := range e.runner.Sessions() {
		var ids []string
		for _, m := range session {
			if m.Type() == "tool_result" {
				ids = append(ids, m["callId"].(string))
			}
		}
		out = append(out, ids)
	}
	return out
}

// guestAnswer returns the error message the runner received for callID.
func (e *guestEnv) guestAnswer(callID string) string {
	for _, session := range e.runner.Sessions() {
		for _, m := range session {
			if m.Type() == "tool_result" && m["callId"] == callID {
				failed, _ := m["error"].(map[string]any)
				msg, _ := failed["message"].(string)
				return msg
			}
		}
	}
	return ""
}

// wantVerified checks a request's evidence with evidence.Verify.
func (e *guestEnv) wantVerified(id, status string) {
	e.t.Helper()
	rep, err := evidence.Verify(context.Background(), e.store, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if rep.Status != status {
		e.t.Errorf("verify %s: %s %v, want %s", id, rep.Status, rep.Problems, status)
	}
}

// wantPending checks that reply is a pending reply for a guest's call.
func wantPending(t *testing.T, reply *toolgatev1.RunToolResponse) *toolgatev1.PendingApproval {
	t.Helper()
	pa := reply.GetPendingApproval()
	if pa == nil || reply.GetOk() || reply.GetToolResult() != nil || reply.GetPolicyCheck().GetDecision() != "deny" ||
		evidence.ValidApprovalID(pa.GetApprovalId()) != nil || pa.GetRuleId() != "guest_needs_ops" || pa.GetApprovers() != "ops" {
		t.Fatalf("reply is not a pending approval of the guest's call that reads as not run: %v", reply)
	}
	return pa
}

// gatedScript is a guest that calls gated.run and returns its result.
var gatedScript = execboxtest.Script{
	execboxtest.FreshCallIDs(), execboxtest.Started(),
	execboxtest.CallTool("c1", "gated", "run", map[string]any{"n": 1}),
	execboxtest.DoneFromResult("c1"),
}

// TestGuestCallWaitsForApprovalThenRunsOnce: the guest's call that needs
// approval is answered at once; the parent is pending with the guest's
// approval; nothing ran. Once approved, the retried parent runs its guest
// again (the runner gives the call a new id) and the call runs once; a
// further retry replays.
func TestGuestCallWaitsForApprovalThenRunsOnce(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"ws", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			guestWaitsThenRunsOnce(t, newGuestEnvWith(t, guestOptions{script: gatedScript, stdio: transport == "stdio"}))
		})
	}
}

func guestWaitsThenRunsOnce(t *testing.T, e *guestEnv) {
	first := e.run("par-1")
	pa := wantPending(t, first)
	if e.gated.runs.Load() != 0 {
		t.Fatalf("the gated tool ran %d times before its approval", e.gated.runs.Load())
	}
	calls := e.toolCalls()
	if len(calls) != 1 || len(calls[0]) != 1 {
		t.Fatalf("runner sessions' tool calls = %v, want one call", calls)
	}
	nid := nestedRequestID("par-1", calls[0][0])
	msg := e.guestAnswer(calls[0][0])
	for _, want := range []string{"gated.run", pa.GetApprovalId(), "guest_needs_ops", "nothing ran",
		"the parent request par-1 is paused: retry par-1 with the same request_id once it is approved"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the guest was told %q, which does not say %q", msg, want)
		}
	}
	e.checkPausedEvidence("par-1", nid, pa)
	if !slices.Equal(first.GetEvidenceRefs(), e.keys("par-1")) {
		t.Errorf("evidence_refs %v, want the stored keys %v", first.GetEvidenceRefs(), e.keys("par-1"))
	}

	stored := e.keys("par-1")
	again := e.run("par-1")
	if !proto.Equal(first, again) || !slices.Equal(e.keys("par-1"), stored) || len(e.runner.Sessions()) != 1 {
		t.Fatalf("a retry while pending: %v (sessions %d); want the same reply, nothing run or stored", again, len(e.runner.Sessions()))
	}

	e.decide(pa.GetApprovalId(), "approve", "one count is fine")
	ran := e.run("par-1")
	if !ran.GetOk() || ran.GetPendingApproval() != nil || e.gated.runs.Load() != 1 {
		t.Fatalf("after approval: %v, %d runs of the gated tool; want the parent done and one run", ran, e.gated.runs.Load())
	}
	calls = e.toolCalls()
	if len(calls) != 2 || len(calls[1]) != 1 || calls[1][0] == calls[0][0] {
		t.Fatalf("tool calls per session = %v, want the re-run's call under a new call id", calls)
	}
	result := decodeJSON(t, e.artifactOf("par-1", evidence.ArtifactToolResult))
	made, _ := result["evidence"].(map[string]any)["nested_calls"].([]any)
	if len(made) != 1 || made[0].(map[string]any)["request_id"] != nid || made[0].(map[string]any)["call_id"] != calls[1][0] {
		t.Errorf("the re-run's nested calls %v, want call %s made as the approved request %s", made, calls[1][0], nid)
	}
	var used evidence.DecisionRecord
	e.record(evidence.AttemptKey(nid, 2, evidence.ArtifactPolicyDecision), &used)
	if used.Decision != "allow" || used.Approval == nil || used.Approval.Outcome != evidence.ApprovalApprove || used.Approval.Approver != "bob" {
		t.Errorf("the guest's call was not run on its approval: %+v", used)
	}

	replay := e.run("par-1")
	if !proto.Equal(ran, replay) || e.gated.runs.Load() != 1 || len(e.runner.Sessions()) != 2 {
		t.Errorf("a second retry did not replay: %v (%d runs, %d sessions)", replay, e.gated.runs.Load(), len(e.runner.Sessions()))
	}
	e.wantVerified("par-1", "ok")
	e.wantVerified(nid, "ok")
}

// checkPausedEvidence checks what a parent paused for its guest's
// approval has stored: its dispatched attempt closed not dispatched, and
// approval_request.json naming the nested request and its approval.
func (e *guestEnv) checkPausedEvidence(id, nid string, pa *toolgatev1.PendingApproval) {
	e.t.Helper()
	var a, nested evidence.ApprovalRequestRecord
	e.record(evidence.Key(id, evidence.ArtifactApprovalRequest), &a)
	e.record(evidence.Key(nid, evidence.ArtifactApprovalRequest), &nested)
	if a.NestedRequestID != nid || a.ApprovalID != pa.GetApprovalId() || nested.ApprovalID != a.ApprovalID ||
		a.RuleID != nested.RuleID || !a.ExpiresAt.Equal(nested.ExpiresAt) || nested.ParentRequestID != id ||
		pa.GetRequestHash() != nested.CanonicalRequestHash || a.Attempt != 1 {
		e.t.Errorf("the parent's approval_request.json %+v does not name its guest's %+v (reply %v)", a, nested, pa)
	}
	var d evidence.DecisionRecord
	e.record(evidence.Key(id, evidence.ArtifactPolicyDecision), &d)
	var closed evidence.DispatchRecord
	e.record(evidence.AttemptKey(id, 1, evidence.ArtifactNotDispatched), &closed)
	if d.Decision != "allow" || !e.has(id, evidence.ArtifactDispatch) || closed.Reason !=
		"rerun allowed: guest call "+nid+" awaits approval "+a.ApprovalID+"; no nested call was dispatched" {
		e.t.Errorf("the paused attempt: decision %+v, close %+v", d, closed)
	}
	if e.has(id, evidence.ArtifactToolResult) || e.has(id, evidence.ArtifactResponse) || e.has(id, evidence.ArtifactManifest) {
		e.t.Errorf("the paused parent stored a result: %v", e.keys(id))
	}
}

func (e *guestEnv) artifactOf(id, name string) []byte {
	e.t.Helper()
	b, err := e.store.Get(context.Background(), evidence.Key(id, name))
	if err != nil {
		e.t.Fatalf("%s of %s: %v", name, id, err)
	}
	return b
}

func (e *guestEnv) record(key string, v any) {
	e.t.Helper()
	raw, err := e.store.Get(context.Background(), key)
	if err != nil {
		e.t.Fatalf("%s: %v", key, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		e.t.Fatalf("%s: %v", key, err)
	}
}

// TestOnlySandboxesAreSealed: a parent's run may be discarded and run
// again only when its driver is sealed. The workspace runs commands and
// writes files, a TPMJS executor runs a package's code with the network:
// neither may ever be.
func TestOnlySandboxesAreSealed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		driver any
		sealed bool
	}{
		{"workspace is not sealed", (*workspace.Driver)(nil), false},
		{"tpmjs is not sealed", (*tpmjs.Driver)(nil), false},
		{"a Go driver that calls tools is not sealed", &sandboxDriver{}, false},
		{"execbox is sealed", (*execbox.Driver)(nil), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ok := tc.driver.(drivers.Sealed)
			if ok != tc.sealed {
				t.Errorf("%T implements drivers.Sealed: %v, want %v", tc.driver, ok, tc.sealed)
			}
		})
	}
	d, err := execbox.New(execbox.Config{URL: "ws://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Sealed() {
		t.Error("an execbox driver says its runs are not sealed")
	}
}

// TestGuestApprovalDeniedOrExpiredEndsTheParent: when the guest's call is
// denied, or its approval expires undecided, the parent's retry ends the
// parent denied by the approval's rule; its guest is not run again, and a
// further retry replays.
func TestGuestApprovalDeniedOrExpiredEndsTheParent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		end         func(e *guestEnv, approvalID string)
		wantReason  string
		wantOutcome string
	}{
		{"an approver denies it", func(e *guestEnv, id string) { e.decide(id, "deny", "not during the freeze") },
			"not during the freeze", evidence.ApprovalDeny},
		{"nobody decides before it expires", func(e *guestEnv, _ string) { e.clock.advance(2 * time.Hour) },
			"expired at", evidence.ApprovalExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newGuestEnv(t, gatedScript)
			pa := wantPending(t, e.run("par-d"))
			tc.end(e, pa.GetApprovalId())
			denied := e.run("par-d")
			pc := denied.GetPolicyCheck()
			if denied.GetOk() || denied.GetPendingApproval() != nil || denied.GetToolResult() != nil || pc.GetDecision() != "deny" ||
				pc.GetRuleId() != "guest_needs_ops" || !strings.Contains(pc.GetReason(), tc.wantReason) {
				t.Fatalf("the parent's retry: %v; want a final deny by guest_needs_ops saying %q", denied, tc.wantReason)
			}
			if e.gated.runs.Load() != 0 || len(e.runner.Sessions()) != 1 {
				t.Fatalf("%d runs of the gated tool, %d runner sessions; want the guest never run again", e.gated.runs.Load(), len(e.runner.Sessions()))
			}
			var d evidence.DecisionRecord
			e.record(evidence.AttemptKey("par-d", 2, evidence.ArtifactPolicyDecision), &d)
			if d.Decision != "deny" || d.Approval == nil || d.Approval.Outcome != tc.wantOutcome || d.Approval.ApprovalID != pa.GetApprovalId() {
				t.Errorf("the parent's final decision %+v %+v", d, d.Approval)
			}
			if replay := e.run("par-d"); !proto.Equal(denied, replay) {
				t.Errorf("a further retry: %v, want the deny replayed", replay)
			}
			nid := nestedRequestID("par-d", e.toolCalls()[0][0])
			waitFor(t, func() bool { return e.has(nid, evidence.ArtifactManifest) })
			e.wantVerified("par-d", "ok")
			e.wantVerified(nid, "ok")
		})
	}
}

// TestGuestCallsStopWhileOneWaits: a guest that goes on calling tools
// after one of its calls must wait for approval gets nothing: the calls
// are refused without being claimed, so the paused run still had no
// effect. Its re-run after the approval makes both calls.
func TestGuestCallsStopWhileOneWaits(t *testing.T) {
	t.Parallel()
	e := newGuestEnv(t, execboxtest.Script{
		execboxtest.FreshCallIDs(), execboxtest.Started(),
		execboxtest.CallTool("c1", "gated", "run", map[string]any{"n": 1}), execboxtest.AwaitResult("c1"),
		execboxtest.CallTool("c2", "free", "run", nil), execboxtest.DoneFromResult("c2"),
	})
	pa := wantPending(t, e.run("par-s"))
	calls := e.toolCalls()[0]
	if e.free.runs.Load() != 0 || e.has(nestedRequestID("par-s", calls[1]), evidence.ArtifactRequest) {
		t.Fatalf("a call after the one that waits was made (%d runs)", e.free.runs.Load())
	}
	if msg := e.guestAnswer(calls[1]); !strings.Contains(msg, "not called") || !strings.Contains(msg, pa.GetApprovalId()) {
		t.Errorf("the refused call was answered %q", msg)
	}
	e.decide(pa.GetApprovalId(), "approve", "fine")
	if ran := e.run("par-s"); !ran.GetOk() || e.gated.runs.Load() != 1 || e.free.runs.Load() != 1 {
		t.Fatalf("the re-run: %v, gated %d, free %d; want both calls made once", ran, e.gated.runs.Load(), e.free.runs.Load())
	}
}

// TestGuestCallThatCannotWait: a parent whose run may have had an effect
// is never run again. Its guest is told why its call cannot wait; the
// parent completes with what the guest made of it; approving the call
// afterwards changes nothing, and every retry replays.
func TestGuestCallThatCannotWait(t *testing.T) {
	t.Parallel()
	free := execboxtest.CallTool("c0", "free", "run", nil)
	tests := []struct {
		name    string
		script  execboxtest.Script
		freeFor time.Duration
		wantWhy string
	}{
		{"an earlier call of the guest was dispatched", execboxtest.Script{
			execboxtest.FreshCallIDs(), execboxtest.Started(), free, execboxtest.AwaitResult("c0"),
			execboxtest.CallTool("c1", "gated", "run", map[string]any{"n": 1}), execboxtest.DoneFromResult("c1"),
		}, 0, "of this run was dispatched"},
		{"another call of the guest was in flight", execboxtest.Script{
			execboxtest.FreshCallIDs(), execboxtest.Started(), free, execboxtest.Sleep(100 * time.Millisecond),
			execboxtest.CallTool("c1", "gated", "run", map[string]any{"n": 1}), execboxtest.AwaitResult("c0"),
			execboxtest.DoneFromResult("c1"),
		}, time.Second, "another guest call was in flight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newGuestEnv(t, tc.script)
			e.free.delay = tc.freeFor
			first := e.run("par-n")
			if first.GetPendingApproval() != nil || first.GetToolResult().GetExitCode() != 3 || e.has("par-n", evidence.ArtifactApprovalRequest) {
				t.Fatalf("the parent: %v; want it completed with its guest's tool_error", first)
			}
			calls := e.toolCalls()[0]
			gated := calls[slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "c1-") })]
			if msg := e.guestAnswer(gated); !strings.Contains(msg, "the parent request par-n cannot wait for it") || !strings.Contains(msg, tc.wantWhy) {
				t.Errorf("the guest was told %q; want why its parent cannot wait: %q", msg, tc.wantWhy)
			}
			var nested evidence.ApprovalRequestRecord
			e.record(evidence.Key(nestedRequestID("par-n", gated), evidence.ArtifactApprovalRequest), &nested)
			e.decide(nested.ApprovalID, "approve", "too late")
			if again := e.run("par-n"); !proto.Equal(first, again) || e.gated.runs.Load() != 0 || len(e.runner.Sessions()) != 1 {
				t.Errorf("a retry after the approval: %v (gated %d, sessions %d); want a replay", again, e.gated.runs.Load(), len(e.runner.Sessions()))
			}
			e.wantVerified("par-n", "ok")
		})
	}
}

// countedSandbox counts the runs of a sandbox that is not sealed.
type countedSandbox struct {
	*sandboxDriver
	runs atomic.Int64
}

func (d *countedSandbox) Run(ctx context.Context, c drivers.Call) (drivers.Result, error) {
	d.runs.Add(1)
	return d.sandboxDriver.Run(ctx, c)
}

// TestUnsealedParentIsNeverRunAgain: a driver that is not sealed (its code
// could have written files or reached the network) completes as usual
// when its guest's call needs approval, and is never run again.
func TestUnsealedParentIsNeverRunAgain(t *testing.T) {
	t.Parallel()
	sb := &countedSandbox{sandboxDriver: &sandboxDriver{calls: []nestedStep{{"c1", "gated.run", map[string]any{"n": 1}}}}}
	e := newGuestEnvWith(t, guestOptions{sandbox: sb})
	first := e.run("par-u")
	if !first.GetOk() || first.GetPendingApproval() != nil || e.has("par-u", evidence.ArtifactApprovalRequest) {
		t.Fatalf("the unsealed parent: %v; want it completed", first)
	}
	told := first.GetToolResult().GetData().GetListValue().GetValues()[0].GetStructValue().GetFields()["message"].GetStringValue()
	if !strings.Contains(told, "cannot wait for it: its driver sandbox is not sealed") {
		t.Errorf("the guest was told %q", told)
	}
	var nested evidence.ApprovalRequestRecord
	e.record(evidence.Key("par-u:c1", evidence.ArtifactApprovalRequest), &nested)
	e.decide(nested.ApprovalID, "approve", "too late")
	if again := e.run("par-u"); !proto.Equal(first, again) || sb.runs.Load() != 1 || e.gated.runs.Load() != 0 {
		t.Errorf("a retry after the approval: %v (runs %d, gated %d); want a replay", again, sb.runs.Load(), e.gated.runs.Load())
	}
}

// TestApprovedGuestCallIsUsedOnce: an approval covers one call. When the
// re-run's guest makes the approved call twice, the second is a new call
// that needs its own approval, which the parent, already running on an
// approval, cannot wait for.
func TestApprovedGuestCallIsUsedOnce(t *testing.T) {
	t.Parallel()
	twice := execboxtest.Script{
		execboxtest.FreshCallIDs(), execboxtest.Started(),
		execboxtest.CallTool("c1", "gated", "run", map[string]any{"n": 1}), execboxtest.AwaitResult("c1"),
		execboxtest.CallTool("c2", "gated", "run", map[string]any{"n": 1}), execboxtest.DoneFromResult("c2"),
	}
	e := newGuestEnv(t, twice)
	pa := wantPending(t, e.run("par-t"))
	e.decide(pa.GetApprovalId(), "approve", "once")
	ran := e.run("par-t")
	if ran.GetToolResult().GetExitCode() != 3 || e.gated.runs.Load() != 1 {
		t.Fatalf("the re-run: %v, %d runs of the gated tool; want one run and the second call refused", ran, e.gated.runs.Load())
	}
	second := e.toolCalls()[1][1]
	if msg := e.guestAnswer(second); !strings.Contains(msg, "cannot wait for it: it already runs after an approval") {
		t.Errorf("the second call was answered %q", msg)
	}
	if !e.has(nestedRequestID("par-t", second), evidence.ArtifactApprovalRequest) {
		t.Error("the second call did not ask for an approval of its own")
	}
}

// failOnce fails the first Put of one key, as a store that dropped the
// connection does.
type failOnce struct {
	evidence.Store
	key    string
	failed atomic.Bool
}

func (f *failOnce) Put(ctx context.Context, key string, data []byte) error {
	if key == f.key && f.failed.CompareAndSwap(false, true) {
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return f.Store.Put(ctx, key, data)
}

// WalkInfo lists as the wrapped store does.
func (f *failOnce) WalkInfo(ctx context.Context, prefix string, fn func(evidence.KeyInfo) error) error {
	return evidence.WalkInfo(ctx, f.Store, prefix, fn)
}

// TestGuestWaitThatCannotBeRecorded: when the parent's wait cannot be
// recorded, the caller is told that nothing the guest asked for ran and to
// retry; the retry waits for the guest's approval, and the approved call
// still runs once.
func TestGuestWaitThatCannotBeRecorded(t *testing.T) {
	t.Parallel()
	for _, artifact := range []string{evidence.ArtifactApprovalRequest, evidence.ArtifactNotDispatched} {
		t.Run("the store refuses "+artifact, func(t *testing.T) {
			t.Parallel()
			e := newGuestEnvWith(t, guestOptions{script: gatedScript, wrap: func(s evidence.Store) evidence.Store {
				return &failOnce{Store: s, key: evidence.Key("par-f", artifact)}
			}})
			_, err := e.client.RunTool(as("alice"), &toolgatev1.RunToolRequest{
				RequestId: "par-f", ToolId: "code.run", Args: mustStruct(t, map[string]any{"code": "return await gated.run({n: 1})"}),
			})
			wantCode(t, err, codes.Unavailable, "nothing the guest asked for ran (retry with the same request_id)")
			if e.gated.runs.Load() != 0 || e.has("par-f", evidence.ArtifactManifest) {
				t.Fatalf("after the failure: %d runs, keys %v", e.gated.runs.Load(), e.keys("par-f"))
			}
			pa := wantPending(t, e.run("par-f"))
			e.decide(pa.GetApprovalId(), "approve", "go")
			if ran := e.run("par-f"); !ran.GetOk() || e.gated.runs.Load() != 1 {
				t.Fatalf("after approval: %v, %d runs; want one", ran, e.gated.runs.Load())
			}
			e.wantVerified("par-f", "ok")
		})
	}
}

// TestGuestRerunThatNowNeedsItsOwnApproval: when policy changes between
// the approval of a guest's call and the parent's retry so that the
// parent itself needs approval, the parent ends denied (approval_stale)
// rather than asking a second time; its guest is not run again.
func TestGuestRerunThatNowNeedsItsOwnApproval(t *testing.T) {
	t.Parallel()
	e := newGuestEnv(t, gatedScript)
	pa := wantPending(t, e.run("par-p"))
	e.decide(pa.GetApprovalId(), "approve", "go")
	held := strings.Replace(guestPolicy, `@id("run_code")`, `@id("run_code") @approval("ops")`, 1)
	if err := os.WriteFile(filepath.Join(e.policyDir, "policy.default.cedar"), []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.live.Reload(true); err != nil {
		t.Fatal(err)
	}
	denied := e.run("par-p")
	if pc := denied.GetPolicyCheck(); denied.GetOk() || denied.GetPendingApproval() != nil || pc.GetRuleId() != RuleApprovalStale ||
		!strings.Contains(pc.GetReason(), "run_code") {
		t.Fatalf("the retry: %v; want a final deny, %s", denied, RuleApprovalStale)
	}
	if e.gated.runs.Load() != 0 || len(e.runner.Sessions()) != 1 {
		t.Errorf("%d runs, %d sessions; want the guest not run again", e.gated.runs.Load(), len(e.runner.Sessions()))
	}
	if replay := e.run("par-p"); !proto.Equal(denied, replay) {
		t.Errorf("a further retry: %v, want the deny replayed", replay)
	}
	e.wantVerified("par-p", "ok")
}

// TestRacingRetriesOfAnApprovedParent: retries of the parent racing after
// the approval run its guest's call once: one opens the next attempt, any
// other is told the request is being retried, or replays.
func TestRacingRetriesOfAnApprovedParent(t *testing.T) {
	t.Parallel()
	e := newGuestEnv(t, gatedScript)
	pa := wantPending(t, e.run("par-r"))
	e.decide(pa.GetApprovalId(), "approve", "go")
	const racers = 4
	errs := make(chan error, racers)
	for range racers {
		go func() {
			resp, err := e.client.RunTool(as("alice"), &toolgatev1.RunToolRequest{
				RequestId: "par-r", ToolId: "code.run", Args: mustStruct(t, map[string]any{"code": "return await gated.run({n: 1})"}),
			})
			if err == nil && !resp.GetOk() {
				err = fmt.Errorf("reply %v", resp)
			}
			errs <- err
		}()
	}
	for range racers {
		if err := <-errs; err != nil && status.Code(err) != codes.Aborted {
			t.Errorf("a racing retry: %v; want the run or ABORTED", err)
		}
	}
	if e.gated.runs.Load() != 1 || len(e.runner.Sessions()) != 2 {
		t.Errorf("%d runs of the gated tool, %d runner sessions; want one re-run making the call once", e.gated.runs.Load(), len(e.runner.Sessions()))
	}
}
