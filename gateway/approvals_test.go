package gateway

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// approvalPolicy holds counting.run for the ops group, and lets ops
// members approve it.
const approvalPolicy = `
@id("counter_needs_ops") @approval("ops") @reason("counts irreversibly")
permit (principal, action == Action::"RunTool", resource == Tool::"counting.run");

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"counting.run")
when { principal.groups.contains(context.group) };
`

// approvalKeys: alice asks, bob and carol approve (ops), mallory is in no
// group.
var approvalKeys = []config.KeyConfig{
	{Caller: "alice", Env: "KEY_ALICE", Groups: []string{"dev"}},
	{Caller: "bob", Env: "KEY_BOB", Groups: []string{"ops"}},
	{Caller: "carol", Env: "KEY_CAROL", Groups: []string{"ops", "dev"}},
	{Caller: "mallory", Env: "KEY_MALLORY"},
}

// fakeClock is a settable Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// recordingNotifier keeps the events it is told of.
type recordingNotifier struct {
	mu     sync.Mutex
	events []approval.Event
}

func (n *recordingNotifier) Notify(ev approval.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.events = append(n.events, ev)
}

func (n *recordingNotifier) types() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, ev := range n.events {
		out = append(out, ev.Type+" "+ev.Approval.GetState())
	}
	return out
}

// approvalEnv is one or more gateways (replicas, each on its own loopback
// listener) sharing a policy folder, a store, a clock and a counting
// driver serving counting.run.
type approvalEnv struct {
	t         testing.TB
	policyDir string
	live      *policy.Live
	store     evidence.Store
	clock     *fakeClock
	driver    *countingDriver
	notes     *recordingNotifier
	gws       []*Gateway
	clients   []toolgatev1.ToolGatewayClient
}

type approvalEnvOptions struct {
	policy   string         // default approvalPolicy
	store    evidence.Store // default: a FileStore in a temp dir
	replicas int            // default 1
	// wrap, if set, wraps the store of replica i.
	wrap func(i int, s evidence.Store) evidence.Store
	// interval, if set, is the recovery sweep's interval.
	interval time.Duration
	// noAuth turns authentication off: every caller is anonymous.
	noAuth bool
	// signer, if set, gives replica i its signing key (nil: none).
	signer func(i int) *evidence.Signer
	// trusted is Options.TrustedKeys of every replica.
	trusted []ed25519.PublicKey
}

