package gateway

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/recovery"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// askApproval records attempt n as held for a human's approval: its
// decision (approval_required, pending), the index entry and
// approval_request.json (both straight to the store: every replica must
// see them), and the attempt closed not dispatched. Nothing runs.
func (g *Gateway) askApproval(ctx, pre context.Context, p *prepared, rec *recorder, n int, d policy.Decision, shadow *evidence.ShadowDecision, log *slog.Logger) (*toolgatev1.RunToolResponse, error) {
	id := evidence.NewApprovalID()
	record := g.decisionRecord(p, n, d, shadow)
	record.Approval = &evidence.DecisionApproval{ApprovalID: id, Approvers: d.Approvers, Outcome: evidence.ApprovalPending}
	rec.policySetDigest = d.PolicySetDigest
	if err := g.putDecision(ctx, pre, p, rec, n, record, log); err != nil {
		return nil, err
	}
	a := evidence.ApprovalRequestRecord{
		RequestID: p.c.RequestID, ApprovalID: id, Attempt: n, Caller: p.caller, Action: p.c.action(),
		ToolID: p.c.ToolID, Driver: p.tool.Driver, ParentRequestID: p.c.ParentRequestID,
		CanonicalRequestHash: p.hash, PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest,
		RuleID: d.RuleID, Reason: d.Reason, Approvers: d.Approvers,
		RequestedAt: record.DecidedAt, ExpiresAt: record.DecidedAt.Add(g.approvalTTL), Gateway: g.engineBase,
	}
	stored, err := g.putApprovalRequest(pre, rec, a, p.c.ParentRequestID == "")
	if err != nil {
		log.Error("could not record the approval request; nothing ran", "err", err)
		rec.closeAttempt(ctx, "the approval request could not be recorded: "+err.Error())
		return nil, rec.failure(p.notRunCode(g.now()),
			"evidence store unavailable, nothing was executed (retry with the same request_id): %v", err)
	}
	g.recovery.WatchApproval(p.c.RequestID, stored.RequestedAt, stored.ExpiresAt)
	g.approvals().Notify(ctx, approval.EventPending, p.c.RequestID)
	reason := evidence.AwaitingApprovalReason(id)
	if err := rec.putDispatch(pre, evidence.NotDispatched, reason); err != nil {
		// The approval stands; the attempt must be closed before a retry
		// can answer pending. Try once more, else leave it to recovery.
		key, closeErr := g.closeAttempt(ctx, p.c.RequestID, n, false, rec.redact, reason)
		if closeErr != nil {
			log.Error("could not close an attempt held for approval; recovery will", "approval_id", id, "err", closeErr)
			g.recovery.LeftUnfinished(p.c.RequestID, recovery.Unfinished{})
			return nil, rec.failure(p.notRunCode(g.now()),
				"request_id %q awaits approval %s, but its record could not be completed; nothing was executed "+
					"(retry with the same request_id): %v", p.c.RequestID, id, err)
		}
		if key != "" {
			rec.refs = append(rec.refs, key)
		}
	}
	log.Info("held for approval", "rule_id", d.RuleID, "approval_id", id, "approvers", d.Approvers)
	return pendingReply(p, stored, rec.refs), nil
}

// putApprovalRequest writes the index entries, then A, all create-only and
// straight to the store, and returns A as stored (redacted), from which
// every pending reply is built. byCall also indexes A by the call's hash,
// for the identical call under another request id.
func (g *Gateway) putApprovalRequest(ctx context.Context, rec *recorder, a evidence.ApprovalRequestRecord, byCall bool) (evidence.ApprovalRequestRecord, error) {
	if err := g.approvals().Index(ctx, a, byCall); err != nil {
		return a, err
	}
	return g.storeApprovalRequest(ctx, rec, a)
}

// storeApprovalRequest writes A create-only, signed, and straight to the
// store, and returns it as stored (redacted).
func (g *Gateway) storeApprovalRequest(ctx context.Context, rec *recorder, a evidence.ApprovalRequestRecord) (evidence.ApprovalRequestRecord, error) {
	body, err := rec.redact(evidence.ArtifactApprovalRequest, a)
	if err != nil {
		return a, err
	}
	stored, key, data, err := g.approvals().StoreRequest(ctx, a, body)
	if err != nil {
		return a, err
	}
	rec.refs = append(rec.refs, key)
	rec.digests = append(rec.digests, evidence.Digest(key, data))
	return stored, nil
}

// pendingReply is p's answer while held for the approval A asks for
// (see approval.PendingReply).
func pendingReply(p *prepared, a evidence.ApprovalRequestRecord, keys []string) *toolgatev1.RunToolResponse {
	return approval.PendingReply(approval.Reply{EngineRef: p.engineRef, RunID: p.c.RunID, StepID: p.c.StepID}, a, keys)
}

// putDecision writes attempt n's policy_decision.json, the write-ahead
// record. A retry that loses the race for attempt n > 1 gets ABORTED;
// any other failure closes the attempt: nothing ran.
func (g *Gateway) putDecision(ctx, pre context.Context, p *prepared, rec *recorder, n int, record evidence.DecisionRecord, log *slog.Logger) error {
	err := rec.putSealed(pre, evidence.AttemptArtifact(n, evidence.ArtifactPolicyDecision), record)
	if n > 1 && errors.Is(err, evidence.ErrExist) {
		// Another retry opened this attempt first: it is the one that runs.
		return rec.failure(codes.Aborted,
			"request_id %q is being retried by another call right now; this one does not run it", p.c.RequestID)
	}
	if err != nil {
		log.Error("could not record the policy decision; nothing ran", "err", err)
		rec.closeAttempt(ctx, "the policy decision could not be recorded: "+err.Error())
		return rec.failure(p.notRunCode(g.now()),
			"evidence store unavailable, nothing was executed (retry with the same request_id): %v", err)
	}
	rec.decided = true
	return nil
}

// approvalGate answers a retry of a request whose last attempt was held
// for approval: the same pending reply while it waits (nothing written),
// or, once decided (or expired, which it records), the next attempt, which
// uses the approval or ends the request denied.
func (g *Gateway) approvalGate(ctx context.Context, p *prepared, rec *recorder, keys []string, next int) (*toolgatev1.RunToolResponse, error) {
	id := p.c.RequestID
	h, err := g.approvals().Read(ctx, id, keys)
	if err != nil {
		return nil, approvalUnreadable(rec, id, err)
	}
	if h.Request.CanonicalRequestHash != p.hash {
		return nil, rec.failure(codes.DataLoss, "the approval of request_id %q is bound to another request; "+
			"the evidence may have been altered (toolgate evidence verify checks it); nothing was executed", id)
	}
	if h.Request.NestedRequestID != "" {
		return g.guestApprovalGate(ctx, p, rec, h, keys, next)
	}
	now := g.now()
	if h.Verdict == nil {
		if now.Before(h.Request.ExpiresAt) {
			return pendingReply(p, h.Request, keys), nil
		}
		written, err := g.approvals().Expire(ctx, h, now)
		if err != nil {
			return nil, expiryFailure(rec, id, h.Request.ApprovalID, err)
		}
		if written {
			g.approvals().Notify(ctx, approval.EventDecided, id)
		}
		if keys, err = g.store.List(ctx, evidence.RequestPrefix(id)); err != nil {
			return nil, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
		}
	}
	p.held = h
	return g.nextAttempt(ctx, p, rec, keys, next)
}
