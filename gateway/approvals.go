package gateway

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/approval/approvaluse"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// ApprovalOptions tune the calls policy holds for a human's approval.
type ApprovalOptions struct {
	// TTL is how long an approval may be decided and used; 0 means
	// config.DefaultApprovalTTL.
	TTL time.Duration
	// Notifier, if set, is told of every approval asked for and decided.
	Notifier approval.Notifier
}

// RuleApprovalStale is the rule id of a final deny when an approved call,
// retried after the policy set changed, now needs the approval of another
// rule than the one that was granted.
const RuleApprovalStale = approval.RuleStale

// approvalBook is what the gateway asks of the approvals' records in the
// store (package approval): it reads, decides, claims and lists them; the
// pipeline decides when.
type approvalBook interface {
	Read(ctx context.Context, requestID string, keys []string) (*approval.Held, error)
	Load(ctx context.Context, requestID string) (*approval.View, error)
	Expire(ctx context.Context, h *approval.Held, now time.Time) (written bool, err error)
	Claim(ctx context.Context, h *approval.Held) error
	Borrow(ctx context.Context, want approvaluse.Call, log *slog.Logger) (use, wait *approval.Held)
	Index(ctx context.Context, a evidence.ApprovalRequestRecord, byCall bool) error
	StoreRequest(ctx context.Context, a evidence.ApprovalRequestRecord, body []byte) (evidence.ApprovalRequestRecord, string, []byte, error)
	Decide(ctx context.Context, caller, id, decision, reason string, may approval.MayDecide) (*approval.View, approval.Outcome, error)
	List(ctx context.Context, req *toolgatev1.ListApprovalsRequest, state string, limit int,
		shown func(context.Context, *approval.View) bool) (*toolgatev1.ListApprovalsResponse, error)
	Notify(ctx context.Context, typ, requestID string)
}

// approvals is the approvals' records as the gateway stands now: its
// store, seal, clock and notifier (tests change some of them).
func (g *Gateway) approvals() approvalBook {
	return approval.Records{
		Store: g.store, Seal: g.signApproval, Open: g.openApproval,
		Redact:  func(s string) string { out, _ := g.redactor.String(s); return out },
		Gateway: g.engineBase, Now: g.now, Notifier: g.notifier, Log: g.log,
	}
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

// maxDecisionReason bounds an approver's reason.
const maxDecisionReason = 1024

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
	if decision != approval.Approve && decision != approval.Deny {
		return nil, status.Errorf(codes.InvalidArgument, "decision %q: want %q or %q", ident.Clip(decision), approval.Approve, approval.Deny)
	}
	if err := ident.ValidatePrintable(reason, maxDecisionReason); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "reason: %v", err)
	}
	// The decision is evidence: it is completed even if the caller leaves.
	ctx = context.WithoutCancel(ctx)
	may := func(ctx context.Context, v *approval.View) policy.Decision {
		return g.mayDecide(ctx, caller, identity, v)
	}
	v, outcome, err := g.approvals().Decide(ctx, caller, id, decision, reason, may)
	switch {
	case err != nil:
		return nil, err
	case outcome == approval.Expired:
		g.afterDecision(ctx, v)
		fallthrough
	case outcome == approval.Unchanged:
		return approval.Already(v, caller, decision)
	}
	g.recovery.ApprovalDecided(v.Held.Request.RequestID)
	g.log.Info("approval decided", "approval_id", id, "request_id", v.Held.Request.RequestID, "approver", caller,
		"decision", v.Held.Verdict.Decision)
	return g.afterDecision(ctx, v).Proto(), nil
}

// afterDecision ends the request of a denied or expired approval, tells
// the Notifier, and returns the approval as it now stands.
func (g *Gateway) afterDecision(ctx context.Context, v *approval.View) *approval.View {
	id := v.Held.Request.RequestID
	if v.Held.Final() && !g.finaliseHeld(ctx, id) {
		g.recovery.WatchApproval(id, v.Held.Request.RequestedAt, time.Time{}) // the sweep ends it
	}
	book := g.approvals()
	book.Notify(ctx, approval.EventDecided, id)
	if now, err := book.Load(ctx, id); err == nil {
		return now
	}
	return v
}