func newApprovalEnv(t testing.TB, o approvalEnvOptions) *approvalEnv {
	t.Helper()
	dir := t.TempDir()
	e := &approvalEnv{
		t: t, policyDir: filepath.Join(dir, "policies"), store: o.store, driver: &countingDriver{},
		clock: &fakeClock{t: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}, notes: &recordingNotifier{},
	}
	if o.policy == "" {
		o.policy = approvalPolicy
	}
	if err := os.Mkdir(e.policyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.writePolicy(o.policy)
	var err error
	if e.live, err = policy.NewLive(e.policyDir); err != nil {
		t.Fatal(err)
	}
	if e.store == nil {
		fs, err := evidence.NewFileStore(filepath.Join(dir, "evidence"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Close() })
		e.store = fs
	}
	keys := approvalKeys
	if o.noAuth {
		keys = nil
	}
	auth, err := callerauth.New(keys, func(name string) string {
		return strings.ToLower(strings.TrimPrefix(name, "KEY_")) + "-key"
	})
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range max(o.replicas, 1) {
		store := e.store
		if o.wrap != nil {
			store = o.wrap(i, store)
		}
		var signer *evidence.Signer
		if o.signer != nil {
			signer = o.signer(i)
		}
		gw, err := New(Options{
			Decider: e.live, Store: store, Redactor: red, Auth: auth, Signer: signer, TrustedKeys: o.trusted,
			Drivers:   map[string]drivers.Driver{"counting": e.driver},
			Tools:     map[string]Tool{"counting.run": {Driver: "counting", Target: "run"}},
			Instance:  "replica-" + string(rune('a'+i)),
			Now:       e.clock.Now,
			Approvals: ApprovalOptions{TTL: time.Hour, Notifier: e.notes},
			Recovery:  RecoveryOptions{Interval: o.interval},
		})
		if err != nil {
			t.Fatal(err)
		}
		e.gws = append(e.gws, gw)
		e.clients = append(e.clients, toolgatev1.NewToolGatewayClient(serve(t, gw)))
	}
	return e
}

func (e *approvalEnv) writePolicy(text string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.policyDir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// reload swaps text in as the policy in force.
func (e *approvalEnv) reload(text string) {
	e.t.Helper()
	e.writePolicy(text)
	if _, err := e.live.Reload(true); err != nil {
		e.t.Fatalf("reload: %v", err)
	}
}

// as returns a context that authenticates as caller ("" for none).
func as(caller string) context.Context {
	if caller == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+caller+"-key")
}

// run calls counting.run on replica i as caller.
func (e *approvalEnv) run(i int, caller, id string, args map[string]any) (*toolgatev1.RunToolResponse, error) {
	e.t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.clients[i].RunTool(as(caller), &toolgatev1.RunToolRequest{RequestId: id, ToolId: "counting.run", Args: s})
}

func (e *approvalEnv) mustRun(caller, id string, args map[string]any) *toolgatev1.RunToolResponse {
	e.t.Helper()
	resp, err := e.run(0, caller, id, args)
	if err != nil {
		e.t.Fatalf("RunTool %s as %s: %v", id, caller, err)
	}
	return resp
}

// mustPend calls and expects a pending reply: nothing ran.
func (e *approvalEnv) mustPend(caller, id string, args map[string]any) *toolgatev1.RunToolResponse {
	e.t.Helper()
	before := e.driver.runs.Load()
	resp := e.mustRun(caller, id, args)
	if resp.GetPendingApproval() == nil || resp.GetOk() || resp.GetToolResult() != nil || resp.GetPolicyCheck().GetDecision() != "deny" {
		e.t.Fatalf("reply is not a pending approval that reads as not run: %v", resp)
	}
	if got := e.driver.runs.Load(); got != before {
		e.t.Fatalf("the tool ran %d times while its call waits for approval", got-before)
	}
	return resp
}

func (e *approvalEnv) decide(i int, caller, approvalID, decision, reason string) (*toolgatev1.Approval, error) {
	e.t.Helper()
	resp, err := e.clients[i].DecideApproval(as(caller), &toolgatev1.DecideApprovalRequest{
		ApprovalId: approvalID, Decision: decision, Reason: reason,
	})
	return resp.GetApproval(), err
}

func (e *approvalEnv) mustDecide(caller, approvalID, decision, reason string) *toolgatev1.Approval {
	e.t.Helper()
	a, err := e.decide(0, caller, approvalID, decision, reason)
	if err != nil {
		e.t.Fatalf("DecideApproval %s %s as %s: %v", decision, approvalID, caller, err)
	}
	return a
}

func (e *approvalEnv) keys(id string) []string {
	e.t.Helper()
	keys, err := e.store.List(context.Background(), evidence.RequestPrefix(id))
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

func (e *approvalEnv) record(key string, v any) []byte {
	e.t.Helper()
	raw, err := e.store.Get(context.Background(), key)
	if err != nil {
		e.t.Fatalf("%s: %v", key, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		e.t.Fatalf("%s: %v", key, err)
	}
	return raw
}

// wantVerifiedOK checks the request's evidence with evidence.Verify.
func (e *approvalEnv) wantVerifiedOK(id string) {
	e.t.Helper()
	rep, err := evidence.Verify(context.Background(), e.store, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if rep.Status != "ok" {
		e.t.Errorf("verify %s: %s %v", id, rep.Status, rep.Problems)
	}
}

// TestApprovalRequiredCallWaitsThenRunsOnceAfterApproval walks the whole
// story: the call is held (nothing runs, the same pending reply on every
// retry, nothing new stored), an ops member approves it, the next retry
// runs it once, and later retries replay that answer.
func TestApprovalRequiredCallWaitsThenRunsOnceAfterApproval(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	args := map[string]any{"n": 1}
	first := e.mustPend("alice", "held-1", args)
	pa := first.GetPendingApproval()
	if evidence.ValidApprovalID(pa.GetApprovalId()) != nil || pa.GetRuleId() != "counter_needs_ops" ||
		pa.GetApprovers() != "ops" || pa.GetReason() != "counts irreversibly" {
		t.Fatalf("pending_approval = %v", pa)
	}
	if want := e.clock.Now().Add(time.Hour); !pa.GetExpiresAt().AsTime().Equal(want) {
		t.Errorf("expires_at = %v, want %v", pa.GetExpiresAt().AsTime(), want)
	}
	if pc := first.GetPolicyCheck(); pc.GetRuleId() != "counter_needs_ops" ||
		!strings.HasPrefix(pc.GetReason(), "approval required (approval "+pa.GetApprovalId()+", expires ") {
		t.Errorf("policy_check = %v", pc)
	}
	if !slices.IsSorted(first.GetEvidenceRefs()) || !slices.Equal(first.GetEvidenceRefs(), e.keys("held-1")) {
		t.Errorf("evidence_refs = %v, want the stored keys %v", first.GetEvidenceRefs(), e.keys("held-1"))
	}
	var asked evidence.DecisionRecord
	e.record(evidence.Key("held-1", evidence.ArtifactPolicyDecision), &asked)
	if asked.Decision != "approval_required" || asked.Approval == nil || asked.Approval.Outcome != evidence.ApprovalPending ||
		asked.Approval.ApprovalID != pa.GetApprovalId() {
		t.Errorf("policy_decision.json = %+v", asked)
	}

	stored := e.keys("held-1")
	again := e.mustPend("alice", "held-1", args)
	if !proto.Equal(first, again) {
		t.Errorf("a retry while pending got another reply:\nfirst: %v\nretry: %v", first, again)
	}
	if got := e.keys("held-1"); !slices.Equal(got, stored) {
		t.Errorf("a retry while pending stored something: %v, was %v", got, stored)
	}

	approved := e.mustDecide("bob", pa.GetApprovalId(), "approve", "looks right")
	if approved.GetState() != "approved" || approved.GetDecidedBy() != "bob" || approved.GetDecisionReason() != "looks right" {
		t.Fatalf("approval = %v", approved)
	}
	ran := e.mustRun("alice", "held-1", args)
	if !ran.GetOk() || ran.GetPendingApproval() != nil || e.driver.runs.Load() != 1 {
		t.Fatalf("after approval: reply %v, %d runs; want one run", ran, e.driver.runs.Load())
	}
	var used evidence.DecisionRecord
	e.record(evidence.AttemptKey("held-1", 2, evidence.ArtifactPolicyDecision), &used)
	verdict, _ := e.store.Get(context.Background(), evidence.Key("held-1", evidence.ArtifactApproval))
	if used.Decision != "allow" || used.RuleID != "counter_needs_ops" || used.Approval == nil ||
		used.Approval.Outcome != evidence.ApprovalApprove || used.Approval.Approver != "bob" ||
		used.Approval.ApprovalSHA256 != sha256Hex(string(verdict)) || used.Approval.PolicySetChanged {
		t.Errorf("the consuming decision = %+v %+v", used, used.Approval)
	}
	replay := e.mustRun("alice", "held-1", args)
	if !proto.Equal(ran, replay) || e.driver.runs.Load() != 1 {
		t.Errorf("a second retry did not replay: %v (runs %d)", replay, e.driver.runs.Load())
	}
	e.wantVerifiedOK("held-1")
	if got, want := e.notes.types(), []string{"approval.pending pending", "approval.decided approved"}; !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}
}

// pendingID calls and returns the approval id of the pending reply.
func (e *approvalEnv) pendingID(caller, id string, args map[string]any) string {
	e.t.Helper()
	return e.mustPend(caller, id, args).GetPendingApproval().GetApprovalId()
}

// wantFinalDeny expects a final deny by ruleID whose reason contains
// reason, and that the tool never ran.
func (e *approvalEnv) wantFinalDeny(resp *toolgatev1.RunToolResponse, ruleID, reason string) {
	e.t.Helper()
	pc := resp.GetPolicyCheck()
	if resp.GetOk() || resp.GetToolResult() != nil || resp.GetPendingApproval() != nil || pc.GetDecision() != "deny" ||
		pc.GetRuleId() != ruleID || !strings.Contains(pc.GetReason(), reason) {
		e.t.Fatalf("reply %v; want a final deny by %s saying %q", resp, ruleID, reason)
	}
	if n := e.driver.runs.Load(); n != 0 {
		e.t.Fatalf("the tool ran %d times", n)
	}
}

// TestDeniedApprovalEndsTheRequestDenied: an approver's deny ends the
// request at once with a final deny by the approval rule, in the
// approver's words; every retry replays it and nothing runs.
func TestDeniedApprovalEndsTheRequestDenied(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	apr := e.pendingID("alice", "deny-1", map[string]any{"n": 2})
	denied := e.mustDecide("carol", apr, "deny", "not during the freeze")
	if denied.GetState() != "denied" || denied.GetDecidedBy() != "carol" {
		t.Fatalf("approval = %v", denied)
	}
	if !slices.Contains(e.keys("deny-1"), evidence.Key("deny-1", evidence.ArtifactManifest)) {
		t.Fatal("the deny did not end the request at once")
	}
	first := e.mustRun("alice", "deny-1", map[string]any{"n": 2})
	e.wantFinalDeny(first, "counter_needs_ops", "not during the freeze")
	if again := e.mustRun("alice", "deny-1", map[string]any{"n": 2}); !proto.Equal(first, again) {
		t.Errorf("retry after the deny got %v, want %v", again, first)
	}
	var final evidence.DecisionRecord
	e.record(evidence.AttemptKey("deny-1", 2, evidence.ArtifactPolicyDecision), &final)
	if final.Decision != "deny" || final.Approval == nil || final.Approval.Outcome != evidence.ApprovalDeny || final.Approval.Approver != "carol" {
		t.Errorf("final decision = %+v", final)
	}
	e.wantVerifiedOK("deny-1")
}

// TestExpiredApprovalEndsTheRequestDenied: past approvals.ttl a call is
// denied, whether it was never decided, or approved but not used in time;
// a decision that comes too late is refused.
func TestExpiredApprovalEndsTheRequestDenied(t *testing.T) {
	t.Parallel()
	t.Run("never decided, then retried", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "exp-1", nil)
		e.clock.advance(time.Hour)
		e.wantFinalDeny(e.mustRun("alice", "exp-1", nil), "counter_needs_ops", "approval "+apr+" expired at ")
		var v evidence.ApprovalRecord
		e.record(evidence.Key("exp-1", evidence.ArtifactApproval), &v)
		if v.Decision != evidence.ApprovalExpired || v.Authorization != nil {
			t.Errorf("approval.json = %+v", v)
		}
		_, err := e.decide(0, "bob", apr, "approve", "")
		wantCode(t, err, codes.FailedPrecondition, "expired")
		e.wantVerifiedOK("exp-1")
	})
	t.Run("a decision after expiry is refused and ends the request", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "exp-2", nil)
		e.clock.advance(time.Hour + time.Second)
		_, err := e.decide(0, "bob", apr, "approve", "too late")
		wantCode(t, err, codes.FailedPrecondition, "expired")
		e.wantFinalDeny(e.mustRun("alice", "exp-2", nil), "counter_needs_ops", "expired at ")
		e.wantVerifiedOK("exp-2")
	})
	t.Run("approved but not used in time", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "exp-3", nil)
		e.mustDecide("bob", apr, "approve", "")
		e.clock.advance(time.Hour)
		e.wantFinalDeny(e.mustRun("alice", "exp-3", nil), "counter_needs_ops", "not used before it expired")
		e.wantVerifiedOK("exp-3")
	})
}

