package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// ApprovalOptions tune the calls policy holds for a human's approval.
type ApprovalOptions struct {
	// TTL is how long an approval may be decided and used; 0 means
	// DefaultApprovalTTL.
	TTL time.Duration
	// Notifier, if set, is told of every approval asked for and decided.
	Notifier approval.Notifier
}

// DecideApproval implements the ToolGateway service.
func (g *Gateway) DecideApproval(ctx context.Context, req *toolgatev1.DecideApprovalRequest) (*toolgatev1.DecideApprovalResponse, error) {
	caller, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	a, err := g.DecideApprovalAs(ctx, caller, nil, req.GetApprovalId(), req.GetDecision(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &toolgatev1.DecideApprovalResponse{Approval: a}, nil
}

// ListApprovals implements the ToolGateway service.
func (g *Gateway) ListApprovals(ctx context.Context, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error) {
	caller, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return g.ListApprovalsAs(ctx, caller, nil, req)
}

// Decision words of DecideApproval.
const (
	decideApprove = "approve"
	decideDeny    = "deny"
)

// maxDecisionReason bounds an approver's reason.
const maxDecisionReason = 1024

// States of an approval, in Approval.state and ListApprovalsRequest.state.
const (
	statePending  = "pending"
	stateApproved = "approved"
	stateDenied   = "denied"
	stateExpired  = "expired"
	stateConsumed = "consumed"
	stateAll      = "all"
)

// errAnonymousApprovals refuses approvals to the anonymous caller: an
// approval names who gave it, and "anonymous" names nobody.
var errAnonymousApprovals = status.Error(codes.PermissionDenied, "approvals need an authenticated caller")

// DecideApprovalAs approves or denies, as caller, the call held back for
// approval id. identity, when a front door authenticated caller by a token
// (nil otherwise), adds its groups and roles to what Cedar sees of the
// approver. Policy decides whether caller may (Action::"Approve", with
// the held call's tool, requester and arguments as its evidence records
// them). The decision is written create-only, so that on every replica the
// first decision wins; the same caller repeating it gets it back. A deny
// ends the request denied at once (best effort: a retry or the expiry
// sweep ends it otherwise). Errors are gRPC statuses (see the
// DecideApproval RPC).
func (g *Gateway) DecideApprovalAs(ctx context.Context, caller string, identity *Identity, id, decision, reason string) (*toolgatev1.Approval, error) {
	if caller == AnonymousCaller || caller == "" {
		return nil, errAnonymousApprovals
	}
	if decision != decideApprove && decision != decideDeny {
		return nil, status.Errorf(codes.InvalidArgument, "decision %q: want %q or %q", truncateForMessage(decision), decideApprove, decideDeny)
	}
	if err := validatePrintable(reason, maxDecisionReason); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "reason: %v", err)
	}
	// The decision is evidence: it is completed even if the caller leaves.
	ctx = context.WithoutCancel(ctx)
	v, err := g.approvalByID(ctx, id)
	if err != nil {
		return nil, err
	}
	d := g.mayDecide(ctx, caller, identity, v)
	if !d.Allow {
		return nil, status.Errorf(codes.PermissionDenied, "%s may not decide approval %s: %s: %s", caller, id, d.RuleID, d.Reason)
	}
	if v.h.verdict != nil || v.finished() {
		return g.decidedAlready(v, caller, decision)
	}
	now := g.now()
	if !now.Before(v.h.request.ExpiresAt) {
		if _, err := g.expire(ctx, v.h, now); err != nil {
			return nil, decideFailure(id, err)
		}
		g.afterDecision(ctx, v)
		return g.decidedAlready(v, caller, decision)
	}
	word := evidence.ApprovalApprove
	if decision == decideDeny {
		word = evidence.ApprovalDeny
	}
	written, err := g.decideHeld(ctx, v.h, evidence.ApprovalRecord{
		Decision: word, Approver: caller, Reason: reason, DecidedAt: now.UTC(),
		Authorization: &evidence.ApproverDecision{PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest, RuleID: d.RuleID, Reason: d.Reason},
	})
	if err != nil {
		return nil, decideFailure(id, err)
	}
	if !written {
		return g.decidedAlready(v, caller, decision)
	}
	g.recovery.approvalDecided(v.h.request.RequestID)
	g.log.Info("approval decided", "approval_id", id, "request_id", v.h.request.RequestID, "approver", caller, "decision", word)
	return g.afterDecision(ctx, v).proto(), nil
}

