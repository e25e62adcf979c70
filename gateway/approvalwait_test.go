package gateway

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestRetriesWhilePendingWaitOnOneApproval: a client that cannot resend
// the request id retries a held call under a new id every few seconds
// while nobody has decided. Each retry waits on the approval the first
// call asked for — the same approval id, the same answer — so approvers
// see one approval, not one per retry; each retry's evidence names the
// approval and the request that asked for it. Once approved, the next
// retry runs the call once.
func TestRetriesWhilePendingWaitOnOneApproval(t *testing.T) {
	t.Parallel()
	const retries = 5
	e := newApprovalEnv(t, approvalEnvOptions{replicas: 2, signer: func(int) *evidence.Signer { return testSigner(t, 1) }})
	args := map[string]any{"n": 7}
	first := e.mustPend("alice", "held-1", args)
	apr := first.GetPendingApproval().GetApprovalId()
	for i := range retries {
		id := fmt.Sprintf("wait-%d", i)
		resp, err := e.run(i%2, "alice", id, args)
		if err != nil || resp.GetPendingApproval().GetApprovalId() != apr || resp.GetPolicyCheck().GetReason() != first.GetPolicyCheck().GetReason() {
			t.Fatalf("%s while %s is pending: %v (%v)", id, apr, resp, err)
		}
		var d evidence.DecisionRecord
		e.record(evidence.AttemptKey(id, 1, evidence.ArtifactPolicyDecision), &d)
		if a := d.Approval; d.Decision != evidence.DecisionApprovalRequired || a == nil || a.ApprovalID != apr ||
			a.RequestID != "held-1" || a.Outcome != evidence.ApprovalPending {
			t.Fatalf("%s's decision names the approval it waits on as %+v (%s)", id, a, d.Decision)
		}
		if e.has(evidence.Key(id, evidence.ArtifactApprovalRequest)) {
			t.Fatalf("%s asked for an approval of its own", id)
		}
	}
	// A retry of a waiting request under its own id waits too.
	if again := e.mustPend("alice", "wait-0", args); again.GetPendingApproval().GetApprovalId() != apr {
		t.Fatalf("wait-0 again: %v", again)
	}
	if n := e.driver.runs.Load(); n != 0 {
		t.Fatalf("the held call ran %d times while pending", n)
	}
	listed, err := e.clients[1].ListApprovals(as("bob"), &toolgatev1.ListApprovalsRequest{State: approval.StatePending})
	if err != nil || len(listed.GetApprovals()) != 1 || listed.GetApprovals()[0].GetApprovalId() != apr {
		t.Fatalf("approvers see %v (%v), want only %s", listed.GetApprovals(), err, apr)
	}
	for _, id := range []string{"held-1", "wait-0", "wait-1"} {
		wantVerifiedClean(t, e, id)
	}

	e.mustDecide("bob", apr, "approve", "ok")
	if resp := e.mustRun("alice", "retry-1", args); !resp.GetOk() || e.driver.runs.Load() != 1 {
		t.Fatalf("the retry after approval: %v, %d runs", resp, e.driver.runs.Load())
	}
	// The approval is spent: the next retry, and a waiting request's own
	// retry, ask anew; nothing runs again.
	if again := e.mustPend("alice", "retry-2", args); again.GetPendingApproval().GetApprovalId() == apr {
		t.Fatal("a used approval was waited on again")
	}
	if again := e.mustPend("alice", "wait-1", args); again.GetPendingApproval().GetApprovalId() == apr {
		t.Fatal("a waiting request waits on a used approval")
	}
	for _, id := range []string{"held-1", "retry-1", "wait-0", "wait-1", "retry-2"} {
		wantVerifiedClean(t, e, id)
	}
	rep, err := evidence.Verify(context.Background(), e.store, "wait-0")
	if err != nil || rep.Approval == nil || rep.Approval.ApprovalID != apr || rep.Approval.GrantedFor != "held-1" ||
		rep.Approval.UsedBy != "retry-1" || rep.Approval.State != evidence.ApprovalStateConsumed {
		t.Fatalf("verify wait-0 reports the approval it waited on as %+v (%v)", rep.Approval, err)
	}
}