// sweep runs replica i's recovery (start-up walk, then a sweep every
// interval) until the test ends.
func (e *approvalEnv) sweep(i int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.gws[i].RunRecovery(ctx)
	}()
	e.t.Cleanup(func() { cancel(); <-done })
}

// TestExpirySweepEndsHeldRequestsOnItsOwn: nobody retries; the recovery
// sweep ends the expired request denied, on the replica that held it and
// on one that only found it in its start-up walk, and not a moment before.
func TestExpirySweepEndsHeldRequestsOnItsOwn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		holder, sweeper  int
		startBeforeAsked bool
	}{
		{"by the replica that held it", 0, 0, true},
		{"by a replica that found it in its start-up walk", 0, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{replicas: 2, interval: 5 * time.Millisecond})
			if tc.startBeforeAsked {
				e.sweep(tc.sweeper)
			}
			if resp, err := e.run(tc.holder, "alice", "swept", nil); err != nil || resp.GetPendingApproval() == nil {
				t.Fatalf("%v %v", resp, err)
			}
			if !tc.startBeforeAsked {
				e.sweep(tc.sweeper)
			}
			manifest := evidence.Key("swept", evidence.ArtifactManifest)
			time.Sleep(30 * time.Millisecond) // several sweeps before the expiry
			if slices.Contains(e.keys("swept"), manifest) {
				t.Fatal("the request was ended before its approval expired")
			}
			e.clock.advance(time.Hour)
			waitFor(t, func() bool { return slices.Contains(e.keys("swept"), manifest) })
			e.wantFinalDeny(e.mustRun("alice", "swept", nil), "counter_needs_ops", "expired at ")
			e.wantVerifiedOK("swept")
		})
	}
}