// afterDecision ends the request of a denied or expired approval, tells
// the Notifier, and returns the approval as it now stands.
func (g *Gateway) afterDecision(ctx context.Context, v *approvalView) *approvalView {
	id := v.h.request.RequestID
	if v.h.final() && !g.finaliseHeld(ctx, id) {
		g.recovery.watchApproval(id, v.h.request.RequestedAt, time.Time{}) // the sweep ends it
	}
	g.notify(ctx, approval.EventDecided, id)
	if now, err := g.loadApproval(ctx, id); err == nil {
		return now
	}
	return v
}

// decidedAlready answers a decision on an approval that was decided or
// whose request finished: the stored approval when caller decided it so
// already, FAILED_PRECONDITION otherwise.
func (g *Gateway) decidedAlready(v *approvalView, caller, decision string) (*toolgatev1.Approval, error) {
	a := v.proto()
	word := evidence.ApprovalApprove
	if decision == decideDeny {
		word = evidence.ApprovalDeny
	}
	if vd := v.h.verdict; vd != nil && vd.Decision == word && vd.Approver == caller {
		return a, nil
	}
	msg := fmt.Sprintf("approval %s is %s", a.GetApprovalId(), a.GetState())
	switch {
	case v.h.verdict != nil && v.h.verdict.Decision != evidence.ApprovalExpired:
		msg += fmt.Sprintf(" (decided %s by %s)", v.h.verdict.Decision, v.h.verdict.Approver)
	case v.finished():
		msg += " (its request has finished)"
	}
	st := status.New(codes.FailedPrecondition, msg)
	if withDetails, err := st.WithDetails(a); err == nil {
		st = withDetails
	}
	return nil, st.Err()
}

// mayDecide asks policy whether caller, with identity's attributes, may
// decide the approval v.
func (g *Gateway) mayDecide(ctx context.Context, caller string, identity *Identity, v *approvalView) policy.Decision {
	a := v.h.request
	args, err := decodeArgs(v.req.Args)
	if err != nil {
		return policy.Decision{RuleID: policy.RulePolicyError, Reason: "the held call's arguments are unreadable: " + err.Error()}
	}
	tool, _ := g.lookupTool(a.ToolID)
	return g.decider.DecideApproval(ctx, policy.ApprovalRequest{
		Approver: caller, ApproverAttrs: g.callerAttrs(caller, identity),
		ToolID: a.ToolID, Driver: a.Driver, Tool: tool.attributes(),
		Requester: a.Caller, RequestID: a.RequestID, PolicyRef: a.PolicyRef, Group: a.Approvers, Args: args,
	})
}

// approvalByID finds approval id through the index and checks it against
// the request's own approval_request.json, the truth once authenticated:
// an index entry naming a request held under another approval id names
// nothing, and one naming a record that fails authentication is
// DATA_LOSS.
func (g *Gateway) approvalByID(ctx context.Context, id string) (*approvalView, error) {
	notFound := status.Errorf(codes.NotFound, "no approval %q", truncateForMessage(id))
	if evidence.ValidApprovalID(id) != nil {
		return nil, notFound
	}
	raw, err := g.store.Get(ctx, approvalIndexKey(id))
	switch {
	case errors.Is(err, evidence.ErrNotExist):
		return nil, notFound
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "evidence store unavailable: %v", err)
	case !requestIDPattern.Match(raw):
		return nil, notFound
	}
	v, err := g.loadApproval(ctx, string(raw))
	switch {
	case errors.Is(err, evidence.ErrNotExist) || (err == nil && v.h.request.ApprovalID != id):
		return nil, notFound
	case errors.Is(err, trust.ErrTampered):
		return nil, decideFailure(id, err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "approval %s cannot be read: %v", id, err)
	}
	return v, nil
}

// approvalView is an approval as the store holds it, with its request.
type approvalView struct {
	h    *heldApproval
	req  evidence.RequestRecord
	keys []string
	// consumed: an attempt after the approval was dispatched.
	consumed bool
	now      time.Time
}

