package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
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
var approvalKeys = []KeyConfig{
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
	events []ApprovalEvent
}

func (n *recordingNotifier) Notify(ev ApprovalEvent) {
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
	t         *testing.T
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
}

func newApprovalEnv(t *testing.T, o approvalEnvOptions) *approvalEnv {
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
	auth, err := NewAuthenticator(approvalKeys, func(name string) string {
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
		gw, err := New(Options{
			Decider: e.live, Store: store, Redactor: red, Auth: auth,
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
	return e.clients[i].RunTool(as(caller), &toolgatev1.RunToolRequest{RequestId: id, ToolId: "counting.run", Args: mustStruct(e.t, args)})
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
	e := newApprovalEnv(t, approvalEnvOptions{})
	args := map[string]any{"n": 1}
	first := e.mustPend("alice", "held-1", args)
	pa := first.GetPendingApproval()
	if !approvalIDPattern.MatchString(pa.GetApprovalId()) || pa.GetRuleId() != "counter_needs_ops" ||
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
