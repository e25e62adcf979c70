// Package approval keeps the approvals of the calls policy holds for a
// human: their signed records in the evidence store (approval_request.json,
// the decision approval.json, approval_use.json and the index from an
// approval id to its request), the states ListApprovals shows, who decides
// and what a decision makes of the call, and the notifications people are
// shown (a Notifier, the webhook).
//
// It runs no call and never imports the gateway: the gateway gives it the
// store, the seal that signs and opens its records, and its clock
// (Records), asks it what the store says of an approval, and tells it what
// to record.
package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval/approvaluse"
)

// RuleStale is the rule id of a final deny when an approved call, retried
// after the policy set changed, now needs the approval of another rule
// than the one that was granted.
const RuleStale = "approval_stale"

// IndexRoot holds the index from an approval id to its request, outside
// requests/ so that no walk of the requests sees it.
const IndexRoot = "approvals/"

// IndexKey is the key of the index entry of approval id.
func IndexKey(id string) string { return IndexRoot + id }

// Records reads and writes the approval records of requests in a store.
// It is a value the gateway builds from its own fields at each use, so
// that it always sees the store and clock the gateway has.
type Records struct {
	Store evidence.Store
	// Seal signs a record, encoded as it is stored under key; Open
	// authenticates one of request id read back from key and returns it
	// without its seal, or an error wrapping trust.ErrTampered (the
	// gateway reports the tampering).
	Seal func(key string, data []byte) ([]byte, error)
	Open func(key, requestID string, raw []byte) ([]byte, error)
	// Redact redacts an approver's free text before it is stored.
	Redact func(string) string
	// Gateway names this gateway instance in the records it writes.
	Gateway string
	Now     func() time.Time
	// Notifier, if set, is told of approvals asked for and decided.
	Notifier Notifier
	Log      *slog.Logger
}

// Held is what the store says of a request's approval: the request for it
// (A) and, once decided, the decision (V).
type Held struct {
	Request evidence.ApprovalRequestRecord
	// RequestSHA256 is the hex SHA-256 of A's stored bytes.
	RequestSHA256 string
	// Verdict is V, nil while undecided; VerdictSHA256 the hex SHA-256 of
	// its stored bytes.
	Verdict       *evidence.ApprovalRecord
	VerdictSHA256 string
	// Use is approval_use.json, nil while unused; User the request that
	// would use the approval: its own, or another request of the same
	// call (see package approvaluse).
	Use    *evidence.ApprovalUseRecord
	UseRaw []byte // Use as stored
	User   string
}

// Final reports whether the approval ends User's request denied: an
// approver's deny, an expiry, or a use by another request.
func (h *Held) Final() bool {
	return h.Verdict != nil && (h.Verdict.Decision != evidence.ApprovalApprove || h.UsedElsewhere())
}

// UsedElsewhere reports whether a request other than User used it.
func (h *Held) UsedElsewhere() bool { return h.Use != nil && h.Use.UsedBy != h.User }

// Link is the approval as a decision record names it, with outcome.
func (h *Held) Link(outcome string) *evidence.DecisionApproval {
	l := &evidence.DecisionApproval{ApprovalID: h.Request.ApprovalID, Approvers: h.Request.Approvers, Outcome: outcome}
	if h.Verdict != nil {
		l.ApprovalSHA256, l.Approver = h.VerdictSHA256, h.Verdict.Approver
	}
	if h.User != h.Request.RequestID {
		l.RequestID = h.Request.RequestID
	}
	return l
}

// Ledger is the index and use records of approvals in the store, sealed
// and opened as the approvals' other records are.
func (r Records) Ledger() approvaluse.Ledger {
	return approvaluse.Ledger{Store: r.Store, Seal: r.Seal, Open: r.Open}
}

// Read reads the approval of request id: A, which must exist, and V when
// keys list it, each authenticated (an error wrapping trust.ErrTampered
// when one fails).
func (r Records) Read(ctx context.Context, id string, keys []string) (*Held, error) {
	h := &Held{User: id}
	key := evidence.Key(id, evidence.ArtifactApprovalRequest)
	raw, err := r.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	body, err := r.Open(key, id, raw)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &h.Request); err != nil {
		return nil, fmt.Errorf("%s of %s is unreadable: %w", evidence.ArtifactApprovalRequest, id, err)
	}
	if h.Request.RequestID != id || evidence.ValidApprovalID(h.Request.ApprovalID) != nil {
		return nil, fmt.Errorf("%s of %s names another request or a malformed approval id", evidence.ArtifactApprovalRequest, id)
	}
	h.RequestSHA256 = evidence.Digest("", raw).SHA256
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApproval)) {
		return h, nil
	}
	if err := r.readVerdict(ctx, h); err != nil {
		return nil, err
	}
	if !slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalUse)) {
		return h, nil
	}
	return h, r.readUse(ctx, h)
}

// readVerdict reads V into h, authenticated.
func (r Records) readVerdict(ctx context.Context, h *Held) error {
	id := h.Request.RequestID
	key := evidence.Key(id, evidence.ArtifactApproval)
	raw, err := r.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	body, err := r.Open(key, id, raw)
	if err != nil {
		return err
	}
	var v evidence.ApprovalRecord
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s of %s is unreadable: %w", evidence.ArtifactApproval, id, err)
	}
	switch {
	case v.ApprovalID != h.Request.ApprovalID || v.RequestID != id:
		return fmt.Errorf("%s of %s decides another approval", evidence.ArtifactApproval, id)
	case v.ApprovalRequestSHA256 != h.RequestSHA256 || v.CanonicalRequestHash != h.Request.CanonicalRequestHash:
		return fmt.Errorf("%s of %s is bound to another approval request", evidence.ArtifactApproval, id)
	case v.Decision != evidence.ApprovalApprove && v.Decision != evidence.ApprovalDeny && v.Decision != evidence.ApprovalExpired:
		return fmt.Errorf("%s of %s has decision %q", evidence.ArtifactApproval, id, v.Decision)
	}
	h.Verdict, h.VerdictSHA256 = &v, evidence.Digest("", raw).SHA256
	return nil
}