// loadApproval reads the approval of request id. An error wraps
// evidence.ErrNotExist when the request holds no approval.
func (g *Gateway) loadApproval(ctx context.Context, id string) (*approvalView, error) {
	keys, err := g.store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return nil, err
	}
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest)) {
		return nil, fmt.Errorf("request %s holds no approval: %w", id, evidence.ErrNotExist)
	}
	v := &approvalView{keys: keys, now: g.now()}
	if v.h, err = g.readHeld(ctx, id, keys); err != nil {
		return nil, err
	}
	raw, err := g.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err != nil {
		return nil, err
	}
	if v.req, err = parseRequestRecord(raw); err != nil {
		return nil, fmt.Errorf("request.json of %s is unreadable: %w", id, err)
	}
	attempts, err := evidence.ReadAttempts(ctx, g.store, id, keys)
	if err != nil {
		return nil, err
	}
	for _, at := range attempts {
		v.consumed = v.consumed || (at.Number > v.h.request.Attempt && at.State == evidence.Dispatched)
	}
	return v, nil
}

// finished reports whether the approval's request has its final answer.
func (v *approvalView) finished() bool {
	id := v.h.request.RequestID
	return slices.Contains(v.keys, evidence.Key(id, evidence.ArtifactManifest)) ||
		slices.Contains(v.keys, evidence.Key(id, evidence.ArtifactResponse))
}

// state is the approval's state as ListApprovals shows it. An approval
// past its expiry counts as expired before V says so, and an approval
// whose request finished after it was granted as consumed.
func (v *approvalView) state() string {
	vd := v.h.verdict
	switch {
	case vd == nil && v.now.Before(v.h.request.ExpiresAt):
		return statePending
	case vd == nil || vd.Decision == evidence.ApprovalExpired:
		return stateExpired
	case vd.Decision == evidence.ApprovalDeny:
		return stateDenied
	case v.consumed || v.finished() || v.h.use != nil:
		return stateConsumed
	case !v.now.Before(v.h.request.ExpiresAt):
		return stateExpired
	}
	return stateApproved
}

// proto is v on the wire. The arguments are request.json's, redacted as
// the evidence records them.
func (v *approvalView) proto() *toolgatev1.Approval {
	a := v.h.request
	out := &toolgatev1.Approval{
		ApprovalId: a.ApprovalID, RequestId: a.RequestID, ToolId: a.ToolID, Requester: a.Caller,
		RuleId: a.RuleID, Reason: a.Reason, Approvers: a.Approvers, State: v.state(),
		RequestedAt: timestamppb.New(a.RequestedAt), ExpiresAt: timestamppb.New(a.ExpiresAt),
		RequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest, PolicyRef: a.PolicyRef,
		EvidenceRefs: slices.Clone(v.keys),
	}
	var args map[string]any
	if json.Unmarshal(v.req.Args, &args) == nil {
		if s, err := structpb.NewStruct(args); err == nil {
			out.Args = s
		}
	}
	if vd := v.h.verdict; vd != nil {
		out.DecidedBy, out.DecisionReason, out.DecidedAt = vd.Approver, vd.Reason, timestamppb.New(vd.DecidedAt)
	}
	return out
}

// ListApprovalsAs lists, as caller (with identity's attributes, as in
// DecideApprovalAs), the approvals req selects that caller
// may decide (policy decides each, as DecideApprovalAs would) or asked
// for: nobody else's held calls, whose arguments may be theirs to keep, are
// shown. Pages follow the index's key order; each page is sorted oldest
// first. An approval whose records fail authentication is left out (it is
// reported as tampering), or DATA_LOSS when req names it.
func (g *Gateway) ListApprovalsAs(ctx context.Context, caller string, identity *Identity, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error) {
	if caller == AnonymousCaller || caller == "" {
		return nil, errAnonymousApprovals
	}
	want, limit, err := listFilter(req)
	if err != nil {
		return nil, err
	}
	resp := &toolgatev1.ListApprovalsResponse{}
	ids, err := g.listedRequests(ctx, req)
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
		v, err := g.listedApproval(ctx, e)
		switch {
		case errors.Is(err, evidence.ErrNotExist):
			continue // an index entry whose approval request was never written
		case errors.Is(err, trust.ErrTampered) && req.GetRequestId() == "":
			continue // reported as tampering; the others are still listed
		case err != nil:
			return nil, status.Errorf(approvalCode(err), "approvals cannot be read: %v", err)
		}
		a := v.h.request
		if (e.approvalID != "" && a.ApprovalID != e.approvalID) || (req.GetApprovalId() != "" && a.ApprovalID != req.GetApprovalId()) ||
			(req.GetToolId() != "" && a.ToolID != req.GetToolId()) || (want != stateAll && v.state() != want) {
			continue
		}
		if a.Caller != caller && !g.mayDecide(ctx, caller, identity, v).Allow {
			continue
		}
		resp.Approvals = append(resp.Approvals, v.proto())
	}
	slices.SortStableFunc(resp.Approvals, func(x, y *toolgatev1.Approval) int {
		return x.GetRequestedAt().AsTime().Compare(y.GetRequestedAt().AsTime())
	})
	return resp, nil
}

