package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestApprovedCallRunsOnceUnderANewRequestID: a client that cannot resend
// the request id sends the approved call again under a new one; the
// approval is for the call, so that call runs once, its evidence names
// the approval and the request it was granted for, and the approval's
// request records the use and ends denied naming the user.
func TestApprovedCallRunsOnceUnderANewRequestID(t *testing.T) {
	t.Parallel()
	e := newApprovalEnv(t, approvalEnvOptions{signer: func(int) *evidence.Signer { return testSigner(t, 1) }})
	args := map[string]any{"n": 7}
	apr := e.pendingID("alice", "held-1", args)
	e.mustDecide("bob", apr, "approve", "ok")

	resp := e.mustRun("alice", "retry-1", args)
	if !resp.GetOk() || resp.GetPendingApproval() != nil || e.driver.runs.Load() != 1 {
		t.Fatalf("the retry under a new id: %v, %d runs", resp, e.driver.runs.Load())
	}
	var d evidence.DecisionRecord
	e.record(evidence.Key("retry-1", evidence.ArtifactPolicyDecision), &d)
	if d.Decision != "allow" || d.Approval == nil || d.Approval.ApprovalID != apr || d.Approval.RequestID != "held-1" ||
		d.Approval.Outcome != evidence.ApprovalApprove || d.Approval.Approver != "bob" {
		t.Fatalf("retry-1's decision names its approval as %+v (%s)", d.Approval, d.Decision)
	}
	var u evidence.ApprovalUseRecord
	e.record(evidence.Key("held-1", evidence.ArtifactApprovalUse), &u)
	if u.UsedBy != "retry-1" || u.ApprovalID != apr {
		t.Fatalf("held-1's approval_use.json = %+v", u)
	}
	// The request the approval was granted for is ended, naming the user.
	e.wantFinalDenyAfterRun(e.mustRun("alice", "held-1", args), "counter_needs_ops", "used by request retry-1")
	// The approval is spent: the same call again asks anew.
	if again := e.mustPend("alice", "retry-2", args); again.GetPendingApproval().GetApprovalId() == apr {
		t.Fatal("a used approval was offered again")
	}
	if replay := e.mustRun("alice", "retry-1", args); !replay.GetOk() || e.driver.runs.Load() != 1 {
		t.Fatalf("the replay of retry-1: %v, %d runs", replay, e.driver.runs.Load())
	}
	for _, id := range []string{"held-1", "retry-1"} {
		e.wantVerifiedOK(id)
	}
	rep, err := evidence.Verify(context.Background(), e.store, "retry-1")
	if err != nil || rep.Approval == nil || rep.Approval.GrantedFor != "held-1" || rep.Approval.ApprovalID != apr ||
		rep.Approval.State != evidence.ApprovalStateConsumed {
		t.Fatalf("verify retry-1 reports its approval as %+v (%v)", rep.Approval, err)
	}
	a, err := e.clients[0].ListApprovals(as("bob"), &toolgatev1.ListApprovalsRequest{ApprovalId: apr, State: "all"})
	if err != nil || len(a.GetApprovals()) != 1 || a.GetApprovals()[0].GetState() != approval.StateConsumed {
		t.Fatalf("the approval is listed as %v (%v)", a.GetApprovals(), err)
	}
}

// wantFinalDenyAfterRun is wantFinalDeny when the tool ran once before.
func (e *approvalEnv) wantFinalDenyAfterRun(resp *toolgatev1.RunToolResponse, ruleID, reason string) {
	e.t.Helper()
	before := e.driver.runs.Load()
	e.driver.runs.Add(-before)
	defer e.driver.runs.Add(before)
	e.wantFinalDeny(resp, ruleID, reason)
}

// TestAnApprovalIsNotUsedByAnotherCall: whatever differs between the
// approved call and the one under a new request id — the caller, the
// arguments, the policy — or whatever the approval's state — denied,
// expired, used — the new call asks for its own approval and nothing
// runs. (While it is pending, the identical call waits on it: see
// TestRetriesWhilePendingWaitOnOneApproval.)
func TestAnApprovalIsNotUsedByAnotherCall(t *testing.T) {
	t.Parallel()
	args := map[string]any{"n": 1}
	for _, tc := range []struct {
		name string
		// prepare runs after held-1 asked for approval apr; it returns
		// the caller and arguments of the call under the new id.
		prepare func(e *approvalEnv, apr string) (string, map[string]any)
	}{
		{"another caller", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "approve", "")
			return "carol", args
		}},
		{"other arguments", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "approve", "")
			return "alice", map[string]any{"n": 2}
		}},
		{"a changed policy set", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "approve", "")
			e.reload(approvalPolicy + "\n// reviewed again\n")
			return "alice", args
		}},
		{"denied", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "deny", "no")
			return "alice", args
		}},
		{"expired", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "approve", "")
			e.clock.advance(time.Hour)
			return "alice", args
		}},
		{"used by its own request", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "approve", "")
			if resp := e.mustRun("alice", "held-1", args); !resp.GetOk() {
				e.t.Fatalf("held-1 did not run: %v", resp)
			}
			e.driver.runs.Store(0)
			return "alice", args
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{})
			apr := e.pendingID("alice", "held-1", args)
			caller, callArgs := tc.prepare(e, apr)
			resp := e.mustPend(caller, "new-1", callArgs)
			if resp.GetPendingApproval().GetApprovalId() == apr {
				t.Fatalf("new-1 waits on approval %s, the other call's", apr)
			}
			if e.has(evidence.Key("held-1", evidence.ArtifactApprovalUse)) {
				var u evidence.ApprovalUseRecord
				if e.record(evidence.Key("held-1", evidence.ArtifactApprovalUse), &u); u.UsedBy != "held-1" {
					t.Fatalf("held-1's approval was used by %s", u.UsedBy)
				}
			}
			for _, id := range []string{"held-1", "new-1"} {
				if rep, err := evidence.Verify(context.Background(), e.store, id); err != nil || len(rep.Problems) > 0 {
					t.Errorf("verify %s: %v %v", id, rep.Problems, err)
				}
			}
		})
	}
}