// readUse reads approval_use.json into h, authenticated, and checks that
// it uses h's approval as decided.
func (r Records) readUse(ctx context.Context, h *Held) error {
	id := h.Request.RequestID
	u, raw, err := r.Ledger().Read(ctx, id)
	switch {
	case err != nil:
		return err
	case u == nil:
		return nil
	case u.ApprovalID != h.Request.ApprovalID || u.CanonicalRequestHash != h.Request.CanonicalRequestHash ||
		h.Verdict == nil || u.ApprovalSHA256 != h.VerdictSHA256:
		return fmt.Errorf("%s of %s uses another approval than its request holds", evidence.ArtifactApprovalUse, id)
	}
	h.Use, h.UseRaw = u, raw
	return nil
}

// WriteVerdict writes V create-only, signed. The first writer wins on
// every replica: on ErrExist the stored V is read into h instead, and
// written reports false.
func (r Records) WriteVerdict(ctx context.Context, h *Held, v evidence.ApprovalRecord) (written bool, err error) {
	a := h.Request
	v.RequestID, v.ApprovalID = a.RequestID, a.ApprovalID
	v.CanonicalRequestHash, v.PolicySetDigest, v.RuleID = a.CanonicalRequestHash, a.PolicySetDigest, a.RuleID
	v.ApprovalRequestSHA256, v.Gateway = h.RequestSHA256, r.Gateway
	// Only the approver's reason is free text; the rest comes from A
	// (redacted when it was stored) and from policy. The record is not
	// passed through the JSON redactor as a whole: it would take the
	// "authorization" object for a credential and blank it out.
	v.Reason = r.Redact(v.Reason)
	key := evidence.Key(a.RequestID, evidence.ArtifactApproval)
	data, err := marshalJSON(v)
	if err == nil {
		data, err = r.Seal(key, data)
	}
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", evidence.ArtifactApproval, err)
	}
	err = r.Store.Put(ctx, key, data)
	if errors.Is(err, evidence.ErrExist) {
		return false, r.readVerdict(ctx, h)
	}
	if err != nil {
		return false, err
	}
	h.Verdict, h.VerdictSHA256 = &v, evidence.Digest("", data).SHA256
	return true, nil
}

// Expire writes V=expired for an approval past its expiry, unless another
// decision got there first; written says which.
func (r Records) Expire(ctx context.Context, h *Held, now time.Time) (written bool, err error) {
	return r.WriteVerdict(ctx, h, evidence.ApprovalRecord{
		Decision: evidence.ApprovalExpired, Approver: r.Gateway, DecidedAt: now.UTC(),
		Reason: fmt.Sprintf("approval %s expired at %s", h.Request.ApprovalID, h.Request.ExpiresAt.UTC().Format(time.RFC3339)),
	})
}

// Claim claims h's approval for h.User, create-only, and leaves in h.Use
// the use that stands: h.User's, or another request's.
func (r Records) Claim(ctx context.Context, h *Held) error {
	a := h.Request
	u, raw, err := r.Ledger().Claim(ctx, evidence.ApprovalUseRecord{
		RequestID: a.RequestID, ApprovalID: a.ApprovalID, UsedBy: h.User,
		CanonicalRequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest, RuleID: a.RuleID,
		ApprovalSHA256: h.VerdictSHA256, UsedAt: r.Now().UTC(), Gateway: r.Gateway,
	})
	if err != nil {
		return err
	}
	if u.ApprovalID != a.ApprovalID || u.ApprovalSHA256 != h.VerdictSHA256 {
		return fmt.Errorf("%s of %s uses another approval than its request holds", evidence.ArtifactApprovalUse, a.RequestID)
	}
	h.Use, h.UseRaw = u, raw
	return nil
}

// Index writes the index entry of A, create-only and straight to the
// store; byCall also indexes A by the call's hash, for the identical call
// under another request id.
func (r Records) Index(ctx context.Context, a evidence.ApprovalRequestRecord, byCall bool) error {
	if err := r.Store.Put(ctx, IndexKey(a.ApprovalID), []byte(a.RequestID)); err != nil {
		return fmt.Errorf("approval index: %w", err)
	}
	if !byCall {
		return nil
	}
	return r.Ledger().Index(ctx, a.CanonicalRequestHash, a.ApprovalID, a.RequestID)
}

// StoreRequest writes A, whose body the gateway has encoded and redacted,
// create-only, signed, and straight to the store. It returns A as stored
// (redacted), from which every pending reply is built, and its key and
// stored bytes for the manifest.
func (r Records) StoreRequest(ctx context.Context, a evidence.ApprovalRequestRecord, body []byte) (stored evidence.ApprovalRequestRecord, key string, data []byte, err error) {
	if err := json.Unmarshal(body, &stored); err != nil {
		return a, "", nil, fmt.Errorf("%s: %w", evidence.ArtifactApprovalRequest, err)
	}
	key = evidence.Key(a.RequestID, evidence.ArtifactApprovalRequest)
	if data, err = r.Seal(key, body); err != nil {
		return a, "", nil, err
	}
	if err := r.Store.Put(ctx, key, data); err != nil {
		return a, "", nil, err
	}
	return stored, key, data, nil
}

// marshalJSON encodes v as the gateway stores every record: HTML
// characters as they are, indented for the auditors who read it, ending
// in a newline.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	compact := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return append(evidence.AppendIndent(nil, compact), '\n'), nil
}