// selfApprovalPolicy adds a permit that lets leads approve their own calls.
const selfApprovalPolicy = approvalPolicy + `
@id("leads_may_approve_their_own") @self_approval("allowed")
permit (principal, action == Action::"Approve", resource == Tool::"counting.run")
when { principal.groups.contains(context.group) && principal.groups.contains("dev") };
`

// TestWhoMayDecideAnApproval: only authenticated members of the approval
// group whom policy authorises may decide, and the requester only when a
// permit says so explicitly. A refused decision writes nothing: the call
// stays pending.
func TestWhoMayDecideAnApproval(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	apr := e.pendingID("carol", "who-1", nil)
	stored := e.keys("who-1")
	for _, tc := range []struct {
		name, caller, rule string
	}{
		{"the requester approving her own call is refused", "carol", policy.RuleSelfApprovalDenied},
		{"a caller outside the approval group is refused", "mallory", policy.RuleNotInApprovalGroup},
		{"another requester outside the group is refused", "alice", policy.RuleNotInApprovalGroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.decide(0, tc.caller, apr, "approve", "fine by me")
			wantCode(t, err, codes.PermissionDenied, tc.rule)
			if got := e.keys("who-1"); !slices.Equal(got, stored) {
				t.Errorf("a refused decision stored something: %v", got)
			}
			e.mustPend("carol", "who-1", nil)
		})
	}
	t.Run("a caller without credentials is not let in", func(t *testing.T) {
		_, err := e.decide(0, "", apr, "approve", "")
		wantCode(t, err, codes.Unauthenticated, "authorization")
	})
	t.Run("self-approval is allowed where a permit says @self_approval(\"allowed\")", func(t *testing.T) {
		e.reload(selfApprovalPolicy)
		if a := e.mustDecide("carol", apr, "approve", "mine, and I lead"); a.GetState() != "approved" || a.GetDecidedBy() != "carol" {
			t.Fatalf("approval = %v", a)
		}
		if resp := e.mustRun("carol", "who-1", nil); !resp.GetOk() || e.driver.runs.Load() != 1 {
			t.Fatalf("after self-approval: %v, %d runs", resp, e.driver.runs.Load())
		}
		var v evidence.ApprovalRecord
		e.record(evidence.Key("who-1", evidence.ArtifactApproval), &v)
		if v.Authorization == nil || v.Authorization.RuleID != "leads_may_approve_their_own" {
			t.Errorf("approval.json authorization = %+v", v.Authorization)
		}
		e.wantVerifiedOK("who-1")
	})
}

