package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// A guest's call that needs approval: the guest is answered at once, with
// tool_error naming the approval, and its parent is not held open for a
// human. When the parent's run can be shown to have had no effect (its
// driver is drivers.Sealed and no nested call of the run was dispatched),
// the run is discarded, and the parent is recorded as waiting for the
// guest's approval and closed not dispatched. A retry of the parent after
// the approval runs its guest again; the call of the new run that is the
// approved call (by canonical hash: a runner's call ids are new on every
// run) uses the approved request, so it runs once. Otherwise the parent
// completes with what its guest made of the refusal.

// begin starts a call: it returns the call that waits for approval when
// there is one, and the call must not be made; otherwise the call counts
// as in flight until end.
func (n *nestedCaller) begin() *guestWait {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.waiting != nil {
		return n.waiting
	}
	n.inFlight++
	return nil
}

// end ends a call begun.
func (n *nestedCaller) end() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inFlight--
}

// block notes why the run may no longer be paused, unless it already
// cannot be.
func (n *nestedCaller) block(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.blocked == "" {
		n.blocked = fmt.Sprintf(format, args...)
	}
}

// await notes that call id of tool waits for approval pa and returns what
// the guest is told. The first such call stops the run's calls; the run
// is paused if nothing stands in the way now, and nothing can later: no
// other call is in flight, and no new one starts.
func (n *nestedCaller) await(id, toolID string, pa *toolgatev1.PendingApproval) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	asked := fmt.Sprintf("tool %s needs approval %s (rule %s: %s); nothing ran; ",
		toolID, pa.GetApprovalId(), pa.GetRuleId(), pa.GetReason())
	parent := n.parent.RequestID
	switch {
	case n.waiting != nil:
		return asked + fmt.Sprintf("the parent request %s cannot wait for it: it already waits for approval %s of guest call %s",
			parent, n.waiting.approval.GetApprovalId(), n.waiting.requestID)
	case n.cannotWait == "" && n.blocked == "" && n.inFlight > 1:
		n.blocked = "another guest call was in flight when guest call " + id + " had to wait for approval"
	}
	n.waiting = &guestWait{requestID: id, toolID: toolID, approval: pa}
	why := n.cannotWait
	if why == "" {
		why = n.blocked
	}
	if why != "" {
		return asked + fmt.Sprintf("the parent request %s cannot wait for it: %s", parent, why)
	}
	n.waiting.paused = true
	return asked + fmt.Sprintf("the parent request %s is paused: retry %s with the same request_id once it is approved", parent, parent)
}

// pausedFor returns the call the run is paused for, or nil when the run
// is not paused and completes as usual.
func (n *nestedCaller) pausedFor() *guestWait {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.waiting == nil || !n.waiting.paused || n.blocked != "" {
		return nil
	}
	return n.waiting
}