// listedApproval reads the approval of one listed entry.
func (g *Gateway) listedApproval(ctx context.Context, e listedEntry) (*approvalView, error) {
	if e.requestID == "" {
		raw, err := g.store.Get(ctx, e.key)
		if err != nil {
			return nil, err
		}
		if !requestIDPattern.Match(raw) {
			return nil, fmt.Errorf("index entry %s names no request: %w", e.key, evidence.ErrNotExist)
		}
		e.requestID = string(raw)
	}
	return g.loadApproval(ctx, e.requestID)
}

// listFilter validates what a ListApprovals request asks for.
func listFilter(req *toolgatev1.ListApprovalsRequest) (state string, limit int, err error) {
	state = req.GetState()
	switch state {
	case "":
		state = statePending
	case statePending, stateApproved, stateDenied, stateExpired, stateConsumed, stateAll:
	default:
		return "", 0, status.Errorf(codes.InvalidArgument, "state %q: want pending, approved, denied, expired, consumed or all",
			truncateForMessage(state))
	}
	limit = int(req.GetLimit())
	switch {
	case limit < 0:
		return "", 0, status.Error(codes.InvalidArgument, "limit: must not be negative")
	case limit == 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		limit = maxListLimit
	}
	if t := req.GetPageToken(); t != "" && evidence.ValidApprovalID(strings.TrimPrefix(t, approvalsRoot)) != nil {
		return "", 0, status.Error(codes.InvalidArgument, "page_token: not a token ListApprovals returned")
	}
	if err := validatePrintable(req.GetToolId(), maxToolIDBytes); err != nil {
		return "", 0, status.Errorf(codes.InvalidArgument, "tool_id: %v", err)
	}
	return state, limit, nil
}

// listedEntry is one approval ListApprovals may show: its index key, the
// approval id the index names (when known) and its request (when known;
// else read from the index entry when it comes to be shown).
type listedEntry struct {
	key        string
	approvalID string
	requestID  string
}

// listedRequests returns the approvals a ListApprovals request can show,
// in index key order after its page token. A request_id or approval_id
// filter names at most one, found without walking the index.
func (g *Gateway) listedRequests(ctx context.Context, req *toolgatev1.ListApprovalsRequest) ([]listedEntry, error) {
	if rid := req.GetRequestId(); rid != "" {
		if !requestIDPattern.MatchString(rid) {
			return nil, status.Errorf(codes.InvalidArgument, "request_id %q: must match %s", truncateForMessage(rid), requestIDPattern)
		}
		return []listedEntry{{requestID: rid}}, nil
	}
	if id := req.GetApprovalId(); id != "" {
		v, err := g.approvalByID(ctx, id)
		if status.Code(err) == codes.NotFound {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []listedEntry{{key: approvalIndexKey(id), approvalID: id, requestID: v.h.request.RequestID}}, nil
	}
	keys, err := g.store.List(ctx, approvalsRoot)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "evidence store unavailable: %v", err)
	}
	var out []listedEntry
	for _, key := range keys {
		id := strings.TrimPrefix(key, approvalsRoot)
		if key <= req.GetPageToken() || evidence.ValidApprovalID(id) != nil {
			continue
		}
		out = append(out, listedEntry{key: key, approvalID: id})
	}
	return out, nil
}
