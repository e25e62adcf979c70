package evidence

import (
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// Approvals are signed decisions. A signing gateway seals both of an
// approval's records, approval_request.json and approval.json, with an
// Ed25519 signature (see package trust) over every byte and the key the
// record is stored under: the approver, the decision, the canonical
// request hash and the policy set digest of approval.json are what a
// trusted gateway wrote, for that request and no other. Someone who can
// write to the store but holds no trusted key can forge neither record,
// nor move one to another request; with the gateway's public keys an
// auditor checks the same offline. Digests that name a record
// (approval_request_sha256, a decision's approval_sha256, the log entry)
// are of its stored bytes, seal included.

// openApproval authenticates the approval record data stored under key
// and returns it without its seal, for the parser. With trusted keys a
// record they did not sign (unsealed, sealed by another key, or altered)
// is a problem and nil is returned; without, the seal is only stripped
// and the record counted as unchecked or unsigned.
func (c *approvalCheck) openApproval(key string, data []byte) []byte {
	ring := c.r.v.ring
	if ring == nil {
		body, seal, _ := trust.Split(data)
		c.noteSeal(seal, SignatureUnchecked)
		return body
	}
	body, seal, err := ring.OpenSigned(key, data)
	if err != nil {
		c.problem("%s: failed authentication: %s", key, sealReason(key, err))
		return nil
	}
	c.noteSeal(&seal, SignatureValid)
	return body
}

// noteSeal folds one record's seal into the approval's signature state:
// SignatureUnsigned once any record is unsealed, else state.
func (c *approvalCheck) noteSeal(seal *trust.Seal, state string) {
	switch {
	case seal == nil:
		c.signature = SignatureUnsigned
	case c.signature != SignatureUnsigned:
		c.signature, c.keyID = state, seal.KeyID
	}
}

// sealReason is why a record failed authentication, without the prefix
// naming the tampering and the key, which the problem line carries.
func sealReason(key string, err error) string {
	return strings.TrimPrefix(err.Error(), fmt.Sprintf("%v: %s: ", trust.ErrTampered, key))
}

// splitApproval strips an approval record's seal for display, noting in
// summary who sealed it; nothing is checked.
func splitApproval(data []byte, summary *ApprovalSummary) []byte {
	body, seal, _ := trust.Split(data)
	switch {
	case seal == nil:
		summary.Signature, summary.KeyID = SignatureUnsigned, ""
	case summary.Signature != SignatureUnsigned:
		summary.Signature, summary.KeyID = SignatureUnchecked, seal.KeyID
	}
	return body
}

// judgeUsedApproval requires of an approval a run used that a log
// records its approval.json: a gateway stores a human's decision only
// once its log can take it, so a used approval no log records (and not on
// its way into one) is not one a gateway's decision explains.
func (j *logJoin) judgeUsedApproval(rep *VerifyReport, recs []logRecord, infos []KeyInfo) {
	a := rep.Approval
	if a == nil || a.State != ApprovalStateConsumed || a.NestedRequestID != "" || a.GrantedFor != "" || len(recordsOf(recs, tlog.KindApproval)) > 0 {
		return
	}
	key := Key(rep.RequestID, ArtifactApproval)
	if j.unloggedState(key, infos) == LogPending {
		return
	}
	rep.Problems = append(rep.Problems, fmt.Sprintf("%s: approval %s was used by a run, but no transparency log records it", key, a.ApprovalID))
	rep.Status = StatusMismatch
}
