package evidence

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// approvalIDPrefix starts every approval id.
const approvalIDPrefix = "apr_"

// approvalIDBytes is how many random bytes an approval id carries: 128
// bits, so that an id cannot be guessed from anything else about its
// request.
const approvalIDBytes = 16

// approvalIDEncoding is lowercase base32 without padding: 26 characters
// for 16 bytes, safe in keys, URLs and chat messages.
func approvalIDEncoding() *base32.Encoding {
	return base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
}

// NewApprovalID returns a fresh approval id: "apr_" and 26 lowercase
// base32 characters of 16 bytes from crypto/rand. It is random rather than
// derived from the request id, so that knowing a request does not let
// anyone name, and so decide, its approval.
func NewApprovalID() string {
	b := make([]byte, approvalIDBytes)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program rather than return an error
	return approvalIDPrefix + approvalIDEncoding().EncodeToString(b)
}

// ValidApprovalID reports whether id has the form NewApprovalID gives:
// "apr_" and the canonical lowercase base32 encoding of 16 bytes.
func ValidApprovalID(id string) error {
	enc, ok := strings.CutPrefix(id, approvalIDPrefix)
	if ok && len(enc) == approvalIDEncoding().EncodedLen(approvalIDBytes) {
		b, err := approvalIDEncoding().DecodeString(enc)
		// Re-encoding rejects an id whose last character carries stray
		// bits: two spellings of one id would be two ids to a store.
		if err == nil && len(b) == approvalIDBytes && approvalIDEncoding().EncodeToString(b) == enc {
			return nil
		}
	}
	return fmt.Errorf("approval id %q is not %q and 26 lowercase base32 characters", id, approvalIDPrefix)
}

// AwaitingApprovalReason is the reason of the dispatch record that closes
// the attempt which asked for approval id: the attempt ran nothing and
// waits for a human. Verification reads it as a statement that
// approval_request.json was stored.
func AwaitingApprovalReason(approvalID string) string {
	return "awaiting approval " + approvalID
}

// WaitingApprovalReason is the reason of the dispatch record that closes
// an attempt held for the pending approval approvalID that request
// requestID, the identical call under another request id, asked for: the
// attempt ran nothing and asked for no approval of its own. It shares no
// prefix with AwaitingApprovalReason.
func WaitingApprovalReason(approvalID, requestID string) string {
	return "waiting on approval " + approvalID + " of request " + requestID
}

// DecisionApprovalRequired is the decision, in DecisionRecord.Decision, of
// a call policy holds back for a human's approval.
const DecisionApprovalRequired = "approval_required"

// decodeStrict decodes data into v as ParseManifest does: unknown fields,
// fields given twice and trailing data are errors, so that a reader and
// the verifier cannot see two different records in one file. A seal (see
// package trust) is not part of the record and is left out; whoever acts
// on the record checks it.
func decodeStrict(data []byte, v any) error {
	data, _, _ = trust.Split(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the record")
	}
	return rejectDuplicateNames(data)
}

// ParseApprovalRequestRecord decodes approval_request.json, strictly (see
// ParseDispatchRecord), and checks that it belongs to requestID and has
// every field an approval is bound by: a well-formed approval id, the
// attempt that asked, the caller and tool, the canonical request hash and
// policy set digest ("sha256:" and 64 lowercase hex digits), the rule and
// its approvers, and an expiry after the time of asking.
func ParseApprovalRequestRecord(data []byte, requestID string) (ApprovalRequestRecord, error) {
	var a ApprovalRequestRecord
	if err := decodeStrict(data, &a); err != nil {
		return ApprovalRequestRecord{}, fmt.Errorf("evidence: approval request record: %w", err)
	}
	if err := a.check(requestID); err != nil {
		return ApprovalRequestRecord{}, fmt.Errorf("evidence: approval request record: %w", err)
	}
	return a, nil
}

