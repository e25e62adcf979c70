package evidence

import (
	"errors"
	"fmt"
	"time"
)

// An approval is for a call, not for a request id: an approved approval
// that has not been used may be used once by the identical call (same
// caller, tool, canonical arguments and ctx, under the same policy set and
// rule) arriving under another request id, as a client that cannot resend
// the request id of the call it retries does. Whichever request uses it,
// its own or another, first writes approval_use.json into the approval's
// own request, create-only and sealed like the approval's other records:
// the store's create-only write is the one claim every replica agrees on,
// and the seal keeps someone who can write to the store from forging a
// use. The request that used another's approval names it, and the request
// it was granted for, in its decision record (DecisionApproval.RequestID).

// ArtifactApprovalUse is approval_use.json, the record of the one use of a
// request's approval (see ApprovalUseRecord).
const ArtifactApprovalUse = "approval_use.json"

// ApprovalUsed is the outcome, in DecisionApproval.Outcome, of the final
// deny of a request whose approval was used by another request.
const ApprovalUsed = "used"

// ApprovalUseRecord is approval_use.json: which request used the approval
// of RequestID, bound to the approval's records.
type ApprovalUseRecord struct {
	// RequestID is the request the approval was granted for.
	RequestID  string `json:"request_id"`
	ApprovalID string `json:"approval_id"`
	// UsedBy is the request that used it: RequestID itself, or another
	// request of the identical call.
	UsedBy string `json:"used_by"`
	// What the use is bound to: the approved call, the policy set and rule
	// it was granted under, and the SHA-256 of the stored approval.json.
	CanonicalRequestHash string    `json:"canonical_request_hash"`
	PolicySetDigest      string    `json:"policy_set_digest"`
	RuleID               string    `json:"rule_id"`
	ApprovalSHA256       string    `json:"approval_sha256"`
	UsedAt               time.Time `json:"used_at"`
	Gateway              string    `json:"gateway"`
}

// ParseApprovalUseRecord decodes approval_use.json strictly (see
// ParseDispatchRecord) and checks that it belongs to requestID and has
// every field a use is bound by.
func ParseApprovalUseRecord(data []byte, requestID string) (ApprovalUseRecord, error) {
	var u ApprovalUseRecord
	if err := decodeStrict(data, &u); err != nil {
		return ApprovalUseRecord{}, fmt.Errorf("evidence: approval use record: %w", err)
	}
	if err := u.check(requestID); err != nil {
		return ApprovalUseRecord{}, fmt.Errorf("evidence: approval use record: %w", err)
	}
	return u, nil
}

func (u ApprovalUseRecord) check(requestID string) error {
	if err := requiredFields(map[string]string{"rule_id": u.RuleID, "gateway": u.Gateway}); err != nil {
		return err
	}
	switch {
	case u.RequestID != requestID:
		return fmt.Errorf("request_id is %q, want %q", u.RequestID, requestID)
	case ValidApprovalID(u.ApprovalID) != nil:
		return ValidApprovalID(u.ApprovalID)
	case validRequestID(u.UsedBy) != nil:
		return fmt.Errorf("used_by: %w", validRequestID(u.UsedBy))
	case u.UsedAt.IsZero():
		return errors.New("used_at is missing")
	case !isSHA256Ref(u.CanonicalRequestHash):
		return fmt.Errorf("canonical_request_hash %q is not \"sha256:\" and 64 lowercase hex digits", u.CanonicalRequestHash)
	case !isSHA256Ref(u.PolicySetDigest):
		return fmt.Errorf("policy_set_digest %q is not \"sha256:\" and 64 lowercase hex digits", u.PolicySetDigest)
	case !isSHA256Hex(u.ApprovalSHA256):
		return fmt.Errorf("approval_sha256 %q is not 64 lowercase hex digits", u.ApprovalSHA256)
	}
	return nil
}

// approvalCallsRoot holds the index from a canonical request hash to the
// approvals asked for that call, outside requests/ so that no walk of the
// requests sees it. The index is a hint: whoever follows it
// authenticates the approval's own records.
const approvalCallsRoot = "approvalcalls/"

// ApprovalCallPrefix is the prefix of the index entries of the approvals
// asked for the call whose canonical request hash is hash ("sha256:" and
// 64 hex digits), and false for a hash of another form.
func ApprovalCallPrefix(hash string) (string, bool) {
	if !isSHA256Ref(hash) {
		return "", false
	}
	return approvalCallsRoot + hash[len("sha256:"):] + "/", true
}

// ValidRequestID reports whether id is a request id a request's prefix
// can hold: one key segment, no more than 128 bytes.
func ValidRequestID(id string) error { return validRequestID(id) }
