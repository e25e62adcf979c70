package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approvaluse"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// useLedger is the index and use records of approvals in the store,
// sealed and opened as the approvals' other records are.
func (g *Gateway) useLedger() approvaluse.Ledger {
	return approvaluse.Ledger{Store: g.store, Seal: g.signApproval, Open: g.openApproval}
}

// readUse reads approval_use.json into h, authenticated, and checks that
// it uses h's approval as decided.
func (g *Gateway) readUse(ctx context.Context, h *heldApproval) error {
	id := h.request.RequestID
	u, raw, err := g.useLedger().Read(ctx, id)
	switch {
	case err != nil:
		return err
	case u == nil:
		return nil
	case u.ApprovalID != h.request.ApprovalID || u.CanonicalRequestHash != h.request.CanonicalRequestHash ||
		h.verdict == nil || u.ApprovalSHA256 != h.verdictSHA256:
		return fmt.Errorf("%s of %s uses another approval than its request holds", evidence.ArtifactApprovalUse, id)
	}
	h.use, h.useRaw = u, raw
	return nil
}

// borrowApproval finds, for p held for approval by d, an approval asked
// for the identical call under another request id, approved and unused,
// and claims it for p (see package approvaluse). When there is none that
// p may use, wait is one still pending that p may wait on instead of
// asking for its own (approvaluse.Waitable), or nil: p asks for its own.
func (g *Gateway) borrowApproval(ctx context.Context, p *prepared, d policy.Decision, log *slog.Logger) (use, wait *heldApproval) {
	if p.c.ParentRequestID != "" {
		return nil, nil // a guest's call waits on its own approval
	}
	ledger := g.useLedger()
	ids, err := ledger.Candidates(ctx, p.hash, p.c.RequestID)
	if err != nil {
		log.Warn("the approvals of this call cannot be looked up; asking for a new one", "err", err)
		return nil, nil
	}
	want := approvaluse.Call{RequestID: p.c.RequestID, Caller: p.caller, ToolID: p.c.ToolID, Hash: p.hash,
		PolicySetDigest: d.PolicySetDigest, RuleID: d.RuleID}
	for _, id := range ids {
		v, err := g.loadApproval(ctx, id)
		if err != nil {
			continue // unreadable for now, or tampered with (which is reported)
		}
		h := v.h
		a := approvaluse.Approval{Request: h.request, Verdict: h.verdict, Use: h.use}
		if wait == nil && !v.finished() && approvaluse.Waitable(a, want, g.now()) == nil {
			wait = h
			continue
		}
		if mine := h.use != nil && h.use.UsedBy == p.c.RequestID; !mine && (v.consumed || v.finished()) {
			continue // used by its own request, or ended
		}
		h.user = p.c.RequestID
		if approvaluse.Usable(a, want, g.now()) != nil {
			continue
		}
		if err := g.claimUse(ctx, h); err != nil {
			log.Warn("an approval of this call could not be claimed", "approval_id", h.request.ApprovalID, "err", err)
			continue
		}
		if h.usedElsewhere() {
			continue // another call claimed it first
		}
		log.Info("using the approval of the same call under another request_id",
			"approval_id", h.request.ApprovalID, "granted_for", id)
		return h, nil
	}
	return nil, wait
}

// waitApproval records attempt n, held for approval by d, as waiting on
// w, the pending approval of the identical call under another request id,
// instead of asking approvers for one more: its decision names w's
// approval and request, and the attempt is closed not dispatched. The
// answer is w's own pending reply. Nothing runs; a retry decides anew.
func (g *Gateway) waitApproval(ctx, pre context.Context, p *prepared, rec *recorder, n int, d policy.Decision,
	shadow *evidence.ShadowDecision, w *heldApproval, log *slog.Logger) (*toolgatev1.RunToolResponse, error) {
	a := w.request
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

// claimUse claims h's approval for h.user, create-only, and leaves in
// h.use the use that stands: h.user's, or another request's.
func (g *Gateway) claimUse(ctx context.Context, h *heldApproval) error {
	a := h.request
	u, raw, err := g.useLedger().Claim(ctx, evidence.ApprovalUseRecord{
		RequestID: a.RequestID, ApprovalID: a.ApprovalID, UsedBy: h.user,
		CanonicalRequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest, RuleID: a.RuleID,
		ApprovalSHA256: h.verdictSHA256, UsedAt: g.now().UTC(), Gateway: g.engineBase,
	})
	if err != nil {
		return err
	}
	if u.ApprovalID != a.ApprovalID || u.ApprovalSHA256 != h.verdictSHA256 {
		return fmt.Errorf("%s of %s uses another approval than its request holds", evidence.ArtifactApprovalUse, a.RequestID)
	}
	h.use, h.useRaw = u, raw
	return nil
}

// noteUse adds the use record of p's own approval to what rec's manifest
// lists, when it is stored and not listed yet: the attempt that claimed
// it, or found it claimed by another request, ends the request.
func noteUse(rec *recorder, p *prepared) {
	h := p.held
	key := evidence.Key(p.c.RequestID, evidence.ArtifactApprovalUse)
	if h == nil || h.use == nil || h.request.RequestID != p.c.RequestID || slices.Contains(rec.refs, key) {
		return
	}
	rec.refs = append(rec.refs, key)
	rec.digests = append(rec.digests, evidence.Digest(key, h.useRaw))
}

// useHeld claims the approval an allowed attempt of p is about to use,
// when it is a top-level call's own: the same record another request of
// the call would claim, so that the approval is used once. It leaves
// in p.held's use the request that did (see heldApproval.usedElsewhere).
func (g *Gateway) useHeld(ctx context.Context, p *prepared) error {
	h := p.held
	if h.request.NestedRequestID != "" || h.request.ParentRequestID != "" || h.verdict == nil || p.guestCall != nil ||
		(h.use != nil && h.use.UsedBy == h.user) {
		return nil
	}
	return g.claimUse(ctx, h)
}

// endBorrowed ends, best effort, the request whose approval p used: it is
// denied, naming p's request, as a retry of it would be.
func (g *Gateway) endBorrowed(ctx context.Context, p *prepared) {
	if p.held == nil || p.held.user == p.held.request.RequestID {
		return
	}
	if !g.finaliseHeld(ctx, p.held.request.RequestID) {
		g.log.Info("the request whose approval was used elsewhere is left for its retry or the sweep to end",
			"request_id", p.held.request.RequestID)
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
		"(retry with the same request_id): %v", p.held.request.ApprovalID, err)
}