// mayDecide asks policy whether caller, with identity's attributes, may
// decide the approval v.
func (g *Gateway) mayDecide(ctx context.Context, caller string, identity *Identity, v *approval.View) policy.Decision {
	a := v.Held.Request
	args, err := decodeArgs(v.Call.Args)
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
	return g.approvals().List(ctx, req, want, limit, func(ctx context.Context, v *approval.View) bool {
		return v.Held.Request.Caller == caller || g.mayDecide(ctx, caller, identity, v).Allow
	})
}

// listFilter validates what a ListApprovals request asks for.
func listFilter(req *toolgatev1.ListApprovalsRequest) (state string, limit int, err error) {
	state = req.GetState()
	switch state {
	case "":
		state = approval.StatePending
	case approval.StatePending, approval.StateApproved, approval.StateDenied, approval.StateExpired,
		approval.StateConsumed, approval.StateAll:
	default:
		return "", 0, status.Errorf(codes.InvalidArgument, "state %q: want pending, approved, denied, expired, consumed or all",
			ident.Clip(state))
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
	if t := req.GetPageToken(); t != "" && !approval.ValidPageToken(t) {
		return "", 0, status.Error(codes.InvalidArgument, "page_token: not a token ListApprovals returned")
	}
	if err := ident.ValidatePrintable(req.GetToolId(), maxToolIDBytes); err != nil {
		return "", 0, status.Errorf(codes.InvalidArgument, "tool_id: %v", err)
	}
	return state, limit, nil
}

// storedPrepared rebuilds what a retry of request id would prepare, from
// its request.json, so that the gateway can end a request denied when no
// caller is there: a deny runs nothing, so no secret is needed.
func (g *Gateway) storedPrepared(ctx context.Context, req evidence.RequestRecord) (*prepared, error) {
	c := call{
		RequestID: req.RequestID, ToolID: req.ToolID, RunID: req.Ctx.RunID, StepID: req.Ctx.StepID,
		PolicyRef: req.Ctx.PolicyRef, ParentRequestID: req.ParentRequestID, Args: req.Args, FrontDoor: req.FrontDoor,
		TraceID: req.TraceID,
	}
	p := &prepared{caller: req.Caller, c: c, hash: req.CanonicalRequestHash, request: req, callerCtx: ctx, engineRef: g.engineBase}
	p.tool, p.known = g.lookupTool(c.ToolID)
	if p.known {
		p.engineRef += "/" + g.drivers[p.tool.Driver].Engine()
	}
	args, err := decodeArgs(c.Args)
	if err != nil {
		return nil, err
	}
	p.args = args
	return p, nil
}

// finaliseHeld ends request id denied, as a retry would, when its approval
// was denied or has expired: the gateway does it without waiting for the
// caller to come back. It is best effort; a retry or the sweep finishes
// what it cannot. It reports whether the request is final (or no longer
// held, or its approval failed authentication: nothing acts on it).
func (g *Gateway) finaliseHeld(ctx context.Context, id string) bool {
	keys, err := g.store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return false
	}
	if slices.Contains(keys, evidence.Key(id, evidence.ArtifactManifest)) {
		return true
	}
	h, err := g.approvals().Read(ctx, id, keys)
	if errors.Is(err, evidence.ErrNotExist) {
		return true
	}
	switch {
	case errors.Is(err, trust.ErrTampered):
		// Left as it is, for the operator it was reported to; the sweep
		// would only report it again.
		return true
	case err != nil || (!h.Final() && g.now().Before(h.Request.ExpiresAt)):
		return false // unreadable for now, or still open to approval
	case h.Request.NestedRequestID != "":
		// A parent waits on its guest's call, whose own request holds the
		// approval and ends by it; the parent is never run from here.
		return true
	}
	var p *prepared
	raw, err := g.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err == nil {
		var req evidence.RequestRecord
		if req, err = evidence.ParseRequestRecord(raw); err == nil {
			p, err = g.storedPrepared(ctx, req)
		}
	}
	if err != nil {
		g.log.Warn("a denied or expired approval's request is left for a retry to end", "request_id", id, "err", err)
		return false
	}
	g.recovery.Enter(id)
	defer g.recovery.Leave(id)
	resp, err := g.resume(ctx, p, p.newRecorder(g))
	if err != nil {
		g.log.Info("a denied or expired approval's request is left for a retry to end", "request_id", id,
			"err", strings.TrimSpace(err.Error()))
		return false
	}
	return resp.GetPendingApproval() == nil
}
