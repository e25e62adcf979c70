package gateway

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/approval/approvaluse"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// borrowApproval finds, for p held for approval by d, an approval asked
// for the identical call under another request id to use, or a pending
// one to wait on (see approval.Records.Borrow). A guest's call waits on
// its own approval.
func (g *Gateway) borrowApproval(ctx context.Context, p *prepared, d policy.Decision, log *slog.Logger) (use, wait *approval.Held) {
	if p.c.ParentRequestID != "" {
		return nil, nil
	}
	return g.approvals().Borrow(ctx, approvaluse.Call{RequestID: p.c.RequestID, Caller: p.caller, ToolID: p.c.ToolID,
		Hash: p.hash, PolicySetDigest: d.PolicySetDigest, RuleID: d.RuleID}, log)
}

// waitApproval records attempt n, held for approval by d, as waiting on
// w, the pending approval of the identical call under another request id,
// instead of asking approvers for one more: its decision names w's
// approval and request, and the attempt is closed not dispatched. The
// answer is w's own pending reply. Nothing runs; a retry decides anew.
func (g *Gateway) waitApproval(ctx, pre context.Context, p *prepared, rec *recorder, n int, d policy.Decision,
	shadow *evidence.ShadowDecision, w *approval.Held, log *slog.Logger) (*toolgatev1.RunToolResponse, error) {
	a := w.Request
	record := g.decisionRecord(p, n, d, shadow)
	record.Approval = &evidence.DecisionApproval{ApprovalID: a.ApprovalID, Approvers: a.Approvers,
		Outcome: evidence.ApprovalPending, RequestID: a.RequestID}
	rec.policySetDigest = d.PolicySetDigest
	if err := g.putDecision(ctx, pre, p, rec, n, record, log); err != nil {
		return nil, err
	}
	reason := evidence.WaitingApprovalReason(a.ApprovalID, a.RequestID)
	if err := rec.putDispatch(pre, evidence.NotDispatched, reason); err != nil {
		if closeErr := rec.closeAttempt(ctx, reason); closeErr != nil {
			return nil, rec.failure(p.notRunCode(g.now()), "request_id %q waits on approval %s, but its record could not "+
				"be completed; nothing was executed (retry with the same request_id): %v", p.c.RequestID, a.ApprovalID, err)
		}
	}
	log.Info("held, waiting on the pending approval of the same call under another request_id",
		"rule_id", d.RuleID, "approval_id", a.ApprovalID, "asked_by", a.RequestID)
	return pendingReply(p, a, rec.refs), nil
}

// noteUse adds the use record of p's own approval to what rec's manifest
// lists, when it is stored and not listed yet: the attempt that claimed
// it, or found it claimed by another request, ends the request.
func noteUse(rec *recorder, p *prepared) {
	h := p.held
	key := evidence.Key(p.c.RequestID, evidence.ArtifactApprovalUse)
	if h == nil || h.Use == nil || h.Request.RequestID != p.c.RequestID || slices.Contains(rec.refs, key) {
		return
	}
	rec.refs = append(rec.refs, key)
	rec.digests = append(rec.digests, evidence.Digest(key, h.UseRaw))
}

// useHeld claims the approval an allowed attempt of p is about to use,
// when it is a top-level call's own: the same record another request of
// the call would claim, so that the approval is used once. It leaves
// in p.held's use the request that did (see heldApproval.usedElsewhere).
func (g *Gateway) useHeld(ctx context.Context, p *prepared) error {
	h := p.held
	if h.Request.NestedRequestID != "" || h.Request.ParentRequestID != "" || h.Verdict == nil || p.guestCall != nil ||
		(h.Use != nil && h.Use.UsedBy == h.User) {
		return nil
	}
	return g.approvals().Claim(ctx, h)
}

// endBorrowed ends, best effort, the request whose approval p used: it is
// denied, naming p's request, as a retry of it would be.
func (g *Gateway) endBorrowed(ctx context.Context, p *prepared) {
	if p.held == nil || p.held.User == p.held.Request.RequestID {
		return
	}
	if !g.finaliseHeld(ctx, p.held.Request.RequestID) {
		g.log.Info("the request whose approval was used elsewhere is left for its retry or the sweep to end",
			"request_id", p.held.Request.RequestID)
	}
}

// approvalUseFailure is the failure of an attempt whose approval's use
// could not be claimed: DATA_LOSS for a use record that failed
// authentication, else the store's trouble. Nothing was executed.
func approvalUseFailure(rec *recorder, p *prepared, now time.Time, err error) error {
	if errors.Is(err, trust.ErrTampered) {
		return approvalUnreadable(rec, p.c.RequestID, err)
	}
	return rec.failure(p.notRunCode(now), "the use of approval %s could not be recorded, nothing was executed "+
		"(retry with the same request_id): %v", p.held.Request.ApprovalID, err)
}