func (a ApprovalRequestRecord) check(requestID string) error {
	if err := requiredFields(map[string]string{"caller": a.Caller, "tool_id": a.ToolID, "rule_id": a.RuleID,
		"approvers": a.Approvers, "gateway": a.Gateway}); err != nil {
		return err
	}
	switch {
	case a.RequestID != requestID:
		return fmt.Errorf("request_id is %q, want %q", a.RequestID, requestID)
	case ValidApprovalID(a.ApprovalID) != nil:
		return ValidApprovalID(a.ApprovalID)
	case a.Attempt < 1:
		return fmt.Errorf("attempt is %d, want 1 or more", a.Attempt)
	case !isSHA256Ref(a.CanonicalRequestHash):
		return fmt.Errorf("canonical_request_hash %q is not \"sha256:\" and 64 lowercase hex digits", a.CanonicalRequestHash)
	case !isSHA256Ref(a.PolicySetDigest):
		return fmt.Errorf("policy_set_digest %q is not \"sha256:\" and 64 lowercase hex digits", a.PolicySetDigest)
	case a.RequestedAt.IsZero():
		return errors.New("requested_at is missing")
	case !a.ExpiresAt.After(a.RequestedAt):
		return fmt.Errorf("expires_at %s is not after requested_at %s", a.ExpiresAt.Format(time.RFC3339Nano), a.RequestedAt.Format(time.RFC3339Nano))
	case a.NestedRequestID != "" && (a.NestedRequestID == requestID || validRequestID(a.NestedRequestID) != nil):
		return fmt.Errorf("nested_request_id %q is not another request's id", a.NestedRequestID)
	}
	return nil
}

// ParseApprovalRecord decodes approval.json, strictly (see
// ParseDispatchRecord), and checks that it belongs to requestID and is
// complete: a well-formed approval id, a decision of ApprovalApprove,
// ApprovalDeny or ApprovalExpired, the approver and time, what it is bound
// to (the request hash, policy set digest, rule, and the SHA-256 of the
// approval request's bytes), and the authorization of an approve or deny,
// which an expiry has none of.
func ParseApprovalRecord(data []byte, requestID string) (ApprovalRecord, error) {
	var v ApprovalRecord
	if err := decodeStrict(data, &v); err != nil {
		return ApprovalRecord{}, fmt.Errorf("evidence: approval record: %w", err)
	}
	if err := v.check(requestID); err != nil {
		return ApprovalRecord{}, fmt.Errorf("evidence: approval record: %w", err)
	}
	return v, nil
}

func (v ApprovalRecord) check(requestID string) error {
	if err := requiredFields(map[string]string{"approver": v.Approver, "rule_id": v.RuleID, "gateway": v.Gateway}); err != nil {
		return err
	}
	switch {
	case v.RequestID != requestID:
		return fmt.Errorf("request_id is %q, want %q", v.RequestID, requestID)
	case ValidApprovalID(v.ApprovalID) != nil:
		return ValidApprovalID(v.ApprovalID)
	case v.Decision != ApprovalApprove && v.Decision != ApprovalDeny && v.Decision != ApprovalExpired:
		return fmt.Errorf("decision %q is not %q, %q or %q", v.Decision, ApprovalApprove, ApprovalDeny, ApprovalExpired)
	case v.DecidedAt.IsZero():
		return errors.New("decided_at is missing")
	case !isSHA256Ref(v.CanonicalRequestHash):
		return fmt.Errorf("canonical_request_hash %q is not \"sha256:\" and 64 lowercase hex digits", v.CanonicalRequestHash)
	case !isSHA256Ref(v.PolicySetDigest):
		return fmt.Errorf("policy_set_digest %q is not \"sha256:\" and 64 lowercase hex digits", v.PolicySetDigest)
	case !isSHA256Hex(v.ApprovalRequestSHA256):
		return fmt.Errorf("approval_request_sha256 %q is not 64 lowercase hex digits", v.ApprovalRequestSHA256)
	case !plainText(v.Approver, tlog.MaxApproverLen):
		return fmt.Errorf("approver %q is not 1..%d bytes of UTF-8 text without control characters", v.Approver, tlog.MaxApproverLen)
	case !plainText(v.Reason, MaxApprovalReasonLen):
		return fmt.Errorf("reason is not up to %d bytes of UTF-8 text without control characters", MaxApprovalReasonLen)
	case v.Decision == ApprovalExpired && v.Authorization != nil:
		return errors.New("an expiry carries an authorization; no one decided it")
	case v.Decision != ApprovalExpired && (v.Authorization == nil || v.Authorization.RuleID == ""):
		return fmt.Errorf("a decision %q lacks the authorization (rule_id) that let its approver decide", v.Decision)
	}
	return nil
}

