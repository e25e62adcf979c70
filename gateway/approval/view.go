package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/internal/ident"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// States of an approval, in Approval.state and ListApprovalsRequest.state.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateDenied   = "denied"
	StateExpired  = "expired"
	StateConsumed = "consumed"
	StateAll      = "all"
)

// View is an approval as the store holds it, with its request.
type View struct {
	Held *Held
	// Call is the held call's request.json.
	Call evidence.RequestRecord
	Keys []string
	// Consumed: an attempt after the approval was dispatched.
	Consumed bool
	now      time.Time
}

// Load reads the approval of request id. An error wraps
// evidence.ErrNotExist when the request holds no approval.
func (r Records) Load(ctx context.Context, id string) (*View, error) {
	keys, err := r.Store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return nil, err
	}
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest)) {
		return nil, fmt.Errorf("request %s holds no approval: %w", id, evidence.ErrNotExist)
	}
	v := &View{Keys: keys, now: r.Now()}
	if v.Held, err = r.Read(ctx, id, keys); err != nil {
		return nil, err
	}
	raw, err := r.Store.Get(ctx, evidence.Key(id, evidence.ArtifactRequest))
	if err != nil {
		return nil, err
	}
	if v.Call, err = evidence.ParseRequestRecord(raw); err != nil {
		return nil, fmt.Errorf("request.json of %s is unreadable: %w", id, err)
	}
	attempts, err := evidence.ReadAttempts(ctx, r.Store, id, keys)
	if err != nil {
		return nil, err
	}
	for _, at := range attempts {
		v.Consumed = v.Consumed || (at.Number > v.Held.Request.Attempt && at.State == evidence.Dispatched)
	}
	return v, nil
}

// ByID finds approval id through the index and checks it against the
// request's own approval_request.json, the truth once authenticated: an
// index entry naming a request held under another approval id names
// nothing, and one naming a record that fails authentication is
// DATA_LOSS. Errors are gRPC statuses.
func (r Records) ByID(ctx context.Context, id string) (*View, error) {
	notFound := status.Errorf(codes.NotFound, "no approval %q", ident.Clip(id))
	if evidence.ValidApprovalID(id) != nil {
		return nil, notFound
	}
	raw, err := r.Store.Get(ctx, IndexKey(id))
	switch {
	case errors.Is(err, evidence.ErrNotExist):
		return nil, notFound
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "evidence store unavailable: %v", err)
	case !ident.RequestID.Match(raw):
		return nil, notFound
	}
	v, err := r.Load(ctx, string(raw))
	switch {
	case errors.Is(err, evidence.ErrNotExist) || (err == nil && v.Held.Request.ApprovalID != id):
		return nil, notFound
	case errors.Is(err, trust.ErrTampered):
		return nil, DecideFailure(id, err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "approval %s cannot be read: %v", id, err)
	}
	return v, nil
}

// Finished reports whether the approval's request has its final answer.
func (v *View) Finished() bool {
	id := v.Held.Request.RequestID
	return slices.Contains(v.Keys, evidence.Key(id, evidence.ArtifactManifest)) ||
		slices.Contains(v.Keys, evidence.Key(id, evidence.ArtifactResponse))
}

// State is the approval's state as ListApprovals shows it. An approval
// past its expiry counts as expired before V says so, and an approval
// whose request finished after it was granted as consumed.
func (v *View) State() string {
	vd := v.Held.Verdict
	switch {
	case vd == nil && v.now.Before(v.Held.Request.ExpiresAt):
		return StatePending
	case vd == nil || vd.Decision == evidence.ApprovalExpired:
		return StateExpired
	case vd.Decision == evidence.ApprovalDeny:
		return StateDenied
	case v.Consumed || v.Finished() || v.Held.Use != nil:
		return StateConsumed
	case !v.now.Before(v.Held.Request.ExpiresAt):
		return StateExpired
	}
	return StateApproved
}

// Proto is v on the wire. The arguments are request.json's, redacted as
// the evidence records them.
func (v *View) Proto() *toolgatev1.Approval {
	a := v.Held.Request
	out := &toolgatev1.Approval{
		ApprovalId: a.ApprovalID, RequestId: a.RequestID, ToolId: a.ToolID, Requester: a.Caller,
		RuleId: a.RuleID, Reason: a.Reason, Approvers: a.Approvers, State: v.State(),
		RequestedAt: timestamppb.New(a.RequestedAt), ExpiresAt: timestamppb.New(a.ExpiresAt),
		RequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest, PolicyRef: a.PolicyRef,
		EvidenceRefs: slices.Clone(v.Keys),
	}
	var args map[string]any
	if json.Unmarshal(v.Call.Args, &args) == nil {
		if s, err := structpb.NewStruct(args); err == nil {
			out.Args = s
		}
	}
	if vd := v.Held.Verdict; vd != nil {
		out.DecidedBy, out.DecisionReason, out.DecidedAt = vd.Approver, vd.Reason, timestamppb.New(vd.DecidedAt)
	}
	return out
}

// Notify tells the Notifier, if any, of the approval of request id as
// ListApprovals shows it.
func (r Records) Notify(ctx context.Context, typ, requestID string) {
	if r.Notifier == nil {
		return
	}
	v, err := r.Load(ctx, requestID)
	if err != nil {
		r.Log.Warn("approval not notified: it cannot be read back", "request_id", requestID, "type", typ, "err", err)
		return
	}
	r.Notifier.Notify(Event{Type: typ, Approval: v.Proto()})
}

// DecideFailure is the error of a decision on approval id that could not
// be recorded: the stored approval failed authentication (DATA_LOSS), or
// the store failed. Nothing was decided.
func DecideFailure(id string, err error) error {
	if errors.Is(err, trust.ErrTampered) {
		return status.Errorf(codes.DataLoss, "approval %s: its record failed authentication (evidence tampering); "+
			"nothing was decided or executed: %v", id, err)
	}
	return status.Errorf(codes.Unavailable, "evidence store unavailable, the approval was not decided: %v", err)
}

// Code is the code of an approval read or write that failed: DATA_LOSS
// for tampering, UNAVAILABLE for a store that failed.
func Code(err error) codes.Code {
	if errors.Is(err, trust.ErrTampered) {
		return codes.DataLoss
	}
	return codes.Unavailable
}
