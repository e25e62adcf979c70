package gateway

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// Approvals are signed decisions: approval_request.json and approval.json
// carry this gateway's signature (a seal, see package trust) over every
// byte and their key, and every read that acts on them checks it with the
// keys the gateway trusts. A record written into the store by anyone else
// (a forged approval with digests copied from the real request, one moved
// from another request, one from a version that did not sign) is
// tampering: nothing runs and nothing is decided on it. Checking that the
// approver's log entry exists is left to verify: the signature already
// shows a trusted gateway wrote the decision, and that gateway stored it
// only once its log could take it.

// signApproval returns an approval record, encoded as it is stored under
// key, signed by this gateway; unsigned when the gateway does not sign.
func (g *Gateway) signApproval(key string, data []byte) ([]byte, error) {
	if g.sealer == nil {
		return data, nil
	}
	sealed, err := g.sealer.Sign(key, data)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", key, err)
	}
	return sealed, nil
}

// openApproval authenticates an approval record of request id read back
// from key and returns it without its seal. A record that fails is logged
// and counted as tampering, and the error (wrapping trust.ErrTampered)
// tells the caller to act on nothing. A gateway that does not sign
// strips a seal and checks nothing.
func (g *Gateway) openApproval(key, id string, raw []byte) ([]byte, error) {
	if g.trusted == nil {
		body, _, _ := trust.Split(raw)
		return body, nil
	}
	body, _, err := g.trusted.OpenSigned(key, raw)
	if err != nil {
		g.tampered(nil, telemetry.RecordApproval, id, err)
		return nil, err
	}
	return body, nil
}

// approvalUnreadable is the failure of a call whose approval cannot be
// read: DATA_LOSS when a record failed authentication, UNAVAILABLE
// otherwise. Nothing was executed either way.
func approvalUnreadable(rec *recorder, id string, err error) error {
	if errors.Is(err, trust.ErrTampered) {
		return rec.failure(codes.DataLoss, "the approval record of request_id %q failed authentication (evidence tampering), "+
			"nothing was executed: %v", id, err)
	}
	return rec.failure(codes.Unavailable, "the approval of request_id %q cannot be read, nothing was executed: %v", id, err)
}

// expiryFailure is the failure of a call whose approval expired and the
// expiry could not be recorded (on ErrExist, another decision is read
// back, and may fail authentication). Nothing was executed.
func expiryFailure(rec *recorder, id, approvalID string, err error) error {
	if errors.Is(err, trust.ErrTampered) {
		return approvalUnreadable(rec, id, err)
	}
	return rec.failure(codes.Unavailable, "the expiry of approval %s cannot be recorded, nothing was executed: %v", approvalID, err)
}