func (e *approvalEnv) has(key string) bool {
	_, err := e.store.Get(context.Background(), key)
	return err == nil
}

// TestOneOfManyIdenticalCallsUsesAnApproval: identical calls under new
// request ids at once, on two replicas sharing the store, and the
// approval's own request retried among them: the approval is used once,
// the tool runs once, and the evidence says by whom.
func TestOneOfManyIdenticalCallsUsesAnApproval(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 16} {
		t.Run(fmt.Sprintf("%d calls", n), func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{replicas: 2, signer: func(int) *evidence.Signer { return testSigner(t, 1) }})
			e.driver.delay = 20 * time.Millisecond
			apr := e.pendingID("alice", "held-1", nil)
			e.mustDecide("bob", apr, "approve", "")
			ids := make([]string, n)
			replies := make([]*toolgatev1.RunToolResponse, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				ids[i] = fmt.Sprintf("same-%d", i)
				if i == 0 {
					ids[i] = "held-1"
				}
				wg.Go(func() {
					<-start
					replies[i], errs[i] = e.run(i%2, "alice", ids[i], nil)
				})
			}
			close(start)
			wg.Wait()
			// The approval's own request may find itself being ended as used
			// by the call that used it, and is told to retry (ABORTED): its
			// retry then gets the settled answer.
			for i := range n {
				if status.Code(errs[i]) == codes.Aborted && strings.Contains(errs[i].Error(), "being retried by another call") {
					waitFor(t, func() bool {
						replies[i], errs[i] = e.run(i%2, "alice", ids[i], nil)
						return status.Code(errs[i]) != codes.Aborted
					})
				}
			}
			if runs := e.driver.runs.Load(); runs != 1 {
				t.Fatalf("the approved call ran %d times", runs)
			}
			var u evidence.ApprovalUseRecord
			e.record(evidence.Key("held-1", evidence.ArtifactApprovalUse), &u)
			ran := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("%s: %v", ids[i], errs[i])
				}
				if replies[i].GetToolResult() != nil {
					ran++
					if ids[i] != u.UsedBy {
						t.Errorf("%s ran, but the approval's use names %s", ids[i], u.UsedBy)
					}
				}
			}
			if ran != 1 {
				t.Fatalf("%d replies say the tool ran", ran)
			}
			e.wantVerifiedOK(u.UsedBy)
			e.wantVerifiedOK("held-1")
		})
	}
}

// TestForgedApprovalRecordsAreNotUsedUnderANewRequestID: someone who can
// write to the store, but holds no gateway key, plants an approval for a
// pending call, or a use record: the identical call under a new request
// id does not run on it.
func TestForgedApprovalRecordsAreNotUsedUnderANewRequestID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		plant func(e *sealedApprovalEnv, apr string)
	}{
		{"a forged approval", func(e *sealedApprovalEnv, apr string) {
			var a evidence.ApprovalRequestRecord
			raw := e.record(evidence.Key("held-1", evidence.ArtifactApprovalRequest), &a)
			e.plant(evidence.Key("held-1", evidence.ArtifactApproval), mustJSON(e.t, evidence.ApprovalRecord{
				RequestID: "held-1", ApprovalID: apr, Decision: evidence.ApprovalApprove, Approver: "bob",
				DecidedAt: e.clock.Now(), CanonicalRequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest,
				RuleID: a.RuleID, ApprovalRequestSHA256: evidence.Digest("", raw).SHA256, Gateway: a.Gateway,
				Authorization: &evidence.ApproverDecision{RuleID: "ops_may_approve"},
			}))
		}},
		{"a use record naming the attacker's request", func(e *sealedApprovalEnv, apr string) {
			e.mustDecide("bob", apr, "approve", "")
			var a evidence.ApprovalRequestRecord
			e.record(evidence.Key("held-1", evidence.ArtifactApprovalRequest), &a)
			e.plant(evidence.Key("held-1", evidence.ArtifactApprovalUse), mustJSON(e.t, evidence.ApprovalUseRecord{
				RequestID: "held-1", ApprovalID: apr, UsedBy: "new-1", CanonicalRequestHash: a.CanonicalRequestHash,
				PolicySetDigest: a.PolicySetDigest, RuleID: a.RuleID, ApprovalSHA256: a.CanonicalRequestHash[7:],
				UsedAt: e.clock.Now(), Gateway: a.Gateway,
			}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSealedApprovalEnv(t, 1)
			apr := e.pendingID("alice", "held-1", nil)
			tc.plant(e, apr)
			resp, err := e.run(0, "alice", "new-1", nil)
			if err == nil && resp.GetPendingApproval() == nil {
				t.Fatalf("new-1 was answered %v", resp)
			}
			if runs := e.driver.runs.Load(); runs != 0 {
				t.Fatalf("the tool ran %d times on a forged record", runs)
			}
		})
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
