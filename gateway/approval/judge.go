package approval

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval/approvaluse"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Judge turns the decision of an attempt after an approval into what the
// approval makes of it, and the approval as the record names it. now is
// the decision's time: an approval counts only before it expires.
func Judge(h *Held, d policy.Decision, now time.Time) (policy.Decision, *evidence.DecisionApproval) {
	a := h.Request
	if h.Final() || !now.Before(a.ExpiresAt) {
		outcome, reason := h.Verdict.Decision, h.Verdict.Reason
		switch {
		case h.UsedElsewhere():
			outcome = evidence.ApprovalUsed
			reason = fmt.Sprintf("approval %s was used by request %s, the same call under another request_id",
				a.ApprovalID, h.Use.UsedBy)
		case !h.Final():
			outcome = evidence.ApprovalExpired
			reason = fmt.Sprintf("approval %s was granted, but not used before it expired at %s",
				a.ApprovalID, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return policy.Decision{RuleID: a.RuleID, Reason: reason, PolicyRef: a.PolicyRef, PolicySetDigest: a.PolicySetDigest},
			h.Link(outcome)
	}
	link := h.Link(evidence.ApprovalApprove)
	link.PolicySetChanged = d.PolicySetDigest != a.PolicySetDigest
	switch {
	case d.ApprovalRequired && d.RuleID == a.RuleID:
		d.Allow, d.ApprovalRequired = true, false
		if link.RequestID != "" {
			d.Reason = fmt.Sprintf("%s (approval %s, granted for request %s)", d.Reason, a.ApprovalID, a.RequestID)
		}
	case d.ApprovalRequired:
		d = policy.Decision{
			RuleID: RuleStale, PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest,
			Reason: fmt.Sprintf("approval %s was granted under rule %s; policy now requires the approval of rule %s; "+
				"use a new request_id", a.ApprovalID, a.RuleID, d.RuleID),
		}
	}
	return d, link
}

// GuestRerun is the decision of a parent run again after its guest's
// call, request guest, was approved: d, unless policy now holds the
// parent itself for approval. A request waits for one approval at most,
// so that parent ends denied, as an approved call whose rule changed does.
func GuestRerun(d policy.Decision, guest string) policy.Decision {
	if !d.ApprovalRequired {
		return d
	}
	return policy.Decision{
		RuleID: RuleStale, PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest,
		Reason: fmt.Sprintf("the guest's call %s was approved, but policy now requires the approval of rule %s for the call "+
			"that runs the guest; use a new request_id", guest, d.RuleID),
	}
}

// Reply is what a pending reply names besides the approval: the call's
// engine and its run and step.
type Reply struct {
	EngineRef, RunID, StepID string
}

// PendingReply is the answer to a call held for approval: not run, in
// words every client of the contract reads as such (ok false, decision
// deny, no tool_result), with the approval in pending_approval. It is
// built from A and the stored keys in sorted order only, so every retry
// while pending gets the same reply.
func PendingReply(r Reply, a evidence.ApprovalRequestRecord, keys []string) *toolgatev1.RunToolResponse {
	refs := slices.Clone(keys)
	slices.Sort(refs)
	expires := a.ExpiresAt.UTC()
	return &toolgatev1.RunToolResponse{
		PolicyCheck: &toolgatev1.PolicyCheck{
			Decision: policy.WordDeny, RuleId: a.RuleID,
			Reason: fmt.Sprintf("approval required (approval %s, expires %s): %s", a.ApprovalID, expires.Format(time.RFC3339), a.Reason),
		},
		EvidenceRefs: refs,
		EngineRef:    r.EngineRef,
		RunId:        r.RunID,
		StepId:       r.StepID,
		PendingApproval: &toolgatev1.PendingApproval{
			ApprovalId: a.ApprovalID, Reason: a.Reason, ExpiresAt: timestamppb.New(expires),
			RuleId: a.RuleID, Approvers: a.Approvers, RequestHash: a.CanonicalRequestHash,
		},
	}
}

// Borrow finds, for the call want held for approval, an approval asked
// for the identical call under another request id, approved and unused,
// and claims it for want's request (see package approvaluse). When there
// is none that it may use, wait is one still pending that it may wait on
// instead of asking for its own (approvaluse.Waitable), or nil: it asks
// for its own.
func (r Records) Borrow(ctx context.Context, want approvaluse.Call, log *slog.Logger) (use, wait *Held) {
	ids, err := r.Ledger().Candidates(ctx, want.Hash, want.RequestID)
	if err != nil {
		log.Warn("the approvals of this call cannot be looked up; asking for a new one", "err", err)
		return nil, nil
	}
	for _, id := range ids {
		v, err := r.Load(ctx, id)
		if err != nil {
			continue // unreadable for now, or tampered with (which is reported)
		}
		h := v.Held
		a := approvaluse.Approval{Request: h.Request, Verdict: h.Verdict, Use: h.Use}
		if wait == nil && !v.Finished() && approvaluse.Waitable(a, want, r.Now()) == nil {
			wait = h
			continue
		}
		if mine := h.Use != nil && h.Use.UsedBy == want.RequestID; !mine && (v.Consumed || v.Finished()) {
			continue // used by its own request, or ended
		}
		h.User = want.RequestID
		if approvaluse.Usable(a, want, r.Now()) != nil {
			continue
		}
		if err := r.Claim(ctx, h); err != nil {
			log.Warn("an approval of this call could not be claimed", "approval_id", h.Request.ApprovalID, "err", err)
			continue
		}
		if h.UsedElsewhere() {
			continue // another call claimed it first
		}
		log.Info("using the approval of the same call under another request_id",
			"approval_id", h.Request.ApprovalID, "granted_for", id)
		return h, nil
	}
	return nil, wait
}