// MaxApprovalReasonLen bounds an approver's reason, in bytes.
const MaxApprovalReasonLen = 1024

// plainText reports whether s is at most maxLen bytes of valid UTF-8
// without control characters: what an approver's name and reason must be
// to be logged and shown without driving a terminal.
func plainText(s string, maxLen int) bool {
	return len(s) <= maxLen && utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// requiredFields returns an error naming the first empty field, in name
// order.
func requiredFields(fields map[string]string) error {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if fields[name] == "" {
			return fmt.Errorf("%s is missing", name)
		}
	}
	return nil
}

// isSHA256Ref reports whether s is "sha256:" and 64 lowercase hex digits,
// the form of canonical request hashes and policy set digests.
func isSHA256Ref(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && isSHA256Hex(h)
}

// Approval states, in ApprovalSummary.State: what the evidence of a
// request says of its approval.
const (
	// ApprovalStatePending: asked for, not decided.
	ApprovalStatePending = "pending"
	// ApprovalStateApproved: approved, not (yet) used: no attempt after
	// the approval was dispatched.
	ApprovalStateApproved = "approved"
	// ApprovalStateDenied: an approver denied it.
	ApprovalStateDenied = "denied"
	// ApprovalStateExpired: nobody decided it before it expired.
	ApprovalStateExpired = "expired"
	// ApprovalStateConsumed: approved and used: an attempt after the
	// approval was dispatched.
	ApprovalStateConsumed = "consumed"
)

// ApprovalSummary is what verification and listings say of a request's
// approval.
type ApprovalSummary struct {
	ApprovalID string `json:"approval_id"`
	// State is one of the ApprovalState* words.
	State string `json:"state"`
	// Approver decided it; empty while pending.
	Approver string `json:"approver,omitempty"`
	// NestedRequestID is set on a parent whose guest's call is the one
	// that waits: the approval, and its approval.json, are that nested
	// request's.
	NestedRequestID string `json:"nested_request_id,omitempty"`
	// Signature says whether the approval's records (approval_request.json
	// and approval.json) were authenticated: SignatureValid, every one
	// signed by a trusted key; SignatureUnchecked, signed, but no trusted
	// keys were given (or, from ReadApproval, nothing was checked);
	// SignatureUnsigned, a record carries no seal. With trusted keys a
	// record they did not sign is a problem, and verification a mismatch.
	Signature string `json:"signature,omitempty"`
	// KeyID names the key the records say signed them.
	KeyID string `json:"key_id,omitempty"`
	// UsedBy is the request that used the approval, from
	// approval_use.json: the request itself, or another request of the
	// identical call.
	UsedBy string `json:"used_by,omitempty"`
	// GrantedFor is set on a request that used, or waited on, the
	// approval of another request of the identical call: that request,
	// which holds the approval's records.
	GrantedFor string `json:"granted_for,omitempty"`
}

// approvalState derives an approval's state from its decision v (nil when
// undecided), whether approval_use.json is stored, and the request's
// attempts: approved becomes consumed once it is used, or an attempt after
// the one that asked was dispatched.
func approvalState(asked int, v *ApprovalRecord, used bool, attempts []Attempt) string {
	switch {
	case v == nil:
		return ApprovalStatePending
	case v.Decision == ApprovalDeny:
		return ApprovalStateDenied
	case v.Decision == ApprovalExpired:
		return ApprovalStateExpired
	case used:
		return ApprovalStateConsumed
	}
	for _, a := range attempts {
		if a.Number > asked && a.State == Dispatched {
			return ApprovalStateConsumed
		}
	}
	return ApprovalStateApproved
}