// TestAnonymousCallersCannotDecideApprovals: with authentication off the
// call is held all the same, but nobody can approve it: an approval must
// name who gave it.
func TestAnonymousCallersCannotDecideApprovals(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{noAuth: true})
	apr := e.pendingID("", "anon-1", nil)
	_, err := e.decide(0, "", apr, "approve", "")
	wantCode(t, err, codes.PermissionDenied, "approvals need an authenticated caller")
	_, err = e.clients[0].ListApprovals(as(""), &toolgatev1.ListApprovalsRequest{})
	wantCode(t, err, codes.PermissionDenied, "approvals need an authenticated caller")
	e.mustPend("", "anon-1", nil)
}

// TestTwoReplicasConsumeOneApprovalOnce: replicas on one store race to use
// one approval; the tool runs exactly once and everyone else gets ABORTED
// or the stored answer.
func TestTwoReplicasConsumeOneApprovalOnce(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{2, 32} {
		t.Run(fmt.Sprintf("%d concurrent retries", retries), func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{replicas: 2})
			e.driver.delay = 50 * time.Millisecond
			apr := e.pendingID("alice", "race-1", nil)
			if _, err := e.decide(1, "bob", apr, "approve", ""); err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			replies := make([]*toolgatev1.RunToolResponse, retries)
			errs := make([]error, retries)
			var wg sync.WaitGroup
			for i := range retries {
				wg.Go(func() {
					<-start
					replies[i], errs[i] = e.run(i%2, "alice", "race-1", nil)
				})
			}
			close(start)
			wg.Wait()
			if n := e.driver.runs.Load(); n != 1 {
				t.Fatalf("the approved call ran %d times", n)
			}
			final := e.mustRun("alice", "race-1", nil)
			for i := range retries {
				if errs[i] != nil {
					wantCode(t, errs[i], codes.Aborted, "request_id")
				} else if !proto.Equal(replies[i], final) {
					t.Errorf("retry %d got %v, the stored answer is %v", i, replies[i], final)
				}
			}
			if replay, err := e.run(1, "alice", "race-1", nil); err != nil || !proto.Equal(replay, final) {
				t.Errorf("the other replica replays %v, %v", replay, err)
			}
			if e.driver.runs.Load() != 1 {
				t.Fatal("a replay ran the tool")
			}
			e.wantVerifiedOK("race-1")
		})
	}
}

// TestPolicyChangeBetweenApprovalAndRetry: the retry is decided again by
// the policy in force, and the approval counts only where that policy
// still asks for it by the same rule.
func TestPolicyChangeBetweenApprovalAndRetry(t *testing.T) {
	t.Parallel()
	approvers := `
@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"counting.run")
when { principal.groups.contains(context.group) };
`
	for _, tc := range []struct {
		name, policy string
		runs         bool
		rule         string
		changed      bool
	}{
		{"the same approval rule in a changed set runs it", approvalPolicy + "\n// reviewed again\n", true, "counter_needs_ops", true},
		{"another approval rule denies it as stale", strings.Replace(approvalPolicy, `@id("counter_needs_ops")`, `@id("counter_needs_two")`, 1),
			false, RuleApprovalStale, true},
		{"a plain permit runs it, the record naming the approval", approvers + `
@id("counter_for_all")
permit (principal, action == Action::"RunTool", resource == Tool::"counting.run");
`, true, "counter_for_all", true},
		{"a forbid denies it", approvalPolicy + `
@id("counter_frozen") @reason("frozen")
forbid (principal, action, resource == Tool::"counting.run");
`, false, "counter_frozen", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{})
			apr := e.pendingID("alice", "change-1", nil)
			e.mustDecide("bob", apr, "approve", "")
			e.reload(tc.policy)
			resp := e.mustRun("alice", "change-1", nil)
			if got := e.driver.runs.Load() == 1; got != tc.runs || resp.GetOk() != tc.runs || resp.GetPolicyCheck().GetRuleId() != tc.rule {
				t.Fatalf("reply %v, %d runs; want ran=%v by %s", resp, e.driver.runs.Load(), tc.runs, tc.rule)
			}
			var d evidence.DecisionRecord
			e.record(evidence.AttemptKey("change-1", 2, evidence.ArtifactPolicyDecision), &d)
			if d.Approval == nil || d.Approval.ApprovalID != apr || d.Approval.Outcome != evidence.ApprovalApprove ||
				d.Approval.PolicySetChanged != tc.changed {
				t.Errorf("the retry's decision names the approval as %+v", d.Approval)
			}
			if replay := e.mustRun("alice", "change-1", nil); !proto.Equal(replay, resp) {
				t.Errorf("replay %v, want %v", replay, resp)
			}
			e.wantVerifiedOK("change-1")
		})
	}
}

