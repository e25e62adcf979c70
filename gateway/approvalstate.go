package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// RuleApprovalStale is the rule id of a final deny when an approved call,
// retried after the policy set changed, now needs the approval of another
// rule than the one that was granted.
const RuleApprovalStale = "approval_stale"

// approvalsRoot holds the index from an approval id to its request,
// outside requests/ so that no walk of the requests sees it.
const approvalsRoot = "approvals/"

// approvalIndexKey is the key of the index entry of approval id.
func approvalIndexKey(id string) string { return approvalsRoot + id }

// heldApproval is what the store says of a request's approval: the request
// for it (A) and, once decided, the decision (V).
type heldApproval struct {
	request evidence.ApprovalRequestRecord
	// requestSHA256 is the hex SHA-256 of A's stored bytes.
	requestSHA256 string
	// verdict is V, nil while undecided; verdictSHA256 the hex SHA-256 of
	// its stored bytes.
	verdict       *evidence.ApprovalRecord
	verdictSHA256 string
	// use is approval_use.json, nil while unused; user the request that
	// would use the approval: its own, or another request of the same
	// call (see package approvaluse).
	use    *evidence.ApprovalUseRecord
	useRaw []byte // use as stored
	user   string
}

// final reports whether the approval ends user's request denied: an
// approver's deny, an expiry, or a use by another request.
func (h *heldApproval) final() bool {
	return h.verdict != nil && (h.verdict.Decision != evidence.ApprovalApprove || h.usedElsewhere())
}

// usedElsewhere reports whether a request other than user used it.
func (h *heldApproval) usedElsewhere() bool { return h.use != nil && h.use.UsedBy != h.user }

// link is the approval as a decision record names it, with outcome.
func (h *heldApproval) link(outcome string) *evidence.DecisionApproval {
	l := &evidence.DecisionApproval{ApprovalID: h.request.ApprovalID, Approvers: h.request.Approvers, Outcome: outcome}
	if h.verdict != nil {
		l.ApprovalSHA256, l.Approver = h.verdictSHA256, h.verdict.Approver
	}
	if h.user != h.request.RequestID {
		l.RequestID = h.request.RequestID
	}
	return l
}

// readHeld reads the approval of request id: A, which must exist, and V
// when keys list it, each authenticated (an error wrapping
// trust.ErrTampered when one fails).
func (g *Gateway) readHeld(ctx context.Context, id string, keys []string) (*heldApproval, error) {
	h := &heldApproval{user: id}
	key := evidence.Key(id, evidence.ArtifactApprovalRequest)
	raw, err := g.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	body, err := g.openApproval(key, id, raw)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &h.request); err != nil {
		return nil, fmt.Errorf("%s of %s is unreadable: %w", evidence.ArtifactApprovalRequest, id, err)
	}
	if h.request.RequestID != id || evidence.ValidApprovalID(h.request.ApprovalID) != nil {
		return nil, fmt.Errorf("%s of %s names another request or a malformed approval id", evidence.ArtifactApprovalRequest, id)
	}
	h.requestSHA256 = evidence.Digest("", raw).SHA256
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApproval)) {
		return h, nil
	}
	if err := g.readVerdict(ctx, h); err != nil {
		return nil, err
	}
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalUse)) {
		return h, nil
	}
	return h, g.readUse(ctx, h)
}

// readVerdict reads V into h, authenticated.
func (g *Gateway) readVerdict(ctx context.Context, h *heldApproval) error {
	id := h.request.RequestID
	key := evidence.Key(id, evidence.ArtifactApproval)
	raw, err := g.store.Get(ctx, key)
	if err != nil {
		return err
	}
	body, err := g.openApproval(key, id, raw)
	if err != nil {
		return err
	}
	var v evidence.ApprovalRecord
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s of %s is unreadable: %w", evidence.ArtifactApproval, id, err)
	}
	switch {
	case v.ApprovalID != h.request.ApprovalID || v.RequestID != id:
		return fmt.Errorf("%s of %s decides another approval", evidence.ArtifactApproval, id)
	case v.ApprovalRequestSHA256 != h.requestSHA256 || v.CanonicalRequestHash != h.request.CanonicalRequestHash:
		return fmt.Errorf("%s of %s is bound to another approval request", evidence.ArtifactApproval, id)
	case v.Decision != evidence.ApprovalApprove && v.Decision != evidence.ApprovalDeny && v.Decision != evidence.ApprovalExpired:
		return fmt.Errorf("%s of %s has decision %q", evidence.ArtifactApproval, id, v.Decision)
	}
	h.verdict, h.verdictSHA256 = &v, evidence.Digest("", raw).SHA256
	return nil
}

