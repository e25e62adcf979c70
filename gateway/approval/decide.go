package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Decision words of DecideApproval.
const (
	Approve = "approve"
	Deny    = "deny"
)

// Outcome is what Decide did.
type Outcome int

const (
	// Unchanged: the approval was decided already, or its request has
	// finished; nothing was written.
	Unchanged Outcome = iota
	// Decided: the caller's decision was written.
	Decided
	// Expired: the approval was past its expiry, which is now recorded
	// (or another decision that got there first was read back).
	Expired
)

// MayDecide asks policy whether the approver at hand may decide the
// approval v.
type MayDecide func(ctx context.Context, v *View) policy.Decision

// Decide approves or denies (decision is Approve or Deny), as caller, the
// call held back for approval id, when may allows it. The decision is
// written create-only, so that on every replica the first decision wins.
// It returns the approval as read and what was done; what follows a
// decision (ending a denied request, notifying) is the gateway's. Errors
// are gRPC statuses.
func (r Records) Decide(ctx context.Context, caller, id, decision, reason string, may MayDecide) (*View, Outcome, error) {
	v, err := r.ByID(ctx, id)
	if err != nil {
		return nil, Unchanged, err
	}
	d := may(ctx, v)
	if !d.Allow {
		return nil, Unchanged, status.Errorf(codes.PermissionDenied, "%s may not decide approval %s: %s: %s", caller, id, d.RuleID, d.Reason)
	}
	if v.Held.Verdict != nil || v.Finished() {
		return v, Unchanged, nil
	}
	now := r.Now()
	if !now.Before(v.Held.Request.ExpiresAt) {
		if _, err := r.Expire(ctx, v.Held, now); err != nil {
			return nil, Unchanged, DecideFailure(id, err)
		}
		return v, Expired, nil
	}
	written, err := r.WriteVerdict(ctx, v.Held, evidence.ApprovalRecord{
		Decision: verdictWord(decision), Approver: caller, Reason: reason, DecidedAt: now.UTC(),
		Authorization: &evidence.ApproverDecision{PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest, RuleID: d.RuleID, Reason: d.Reason},
	})
	if err != nil {
		return nil, Unchanged, DecideFailure(id, err)
	}
	if !written {
		return v, Unchanged, nil
	}
	return v, Decided, nil
}

// verdictWord is the record's word for a decision word.
func verdictWord(decision string) string {
	if decision == Deny {
		return evidence.ApprovalDeny
	}
	return evidence.ApprovalApprove
}

// Already answers a decision on an approval that was decided or whose
// request finished: the stored approval when caller decided it so
// already, FAILED_PRECONDITION otherwise.
func Already(v *View, caller, decision string) (*toolgatev1.Approval, error) {
	a := v.Proto()
	if vd := v.Held.Verdict; vd != nil && vd.Decision == verdictWord(decision) && vd.Approver == caller {
		return a, nil
	}
	msg := fmt.Sprintf("approval %s is %s", a.GetApprovalId(), a.GetState())
	switch {
	case v.Held.Verdict != nil && v.Held.Verdict.Decision != evidence.ApprovalExpired:
		msg += fmt.Sprintf(" (decided %s by %s)", v.Held.Verdict.Decision, v.Held.Verdict.Approver)
	case v.Finished():
		msg += " (its request has finished)"
	}
	st := status.New(codes.FailedPrecondition, msg)
	if withDetails, err := st.WithDetails(a); err == nil {
		st = withDetails
	}
	return nil, st.Err()
}

// ValidPageToken reports whether t is a page token List returns.
func ValidPageToken(t string) bool {
	return evidence.ValidApprovalID(strings.TrimPrefix(t, IndexRoot)) == nil
}

// List lists the approvals req selects that are in state want (or
// StateAll) and that shown lets the caller see, at most limit of them.
// Pages follow the index's key order; each page is sorted oldest first.
// An approval whose records fail authentication is left out (it is
// reported as tampering), or DATA_LOSS when req names it. req's filters
// are validated by the caller.
func (r Records) List(ctx context.Context, req *toolgatev1.ListApprovalsRequest, want string, limit int,
	shown func(context.Context, *View) bool) (*toolgatev1.ListApprovalsResponse, error) {
	resp := &toolgatev1.ListApprovalsResponse{}
	ids, err := r.listed(ctx, req)
	if err != nil {
		return nil, err
	}
	for i, e := range ids {
		if len(resp.Approvals) == limit {
			resp.NextPageToken = ids[i-1].key
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		v, err := r.listedApproval(ctx, e)
		switch {
		case errors.Is(err, evidence.ErrNotExist):
			continue // an index entry whose approval request was never written
		case errors.Is(err, trust.ErrTampered) && req.GetRequestId() == "":
			continue // reported as tampering; the others are still listed
		case err != nil:
			return nil, status.Errorf(Code(err), "approvals cannot be read: %v", err)
		}
		a := v.Held.Request
		if (e.approvalID != "" && a.ApprovalID != e.approvalID) || (req.GetApprovalId() != "" && a.ApprovalID != req.GetApprovalId()) ||
			(req.GetToolId() != "" && a.ToolID != req.GetToolId()) || (want != StateAll && v.State() != want) {
			continue
		}
		if !shown(ctx, v) {
			continue
		}
		resp.Approvals = append(resp.Approvals, v.Proto())
	}
	slices.SortStableFunc(resp.Approvals, func(x, y *toolgatev1.Approval) int {
		return x.GetRequestedAt().AsTime().Compare(y.GetRequestedAt().AsTime())
	})
	return resp, nil
}

// listedEntry is one approval List may show: its index key, the approval
// id the index names (when known) and its request (when known; else read
// from the index entry when it comes to be shown).
type listedEntry struct {
	key        string
	approvalID string
	requestID  string
}

// listed returns the approvals a ListApprovals request can show, in index
// key order after its page token. A request_id or approval_id filter
// names at most one, found without walking the index.
func (r Records) listed(ctx context.Context, req *toolgatev1.ListApprovalsRequest) ([]listedEntry, error) {
	if rid := req.GetRequestId(); rid != "" {
		if !ident.RequestID.MatchString(rid) {
			return nil, status.Errorf(codes.InvalidArgument, "request_id %q: must match %s", ident.Clip(rid), ident.RequestID)
		}
		return []listedEntry{{requestID: rid}}, nil
	}
	if id := req.GetApprovalId(); id != "" {
		v, err := r.ByID(ctx, id)
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []listedEntry{{key: IndexKey(id), approvalID: id, requestID: v.Held.Request.RequestID}}, nil
	}
	keys, err := r.Store.List(ctx, IndexRoot)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "evidence store unavailable: %v", err)
	}
	var out []listedEntry
	for _, key := range keys {
		id := strings.TrimPrefix(key, IndexRoot)
		if key <= req.GetPageToken() || evidence.ValidApprovalID(id) != nil {
			continue
		}
		out = append(out, listedEntry{key: key, approvalID: id})
	}
	return out, nil
}

// listedApproval reads the approval of one listed entry.
func (r Records) listedApproval(ctx context.Context, e listedEntry) (*View, error) {
	if e.requestID == "" {
		raw, err := r.Store.Get(ctx, e.key)
		if err != nil {
			return nil, err
		}
		if !ident.RequestID.Match(raw) {
			return nil, fmt.Errorf("index entry %s names no request: %w", e.key, evidence.ErrNotExist)
		}
		e.requestID = string(raw)
	}
	return r.Load(ctx, e.requestID)
}