// TestStoreFailuresAroundAnApprovalNeverRunTheCall: whichever write of the
// approval's story the store refuses, the call is left pending or
// retryable, never run; once the store is back it runs exactly once.
func TestStoreFailuresAroundAnApprovalNeverRunTheCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fail    string // the artifact whose next writes fail
		times   int
		when    string // "ask", "decide" or "use"
		errCode codes.Code
		errText string
	}{
		{"approval_request.json refused", evidence.ArtifactApprovalRequest, 1, "ask", codes.Unavailable, "nothing was executed"},
		{"closing the held attempt refused", evidence.ArtifactDispatch, 2, "ask", codes.Unavailable, "awaits approval"},
		{"approval.json refused", evidence.ArtifactApproval, 1, "decide", codes.Unavailable, "not decided"},
		{"the consuming decision refused", evidence.ArtifactPolicyDecision, 1, "use", codes.Unavailable, "nothing was executed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var faults *faultStore
			e := newApprovalEnv(t, approvalEnvOptions{wrap: func(_ int, s evidence.Store) evidence.Store {
				faults = wrapFaults(s)
				return faults
			}})
			var apr string
			if tc.when == "ask" {
				faults.failNext(tc.fail, tc.times)
				_, err := e.run(0, "alice", "crash-1", nil)
				wantCode(t, err, tc.errCode, tc.errText)
			}
			apr = e.pendingID("alice", "crash-1", nil)
			if tc.when == "decide" {
				faults.failNext(tc.fail, tc.times)
				_, err := e.decide(0, "bob", apr, "approve", "")
				wantCode(t, err, tc.errCode, tc.errText)
				if again := e.pendingID("alice", "crash-1", nil); again != apr {
					t.Fatalf("pending under %s, then %s", apr, again)
				}
			}
			e.mustDecide("bob", apr, "approve", "")
			if tc.when == "use" {
				faults.failNext(tc.fail, tc.times)
				_, err := e.run(0, "alice", "crash-1", nil)
				wantCode(t, err, tc.errCode, tc.errText)
			}
			if n := e.driver.runs.Load(); n != 0 {
				t.Fatalf("the tool ran %d times before a retry that may run it", n)
			}
			resp := e.mustRun("alice", "crash-1", nil)
			if !resp.GetOk() || e.driver.runs.Load() != 1 {
				t.Fatalf("once the store is back: %v, %d runs", resp, e.driver.runs.Load())
			}
			e.mustRun("alice", "crash-1", nil)
			if e.driver.runs.Load() != 1 {
				t.Fatal("a replay ran the tool again")
			}
			e.wantVerifiedOK("crash-1")
		})
	}
}

// TestApprovalAttacks: an approval is bound to its request, its hash and
// one decision; none of these gets a call run without it.
func TestApprovalAttacks(t *testing.T) {
	t.Parallel()
	args := map[string]any{"path": "/srv/data", "recursive": true}
	t.Run("an unknown or forged approval id is not found", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		e.pendingID("alice", "atk-1", args)
		for _, id := range []string{
			"apr_" + strings.Repeat("a", 26), "atk-1", "../requests/atk-1", "approvals/atk-1", "APR_" + strings.Repeat("A", 26), "",
		} {
			_, err := e.decide(0, "bob", id, "approve", "")
			wantCode(t, err, codes.NotFound, "no approval")
		}
		e.mustPend("alice", "atk-1", args)
	})
	t.Run("an index entry pointing at another request's approval is not that approval", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		e.pendingID("alice", "atk-2", args)
		forged := "apr_" + strings.Repeat("b", 26)
		if err := e.store.Put(context.Background(), approval.IndexKey(forged), []byte("atk-2")); err != nil {
			t.Fatal(err)
		}
		_, err := e.decide(0, "bob", forged, "approve", "")
		wantCode(t, err, codes.NotFound, "no approval")
		e.mustPend("alice", "atk-2", args)
	})
	t.Run("an approval carries over to one other request_id with the same call, once", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "atk-3", args)
		e.mustDecide("bob", apr, "approve", "")
		if resp := e.mustRun("alice", "atk-3-again", args); !resp.GetOk() {
			t.Fatalf("the approved call under another request_id: %v", resp)
		}
		other := e.mustPend("alice", "atk-3-third", args)
		if other.GetPendingApproval().GetApprovalId() == apr {
			t.Fatal("a third request_id was given the used approval's id")
		}
		if resp := e.mustRun("alice", "atk-3", args); resp.GetOk() || resp.GetToolResult() != nil {
			t.Fatalf("the approval's own request ran after another used it: %v", resp)
		}
		if n := e.driver.runs.Load(); n != 1 {
			t.Fatalf("the approved call ran %d times", n)
		}
	})
	t.Run("changed args under the approved request_id are refused", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "atk-4", args)
		e.mustDecide("bob", apr, "approve", "")
		_, err := e.run(0, "alice", "atk-4", map[string]any{"path": "/", "recursive": true})
		wantCode(t, err, codes.AlreadyExists, "different request")
		if n := e.driver.runs.Load(); n != 0 {
			t.Fatalf("the changed call ran %d times", n)
		}
	})
	t.Run("a finished request's approval cannot be decided again", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "atk-5", args)
		e.mustDecide("bob", apr, "approve", "ok")
		e.mustRun("alice", "atk-5", args)
		for _, d := range []struct{ caller, decision string }{{"bob", "deny"}, {"carol", "approve"}, {"carol", "deny"}} {
			_, err := e.decide(0, d.caller, apr, d.decision, "")
			wantCode(t, err, codes.FailedPrecondition, "consumed")
		}
		// The approver repeating his own decision is told it stands.
		if a := e.mustDecide("bob", apr, "approve", "ok"); a.GetState() != "consumed" || a.GetDecidedBy() != "bob" {
			t.Errorf("repeated decision = %v", a)
		}
		if e.driver.runs.Load() != 1 {
			t.Fatalf("ran %d times", e.driver.runs.Load())
		}
	})
	t.Run("a second decision never replaces the first", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "atk-6", args)
		e.mustDecide("bob", apr, "deny", "no")
		_, err := e.decide(0, "carol", apr, "approve", "yes")
		wantCode(t, err, codes.FailedPrecondition, "denied")
		e.wantFinalDeny(e.mustRun("alice", "atk-6", args), "counter_needs_ops", "no")
	})
	t.Run("malformed decisions are refused", func(t *testing.T) {
		t.Parallel()
		e := newApprovalEnv(t, approvalEnvOptions{})
		apr := e.pendingID("alice", "atk-7", args)
		for _, d := range []struct{ decision, reason, want string }{
			{"approved", "", "decision"}, {"", "", "decision"}, {"approve", "line\nbreak", "reason"},
			{"approve", strings.Repeat("x", 1025), "reason"},
		} {
			_, err := e.decide(0, "bob", apr, d.decision, d.reason)
			wantCode(t, err, codes.InvalidArgument, d.want)
		}
		e.mustPend("alice", "atk-7", args)
	})
}