// decideHeld writes V create-only, signed. The first writer wins on every
// replica: on ErrExist the stored V is read into h instead, and written
// reports false.
func (g *Gateway) decideHeld(ctx context.Context, h *heldApproval, v evidence.ApprovalRecord) (written bool, err error) {
	a := h.request
	v.RequestID, v.ApprovalID = a.RequestID, a.ApprovalID
	v.CanonicalRequestHash, v.PolicySetDigest, v.RuleID = a.CanonicalRequestHash, a.PolicySetDigest, a.RuleID
	v.ApprovalRequestSHA256, v.Gateway = h.requestSHA256, g.engineBase
	// Only the approver's reason is free text; the rest comes from A
	// (redacted when it was stored) and from policy. The record is not
	// passed through the JSON redactor as a whole: it would take the
	// "authorization" object for a credential and blank it out.
	v.Reason, _ = g.redactor.String(v.Reason)
	key := evidence.Key(a.RequestID, evidence.ArtifactApproval)
	data, err := marshalJSON(v)
	if err == nil {
		data, err = g.signApproval(key, data)
	}
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", evidence.ArtifactApproval, err)
	}
	err = g.store.Put(ctx, key, data)
	if errors.Is(err, evidence.ErrExist) {
		return false, g.readVerdict(ctx, h)
	}
	if err != nil {
		return false, err
	}
	h.verdict, h.verdictSHA256 = &v, evidence.Digest("", data).SHA256
	return true, nil
}