// TestAWaitNeedsTheSameCallStillPending: a held call waits on another
// request's approval only when that approval is for the identical call,
// under the same policy set and rule, and is still open: otherwise it asks
// for its own.
func TestAWaitNeedsTheSameCallStillPending(t *testing.T) {
	t.Parallel()
	args := map[string]any{"n": 1}
	for _, tc := range []struct {
		name    string
		prepare func(e *approvalEnv, apr string) (string, map[string]any)
	}{
		{"another caller", func(e *approvalEnv, apr string) (string, map[string]any) { return "carol", args }},
		{"other arguments", func(e *approvalEnv, apr string) (string, map[string]any) {
			return "alice", map[string]any{"n": 2}
		}},
		{"a changed policy set", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.reload(approvalPolicy + "\n// reviewed again\n")
			return "alice", args
		}},
		{"expired", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.clock.advance(time.Hour)
			return "alice", args
		}},
		{"denied", func(e *approvalEnv, apr string) (string, map[string]any) {
			e.mustDecide("bob", apr, "deny", "no")
			return "alice", args
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApprovalEnv(t, approvalEnvOptions{})
			apr := e.pendingID("alice", "held-1", args)
			caller, callArgs := tc.prepare(e, apr)
			if resp := e.mustPend(caller, "new-1", callArgs); resp.GetPendingApproval().GetApprovalId() == apr {
				t.Fatalf("new-1 waits on approval %s, another call's or a closed one", apr)
			}
			for _, id := range []string{"held-1", "new-1"} {
				wantVerifiedClean(t, e, id)
			}
		})
	}
}

// TestAForgedPendingApprovalIsNotWaitedOn: the index from a call to its
// approvals is only a hint. A pending approval whose
// approval_request.json fails authentication is not waited on: the call
// asks for its own, and nothing runs.
func TestAForgedPendingApprovalIsNotWaitedOn(t *testing.T) {
	t.Parallel()
	e := newSealedApprovalEnv(t, 1)
	apr := e.pendingID("alice", "held-1", nil)
	askKey := evidence.Key("held-1", evidence.ArtifactApprovalRequest)
	body, _, _ := trust.Split(e.raw(askKey))
	e.plant(askKey, body)
	resp := e.mustPend("alice", "new-1", nil)
	if got := resp.GetPendingApproval().GetApprovalId(); got == "" || got == apr {
		t.Fatalf("new-1 waits on %q, the forged approval %s", got, apr)
	}
	if e.driver.runs.Load() != 0 {
		t.Fatal("the tool ran")
	}
}

// TestVerifyChecksTheApprovalAWaitNames: a request that waited on another
// request's approval verifies only while that approval's signed
// approval_request.json asks for the same call.
func TestVerifyChecksTheApprovalAWaitNames(t *testing.T) {
	t.Parallel()
	askKey := evidence.Key("held-1", evidence.ArtifactApprovalRequest)
	for _, tc := range []struct {
		name   string
		attack func(e *sealedApprovalEnv)
		want   string
	}{
		{"the approval request deleted", func(e *sealedApprovalEnv) {
			if err := os.Remove(filepath.Join(e.dir, filepath.FromSlash(askKey))); err != nil {
				t.Fatal(err)
			}
		}, "is missing"},
		{"the approval request unsigned", func(e *sealedApprovalEnv) {
			body, _, _ := trust.Split(e.raw(askKey))
			e.plant(askKey, body)
		}, "failed authentication"},
		{"another call's approval request in its place", func(e *sealedApprovalEnv) {
			e.pendingID("alice", "other", otherCall)
			other := e.raw(evidence.Key("other", evidence.ArtifactApprovalRequest))
			e.plant(askKey, other)
		}, "failed authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSealedApprovalEnv(t, 1)
			e.pendingID("alice", "held-1", nil)
			e.mustPend("alice", "wait-1", nil)
			keys := evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{testSigner(t, 1).PublicKey()}}
			if rep, err := evidence.Verify(context.Background(), e.store, "wait-1", keys); err != nil || len(rep.Problems) > 0 {
				t.Fatalf("verify wait-1 before the attack: %v %v", rep.Problems, err)
			}
			tc.attack(e)
			rep, err := evidence.Verify(context.Background(), e.store, "wait-1", keys)
			if err != nil || !strings.Contains(strings.Join(rep.Problems, "\n"), tc.want) {
				t.Fatalf("verify wait-1: %s %v (%v), want a problem saying %q", rep.Status, rep.Problems, err, tc.want)
			}
		})
	}
}

// wantVerifiedClean checks that evidence.Verify finds no problem with
// request id, whatever its status.
func wantVerifiedClean(t *testing.T, e *approvalEnv, id string) {
	t.Helper()
	rep, err := evidence.Verify(context.Background(), e.store, id)
	if err != nil || len(rep.Problems) > 0 {
		t.Errorf("verify %s: %s %v (%v)", id, rep.Status, rep.Problems, err)
	}
}