// TestListApprovals: approvers see what they may decide, requesters what
// they asked for, nobody else anything; filters and pages work.
func TestListApprovals(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	first := e.pendingID("alice", "list-1", map[string]any{"n": 1})
	e.clock.advance(time.Second)
	second := e.pendingID("alice", "list-2", map[string]any{"n": 2})
	e.clock.advance(time.Second)
	e.pendingID("carol", "list-3", nil)
	e.mustDecide("bob", second, "approve", "")

	list := func(caller string, req *toolgatev1.ListApprovalsRequest) []string {
		t.Helper()
		resp, err := e.clients[0].ListApprovals(as(caller), req)
		if err != nil {
			t.Fatalf("ListApprovals as %s: %v", caller, err)
		}
		var ids []string
		for _, a := range resp.GetApprovals() {
			ids = append(ids, a.GetRequestId()+" "+a.GetState())
		}
		return ids
	}
	for _, tc := range []struct {
		name, caller string
		req          *toolgatev1.ListApprovalsRequest
		want         []string
	}{
		{"an approver sees every pending approval, oldest first", "bob", &toolgatev1.ListApprovalsRequest{},
			[]string{"list-1 pending", "list-3 pending"}},
		{"all states", "bob", &toolgatev1.ListApprovalsRequest{State: "all"},
			[]string{"list-1 pending", "list-2 approved", "list-3 pending"}},
		{"a requester sees only her own", "alice", &toolgatev1.ListApprovalsRequest{State: "all"},
			[]string{"list-1 pending", "list-2 approved"}},
		{"a caller who may decide none and asked none sees nothing", "mallory", &toolgatev1.ListApprovalsRequest{State: "all"}, nil},
		{"by request_id", "bob", &toolgatev1.ListApprovalsRequest{State: "all", RequestId: "list-2"}, []string{"list-2 approved"}},
		{"by approval_id", "bob", &toolgatev1.ListApprovalsRequest{State: "approved", ApprovalId: second}, []string{"list-2 approved"}},
		{"another's approval by id is not shown", "mallory", &toolgatev1.ListApprovalsRequest{ApprovalId: first}, nil},
		{"by tool", "bob", &toolgatev1.ListApprovalsRequest{State: "all", ToolId: "workspace.read"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(tc.caller, tc.req); !slices.Equal(got, tc.want) {
				t.Errorf("listed %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("pages cover every approval once", func(t *testing.T) {
		var seen []string
		token := ""
		for range 5 {
			resp, err := e.clients[0].ListApprovals(as("bob"), &toolgatev1.ListApprovalsRequest{State: "all", Limit: 1, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.GetApprovals() {
				seen = append(seen, a.GetRequestId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		slices.Sort(seen)
		if want := []string{"list-1", "list-2", "list-3"}; !slices.Equal(seen, want) {
			t.Errorf("pages listed %v, want %v", seen, want)
		}
	})
	t.Run("a bad filter is refused", func(t *testing.T) {
		for _, req := range []*toolgatev1.ListApprovalsRequest{{State: "waiting"}, {Limit: -1}, {PageToken: "requests/list-1"}} {
			_, err := e.clients[0].ListApprovals(as("bob"), req)
			wantCode(t, err, codes.InvalidArgument, "")
		}
	})
}

// TestListToolsShowsToolsThatNeedApproval: a tool a caller could run once
// approved is listed.
func TestListToolsShowsToolsThatNeedApproval(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	resp, err := e.clients[0].ListTools(as("alice"), &toolgatev1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTools()) != 1 || resp.GetTools()[0].GetToolId() != "counting.run" {
		t.Errorf("listed %v, want counting.run", resp.GetTools())
	}
}

// TestShadowThatWouldHoldACallCountsAsAFlip: a candidate set that would
// hold for approval what the enforcing set allows decides otherwise, and
// is recorded and counted so; only the enforcing set decides.
func TestShadowThatWouldHoldACallCountsAsAFlip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		policies: map[string]string{
			"policy.default.cedar": permitWorkspace,
			"policy.candidate.cedar": `@id("read_needs_ops") @approval("ops") @reason("candidate")
permit (principal, action, resource in Driver::"workspace");`,
		},
		shadows: map[string]string{"policy.default": "policy.candidate"},
	})
	resp := e.mustCall("shadow-held", "workspace.readFile", map[string]any{"path": "none.txt"})
	if resp.GetPendingApproval() != nil || resp.GetPolicyCheck().GetDecision() != "allow" {
		t.Fatalf("the shadow set held the call: %v", resp)
	}
	shadow, _ := decodeJSON(t, e.artifact("shadow-held", evidence.ArtifactPolicyDecision))["shadow"].(map[string]any)
	if shadow["decision"] != "approval_required" || shadow["differs"] != true || e.gw.ShadowFlips() != 1 {
		t.Errorf("shadow record = %v, flips %d", shadow, e.gw.ShadowFlips())
	}
}

// BenchmarkApprovalPending measures, over gRPC on a file store, a call
// being held (claim, decision, index, approval request, close) and a retry
// while it is pending (reads only), unsigned and signed: a signing gateway
// signs approval_request.json once and checks its signature on every
// retry.
func BenchmarkApprovalPending(b *testing.B) {
	for _, signed := range []bool{false, true} {
		o := approvalEnvOptions{}
		name := "unsigned"
		if signed {
			o.signer, name = func(int) *evidence.Signer { return testSigner(b, 1) }, "signed"
		}
		e := newApprovalEnv(b, o)
		b.Run(name+"/held", func(b *testing.B) {
			for i := range b.N {
				if resp, err := e.run(0, "alice", fmt.Sprintf("bench-held-%d", i), nil); err != nil || resp.GetPendingApproval() == nil {
					b.Fatal(resp, err)
				}
			}
		})
		b.Run(name+"/retry-while-pending", func(b *testing.B) {
			for range b.N {
				if resp, err := e.run(0, "alice", "bench-held-0", nil); err != nil || resp.GetPendingApproval() == nil {
					b.Fatal(resp, err)
				}
			}
		})
	}
}

// TestTokenGroupsMayDecideApprovals: an approver whose group comes from a
// front door's token (an OAuth groups claim) lists and decides as a
// member; the same caller without that identity is outside the group.
func TestTokenGroupsMayDecideApprovals(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{})
	apr := e.pendingID("alice", "token-1", nil)
	ctx := context.Background()
	opsToken := &Identity{Method: "oauth", Issuer: "https://idp.example", Subject: "mallory", Groups: []string{"ops"}}
	list, err := e.gws[0].ListApprovalsAs(ctx, "mallory", nil, &toolgatev1.ListApprovalsRequest{State: "pending"})
	if err != nil || len(list.GetApprovals()) != 0 {
		t.Fatalf("without the token's group: %v, %v; want nothing listed", list.GetApprovals(), err)
	}
	_, err = e.gws[0].DecideApprovalAs(ctx, "mallory", nil, apr, "approve", "no group")
	wantCode(t, err, codes.PermissionDenied, policy.RuleNotInApprovalGroup)
	list, err = e.gws[0].ListApprovalsAs(ctx, "mallory", opsToken, &toolgatev1.ListApprovalsRequest{State: "pending"})
	if err != nil || len(list.GetApprovals()) != 1 || list.GetApprovals()[0].GetApprovalId() != apr {
		t.Fatalf("with the token's group: %v, %v; want %s listed", list.GetApprovals(), err, apr)
	}
	a, err := e.gws[0].DecideApprovalAs(ctx, "mallory", opsToken, apr, "approve", "ops by token")
	if err != nil || a.GetState() != "approved" || a.GetDecidedBy() != "mallory" {
		t.Fatalf("with the token's group: %v, %v", a, err)
	}
	if resp := e.mustRun("alice", "token-1", nil); !resp.GetOk() || e.driver.runs.Load() != 1 {
		t.Fatalf("after the approval: %v, %d runs", resp, e.driver.runs.Load())
	}
}