// expire writes V=expired for an approval past its expiry, unless another
// decision got there first; written says which.
func (g *Gateway) expire(ctx context.Context, h *heldApproval, now time.Time) (written bool, err error) {
	return g.decideHeld(ctx, h, evidence.ApprovalRecord{
		Decision: evidence.ApprovalExpired, Approver: g.engineBase, DecidedAt: now.UTC(),
		Reason: fmt.Sprintf("approval %s expired at %s", h.request.ApprovalID, h.request.ExpiresAt.UTC().Format(time.RFC3339)),
	})
}

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
	g.recovery.watchApproval(p.c.RequestID, stored.RequestedAt, stored.ExpiresAt)
	g.notify(ctx, approval.EventPending, p.c.RequestID)
	reason := evidence.AwaitingApprovalReason(id)
	if err := rec.putDispatch(pre, evidence.NotDispatched, reason); err != nil {
		// The approval stands; the attempt must be closed before a retry
		// can answer pending. Try once more, else leave it to recovery.
		key, closeErr := g.closeAttempt(ctx, p.c.RequestID, n, false, rec.redact, reason)
		if closeErr != nil {
			log.Error("could not close an attempt held for approval; recovery will", "approval_id", id, "err", closeErr)
			g.recovery.leftUnfinished(p.c.RequestID, unfinished{})
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
	if err := g.store.Put(ctx, approvalIndexKey(a.ApprovalID), []byte(a.RequestID)); err != nil {
		return a, fmt.Errorf("approval index: %w", err)
	}
	if byCall {
		if err := g.useLedger().Index(ctx, a.CanonicalRequestHash, a.ApprovalID, a.RequestID); err != nil {
			return a, err
		}
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
	var stored evidence.ApprovalRequestRecord
	if err := json.Unmarshal(body, &stored); err != nil {
		return a, fmt.Errorf("%s: %w", evidence.ArtifactApprovalRequest, err)
	}
	key := evidence.Key(a.RequestID, evidence.ArtifactApprovalRequest)
	data, err := g.signApproval(key, body)
	if err != nil {
		return a, err
	}
	if err := g.store.Put(ctx, key, data); err != nil {
		return a, err
	}
	rec.refs = append(rec.refs, key)
	rec.digests = append(rec.digests, evidence.Digest(key, data))
	return stored, nil
}

// pendingReply is the answer to a call held for approval: not run, in
// words every client of the contract reads as such (ok false, decision
// deny, no tool_result), with the approval in pending_approval. It is
// built from A and the stored keys in sorted order only, so every retry
// while pending gets the same reply.
func pendingReply(p *prepared, a evidence.ApprovalRequestRecord, keys []string) *toolgatev1.RunToolResponse {
	refs := slices.Clone(keys)
	slices.Sort(refs)
	expires := a.ExpiresAt.UTC()
	return &toolgatev1.RunToolResponse{
		PolicyCheck: &toolgatev1.PolicyCheck{
			Decision: policy.WordDeny, RuleId: a.RuleID,
			Reason: fmt.Sprintf("approval required (approval %s, expires %s): %s", a.ApprovalID, expires.Format(time.RFC3339), a.Reason),
		},
		EvidenceRefs: refs,
		EngineRef:    p.engineRef,
		RunId:        p.c.RunID,
		StepId:       p.c.StepID,
		PendingApproval: &toolgatev1.PendingApproval{
			ApprovalId: a.ApprovalID, Reason: a.Reason, ExpiresAt: timestamppb.New(expires),
			RuleId: a.RuleID, Approvers: a.Approvers, RequestHash: a.CanonicalRequestHash,
		},
	}
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
	h, err := g.readHeld(ctx, id, keys)
	if err != nil {
		return nil, approvalUnreadable(rec, id, err)
	}
	if h.request.CanonicalRequestHash != p.hash {
		return nil, rec.failure(codes.DataLoss, "the approval of request_id %q is bound to another request; "+
			"the evidence may have been altered (toolgate evidence verify checks it); nothing was executed", id)
	}
	if h.request.NestedRequestID != "" {
		return g.guestApprovalGate(ctx, p, rec, h, keys, next)
	}
	now := g.now()
	if h.verdict == nil {
		if now.Before(h.request.ExpiresAt) {
			return pendingReply(p, h.request, keys), nil
		}
		written, err := g.expire(ctx, h, now)
		if err != nil {
			return nil, expiryFailure(rec, id, h.request.ApprovalID, err)
		}
		if written {
			g.notify(ctx, approval.EventDecided, id)
		}
		if keys, err = g.store.List(ctx, evidence.RequestPrefix(id)); err != nil {
			return nil, rec.failure(codes.Unavailable, "evidence store unavailable: %v", err)
		}
	}
	p.held = h
	return g.nextAttempt(ctx, p, rec, keys, next)
}

// judgeHeld turns the decision of an attempt after an approval into what
// the approval makes of it, and the approval as the record names it. now
// is the decision's time: an approval counts only before it expires.
func judgeHeld(h *heldApproval, d policy.Decision, now time.Time) (policy.Decision, *evidence.DecisionApproval) {
	a := h.request
	if h.final() || !now.Before(a.ExpiresAt) {
		outcome, reason := h.verdict.Decision, h.verdict.Reason
		switch {
		case h.usedElsewhere():
			outcome = evidence.ApprovalUsed
			reason = fmt.Sprintf("approval %s was used by request %s, the same call under another request_id",
				a.ApprovalID, h.use.UsedBy)
		case !h.final():
			outcome = evidence.ApprovalExpired
			reason = fmt.Sprintf("approval %s was granted, but not used before it expired at %s",
				a.ApprovalID, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return policy.Decision{RuleID: a.RuleID, Reason: reason, PolicyRef: a.PolicyRef, PolicySetDigest: a.PolicySetDigest},
			h.link(outcome)
	}
	link := h.link(evidence.ApprovalApprove)
	link.PolicySetChanged = d.PolicySetDigest != a.PolicySetDigest
	switch {
	case d.ApprovalRequired && d.RuleID == a.RuleID:
		d.Allow, d.ApprovalRequired = true, false
		if link.RequestID != "" {
			d.Reason = fmt.Sprintf("%s (approval %s, granted for request %s)", d.Reason, a.ApprovalID, a.RequestID)
		}
	case d.ApprovalRequired:
		d = policy.Decision{
			RuleID: RuleApprovalStale, PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest,
			Reason: fmt.Sprintf("approval %s was granted under rule %s; policy now requires the approval of rule %s; "+
				"use a new request_id", a.ApprovalID, a.RuleID, d.RuleID),
		}
	}
	return d, link
}

// notify tells the Notifier, if any, of the approval of request id as
// ListApprovals shows it.
func (g *Gateway) notify(ctx context.Context, typ, requestID string) {
	if g.notifier == nil {
		return
	}
	v, err := g.loadApproval(ctx, requestID)
	if err != nil {
		g.log.Warn("approval not notified: it cannot be read back", "request_id", requestID, "type", typ, "err", err)
		return
	}
	g.notifier.Notify(approval.Event{Type: typ, Approval: v.proto()})
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
	h, err := g.readHeld(ctx, id, keys)
	if errors.Is(err, evidence.ErrNotExist) {
		return true
	}
	switch {
	case errors.Is(err, trust.ErrTampered):
		// Left as it is, for the operator it was reported to; the sweep
		// would only report it again.
		return true
	case err != nil || (!h.final() && g.now().Before(h.request.ExpiresAt)):
		return false // unreadable for now, or still open to approval
	case h.request.NestedRequestID != "":
		// A parent waits on its guest's call, whose own request holds the
		// approval and ends by it; the parent is never run from here.
		return true
	}
	var p *prepared
	raw, err := g.store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err == nil {
		var req evidence.RequestRecord
		if req, err = parseRequestRecord(raw); err == nil {
			p, err = g.storedPrepared(ctx, req)
		}
	}
	if err != nil {
		g.log.Warn("a denied or expired approval's request is left for a retry to end", "request_id", id, "err", err)
		return false
	}
	g.recovery.enter(id)
	defer g.recovery.leave(id)
	resp, err := g.resume(ctx, p, p.newRecorder(g))
	if err != nil {
		g.log.Info("a denied or expired approval's request is left for a retry to end", "request_id", id,
			"err", strings.TrimSpace(err.Error()))
		return false
	}
	return resp.GetPendingApproval() == nil
}