// ReadApproval reads the approval of request requestID, whose keys in s
// are keys, for listings: its approval_request.json, the approval.json
// that decides it (the nested request's, for a parent waiting on its
// guest's call) and its state given the attempts. found is false when the
// request never asked for approval. A record that does not parse is an
// error wrapping ErrMalformedApproval; verification says more of it.
// Seals are stripped, not checked (summary.Signature says
// SignatureUnchecked or SignatureUnsigned): Verify with trusted keys
// checks them.
func ReadApproval(ctx context.Context, s Reader, requestID string, keys []string) (summary ApprovalSummary, found bool, err error) {
	if !slices.Contains(keys, Key(requestID, ArtifactApprovalRequest)) {
		return ApprovalSummary{}, false, nil
	}
	data, err := s.Get(ctx, Key(requestID, ArtifactApprovalRequest))
	if err != nil {
		return ApprovalSummary{}, false, fmt.Errorf("evidence: read approval of %q: %w", requestID, err)
	}
	a, err := ParseApprovalRequestRecord(splitApproval(data, &summary), requestID)
	if err != nil {
		return ApprovalSummary{}, true, fmt.Errorf("%w: %w", ErrMalformedApproval, err)
	}
	summary.ApprovalID, summary.NestedRequestID = a.ApprovalID, a.NestedRequestID
	decider := cmp.Or(a.NestedRequestID, requestID)
	vData, err := s.Get(ctx, Key(decider, ArtifactApproval))
	var v *ApprovalRecord
	switch {
	case err == nil:
		parsed, err := ParseApprovalRecord(splitApproval(vData, &summary), decider)
		if err != nil {
			return summary, true, fmt.Errorf("%w: %w", ErrMalformedApproval, err)
		}
		v, summary.Approver = &parsed, parsed.Approver
	case !errors.Is(err, ErrNotExist):
		return summary, true, fmt.Errorf("evidence: read approval of %q: %w", requestID, err)
	}
	attempts, err := ReadAttempts(ctx, s, requestID, keys)
	if err != nil {
		return summary, true, fmt.Errorf("%w: %w", ErrMalformedApproval, err)
	}
	used := slices.Contains(keys, Key(requestID, ArtifactApprovalUse))
	if used {
		uData, err := s.Get(ctx, Key(requestID, ArtifactApprovalUse))
		if err != nil {
			return summary, true, fmt.Errorf("evidence: read approval use of %q: %w", requestID, err)
		}
		u, err := ParseApprovalUseRecord(splitApproval(uData, &summary), requestID)
		if err != nil {
			return summary, true, fmt.Errorf("%w: %w", ErrMalformedApproval, err)
		}
		summary.UsedBy = u.UsedBy
	}
	summary.State = approvalState(a.Attempt, v, used, attempts)
	return summary, true, nil
}

// ErrMalformedApproval is returned (wrapped) by ReadApproval for approval
// evidence that does not parse.
var ErrMalformedApproval = errors.New("evidence: malformed approval evidence")

// DecodeRecord decodes one of the JSON records a gateway writes as the
// verifier does: without its seal, refusing unknown fields, fields given
// twice and trailing data, so that a reader acting on a record cannot see
// another record in the same bytes than the verifier did.
func DecodeRecord(data []byte, v any) error { return decodeStrict(data, v) }

// DecodeRequestRecord decodes request.json by DecodeRecord's rules,
// reading the records gateways write in one pass (see request_fast.go).
func DecodeRequestRecord(data []byte) (RequestRecord, error) {
	body, _, _ := trust.Split(data)
	if r, ok := decodeRequestFast(body); ok {
		return r, nil
	}
	var r RequestRecord
	err := decodeStrict(data, &r)
	return r, err
}