// useApproved returns the approved request id for the first call of the
// run that is the approved call, by its canonical hash, and "" for any
// other call.
func (n *nestedCaller) useApproved(ctx context.Context, c call) string {
	if n.approved == nil {
		return ""
	}
	n.mu.Lock()
	used := n.approvedUsed
	n.mu.Unlock()
	if used {
		return ""
	}
	p, err := n.g.prepare(ctx, n.caller, c)
	if err != nil || p.hash != n.approved.hash {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.approvedUsed {
		return ""
	}
	n.approvedUsed = true
	return n.approved.requestID
}

// whyCannotWait says why a run of p may not be paused for a guest's call
// that needs approval, or "" when it may: only a sealed run can be shown to
// have had no effect, and a parent waits for one approval at most (it has
// one approval_request.json).
func (g *Gateway) whyCannotWait(p *prepared) string {
	if s, ok := g.drivers[p.tool.Driver].(drivers.Sealed); !ok || !s.Sealed() {
		return fmt.Sprintf("its driver %s is not sealed, so its run may have had effects of its own", p.tool.Driver)
	}
	if p.held != nil || p.guestCall != nil {
		return "it already runs after an approval"
	}
	return ""
}

// pauseForGuest records a dispatched parent whose run had no effect as
// waiting for the approval of its guest's call w, and answers the pending
// reply: approval_request.json naming the nested request and its approval
// (create-only, straight to the store), then the attempt closed not
// dispatched after its own dispatch marker. In that order: a parent closed
// without it would, on a retry, run its guest again with nothing to match
// the approved call to.
func (g *Gateway) pauseForGuest(ctx context.Context, p *prepared, rec *recorder, w *guestWait, log *slog.Logger) (*toolgatev1.RunToolResponse, error) {
	id, approvalID := p.c.RequestID, w.approval.GetApprovalId()
	log = log.With("nested_request_id", w.requestID, "approval_id", approvalID)
	nested, err := g.approvals().Read(ctx, w.requestID, nil)
	if err == nil && nested.Request.ApprovalID != approvalID {
		err = fmt.Errorf("%s of %s names approval %s", evidence.ArtifactApprovalRequest, w.requestID, nested.Request.ApprovalID)
	}
	var stored evidence.ApprovalRequestRecord
	if err == nil {
		stored, err = g.storeApprovalRequest(ctx, rec, parentApprovalRequest(p, rec.attempt, nested.Request, g.engineBase))
	}
	if err != nil {
		// Nothing the run did had an effect, so it may run again.
		log.Error("could not record the wait for a guest's approval; the run is discarded", "err", err)
		rec.closeAttempt(ctx, fmt.Sprintf("rerun allowed: guest call %s awaits approval %s, which could not be recorded: %v",
			w.requestID, approvalID, err))
		return nil, rec.failure(approval.Code(err), "guest call %s of request_id %q needs approval %s, which could not be recorded; "+
			"nothing the guest asked for ran (retry with the same request_id): %v", w.requestID, id, approvalID, err)
	}
	reason := fmt.Sprintf("rerun allowed: guest call %s awaits approval %s; no nested call was dispatched", w.requestID, approvalID)
	if err := rec.closeAttempt(ctx, reason); err != nil {
		return nil, rec.failure(codes.Unavailable, "request_id %q waits for approval %s of its guest call %s, but its record "+
			"could not be completed; nothing the guest asked for ran (retry with the same request_id): %v", id, approvalID, w.requestID, err)
	}
	log.Info("paused until a guest's call is approved", "rule_id", stored.RuleID)
	return guestPendingReply(p, stored, nested.Request.CanonicalRequestHash, rec.refs), nil
}

// parentApprovalRequest is the approval_request.json of a parent, attempt
// n of p, that waits for the approval its guest's call asked for (nested):
// the parent's own call and hash, the nested approval's id, rule,
// approvers and times.
func parentApprovalRequest(p *prepared, n int, nested evidence.ApprovalRequestRecord, gateway string) evidence.ApprovalRequestRecord {
	return evidence.ApprovalRequestRecord{
		RequestID: p.c.RequestID, ApprovalID: nested.ApprovalID, Attempt: n, Caller: p.caller, Action: p.c.action(),
		ToolID: p.c.ToolID, Driver: p.tool.Driver, CanonicalRequestHash: p.hash,
		PolicyRef: nested.PolicyRef, PolicySetDigest: nested.PolicySetDigest,
		RuleID: nested.RuleID, Reason: nested.Reason, Approvers: nested.Approvers,
		RequestedAt: nested.RequestedAt, ExpiresAt: nested.ExpiresAt,
		NestedRequestID: nested.RequestID, Gateway: gateway,
	}
}

// guestPendingReply is the pending reply of a parent waiting for its
// guest's approval: the parent's, bound (request_hash) to the guest's call
// that the approval is for.
func guestPendingReply(p *prepared, a evidence.ApprovalRequestRecord, nestedHash string, keys []string) *toolgatev1.RunToolResponse {
	resp := pendingReply(p, a, keys)
	resp.PendingApproval.RequestHash = nestedHash
	return resp
}

// guestApprovalGate answers a retry of a parent that waits, as h says, for
// the approval of its guest's call, the nested request's: the same pending
// reply while that waits; once it is approved, the next attempt, whose
// guest may make the approved call once; once it is denied or has expired,
// the next attempt ends the parent denied by the approval's rule, for the
// approver's reason.
func (g *Gateway) guestApprovalGate(ctx context.Context, p *prepared, rec *recorder, h *approval.Held, keys []string, next int) (*toolgatev1.RunToolResponse, error) {
	nid := h.Request.NestedRequestID
	nested, err := g.readGuestApproval(ctx, p.c.RequestID, h)
	if err != nil {
		return nil, guestApprovalUnreadable(rec, p.c.RequestID, nid, err)
	}
	now := g.now()
	if nested.Verdict == nil {
		if now.Before(nested.Request.ExpiresAt) {
			return guestPendingReply(p, h.Request, nested.Request.CanonicalRequestHash, keys), nil
		}
		written, err := g.approvals().Expire(ctx, nested, now)
		if err != nil {
			return nil, expiryFailure(rec, nid, nested.Request.ApprovalID, err)
		}
		if written {
			g.approvals().Notify(ctx, approval.EventDecided, nid)
		}
	}
	if nested.Final() || !now.Before(nested.Request.ExpiresAt) {
		// The guest's call will never run: its request is ended too.
		p.held = nested
		g.finaliseHeld(ctx, nid)
	} else {
		p.guestCall = &approvedGuestCall{hash: nested.Request.CanonicalRequestHash, requestID: nid}
	}
	return g.nextAttempt(ctx, p, rec, keys, next)
}

// guestApprovalUnreadable is the failure of a parent whose guest's
// approval, nested request nid's, cannot be read: DATA_LOSS when a record
// failed authentication, UNAVAILABLE otherwise.
func guestApprovalUnreadable(rec *recorder, parent, nid string, err error) error {
	if errors.Is(err, trust.ErrTampered) {
		return rec.failure(codes.DataLoss, "the approval record that request_id %q waits for (of its guest call %s) failed "+
			"authentication (evidence tampering), nothing was executed: %v", parent, nid, err)
	}
	return rec.failure(codes.Unavailable, "the approval that request_id %q waits for (of its guest call %s) cannot be read, "+
		"nothing was executed: %v", parent, nid, err)
}

// readGuestApproval reads the approval of the nested request that parent
// waits for, as h names it, and checks that it is that approval, asked for
// by a guest of parent.
func (g *Gateway) readGuestApproval(ctx context.Context, parent string, h *approval.Held) (*approval.Held, error) {
	nid := h.Request.NestedRequestID
	keys, err := g.store.List(ctx, evidence.RequestPrefix(nid))
	if err != nil {
		return nil, err
	}
	nested, err := g.approvals().Read(ctx, nid, keys)
	if err != nil {
		return nil, err
	}
	if nested.Request.ApprovalID != h.Request.ApprovalID || nested.Request.ParentRequestID != parent {
		return nil, fmt.Errorf("%s of %s asks for approval %s for parent %q, not for approval %s of %s",
			evidence.ArtifactApprovalRequest, nid, nested.Request.ApprovalID, nested.Request.ParentRequestID, h.Request.ApprovalID, parent)
	}
	return nested, nil
}
