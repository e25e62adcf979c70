package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
)

// readUse authenticates and parses approval_use.json of a request with
// its own approval and checks it uses A's approval as V approved it,
// before it expired, and that a request it names as the user claimed the
// same call.
func (c *approvalCheck) readUse(ctx context.Context) error {
	key := Key(c.id, ArtifactApprovalUse)
	data, err := c.readOne(ctx, key)
	if err != nil || data == nil {
		return err
	}
	body := c.openApproval(key, data)
	if body == nil {
		return nil
	}
	u, err := ParseApprovalUseRecord(body, c.id)
	a, v := c.a, c.v
	switch {
	case err != nil:
		c.problem("%s: %v", key, err)
		return nil
	case u.ApprovalID != a.ApprovalID || u.CanonicalRequestHash != a.CanonicalRequestHash ||
		u.PolicySetDigest != a.PolicySetDigest || u.RuleID != a.RuleID:
		c.problem("%s: uses another approval, call, policy set or rule than %s asks about", key, ArtifactApprovalRequest)
		return nil
	case v == nil || v.Decision != ApprovalApprove || u.ApprovalSHA256 != c.vSum:
		c.problem("%s: uses approval %s, but no valid %s with approval_sha256 %s approves it", key, a.ApprovalID, ArtifactApproval, u.ApprovalSHA256)
		return nil
	case !u.UsedAt.Before(a.ExpiresAt):
		c.problem("%s: used at %s, at or after expires_at %s", key, stamp(u.UsedAt), stamp(a.ExpiresAt))
		return nil
	}
	if u.UsedBy != c.id {
		hash, err := c.claimOf(ctx, u.UsedBy)
		if err != nil {
			return err
		}
		if hash != a.CanonicalRequestHash {
			c.problem("%s: names request %s as its user, whose request.json is not the call approved", key, u.UsedBy)
			return nil
		}
	}
	c.use = &u
	return nil
}

// claimOf returns the canonical request hash of request id's request.json,
// "" when it is missing or unreadable.
func (c *approvalCheck) claimOf(ctx context.Context, id string) (string, error) {
	if validRequestID(id) != nil {
		return "", nil
	}
	data, err := c.r.v.store.Get(ctx, Key(id, ArtifactRequest))
	switch {
	case errors.Is(err, ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	}
	var req RequestRecord
	if json.Unmarshal(data, &req) != nil {
		return "", nil
	}
	return req.CanonicalRequestHash, nil
}

// borrowed is another request's approval as checkBorrowed reads it.
type borrowed struct {
	owner       string
	a           ApprovalRequestRecord
	v           ApprovalRecord
	vSum        string
	use         ApprovalUseRecord
	ok          bool
	problemText string
}

// checkBorrowed checks the decisions of a request that used the approval
// of another request of the identical call (DecisionApproval.RequestID):
// that request's approval records, each authenticated, approve this call
// under the decision's policy set and rule, and its approval_use.json
// names this request as the one use.
func (c *approvalCheck) checkBorrowed(ctx context.Context) error {
	var firstErr error
	c.eachDecision(func(at Attempt, d DecisionRecord, key string) {
		if firstErr != nil || d.Approval == nil || d.Approval.RequestID == "" {
			return
		}
		if d.Approval.Outcome == ApprovalPending {
			firstErr = c.checkWaited(ctx, at, d, key)
			return
		}
		b, err := c.readBorrowed(ctx, d.Approval.RequestID)
		if err != nil {
			firstErr = err
			return
		}
		if !b.ok {
			c.problem("%s: %s", key, b.problemText)
			return
		}
		c.judgeBorrowed(b, d, key)
	})
	return firstErr
}

// judgeBorrowed checks decision d, stored under key, against the approval
// b it says it used.
func (c *approvalCheck) judgeBorrowed(b borrowed, d DecisionRecord, key string) {
	da := d.Approval
	switch {
	case d.Decision != "allow" || da.Outcome != ApprovalApprove:
		c.problem("%s: names approval %s of request %s (%s), but only an allowed call uses another request's approval",
			key, da.ApprovalID, b.owner, da.Outcome)
	case da.ApprovalID != b.a.ApprovalID || da.ApprovalSHA256 != b.vSum:
		c.problem("%s: names approval %s (approval_sha256 %s); request %s holds %s", key, da.ApprovalID, da.ApprovalSHA256, b.owner, b.a.ApprovalID)
	case d.RuleID != b.a.RuleID || d.PolicySetDigest != b.a.PolicySetDigest:
		c.problem("%s: allowed by rule %q under %s, but approval %s was granted under rule %q and %s",
			key, d.RuleID, d.PolicySetDigest, b.a.ApprovalID, b.a.RuleID, b.a.PolicySetDigest)
	case !d.DecidedAt.Before(b.a.ExpiresAt):
		c.problem("%s: used approval %s at %s, at or after expires_at %s", key, b.a.ApprovalID, stamp(d.DecidedAt), stamp(b.a.ExpiresAt))
	default:
		c.summary = &ApprovalSummary{ApprovalID: b.a.ApprovalID, State: ApprovalStateConsumed, Approver: b.v.Approver,
			UsedBy: c.id, GrantedFor: b.owner, Signature: c.signature, KeyID: c.keyID}
	}
}

// readBorrowed reads and checks request owner's approval records as the
// approval this request used. A failing store is the only error.
func (c *approvalCheck) readBorrowed(ctx context.Context, owner string) (borrowed, error) {
	b := borrowed{owner: owner}
	if validRequestID(owner) != nil || owner == c.id {
		b.problemText = "names an approval of request " + owner + ", which cannot hold it"
		return b, nil
	}
	aKey, vKey, uKey := Key(owner, ArtifactApprovalRequest), Key(owner, ArtifactApproval), Key(owner, ArtifactApprovalUse)
	raws := map[string][]byte{}
	var aSum string
	for _, key := range []string{aKey, vKey, uKey} {
		data, err := c.r.v.store.Get(ctx, key)
		if errors.Is(err, ErrNotExist) {
			b.problemText = "uses an approval of request " + owner + ", whose " + key + " is missing"
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if raws[key] = c.openApproval(key, data); raws[key] == nil {
			b.problemText = "uses an approval of request " + owner + ", whose " + key + " failed authentication"
			return b, nil
		}
		sum := sha256.Sum256(data)
		switch key {
		case aKey:
			aSum = hex.EncodeToString(sum[:])
		case vKey:
			b.vSum = hex.EncodeToString(sum[:])
		}
	}
	var err error
	if b.a, err = ParseApprovalRequestRecord(raws[aKey], owner); err == nil {
		if b.v, err = ParseApprovalRecord(raws[vKey], owner); err == nil {
			b.use, err = ParseApprovalUseRecord(raws[uKey], owner)
		}
	}
	if err != nil {
		b.problemText = "uses an approval of request " + owner + ": " + err.Error()
		return b, nil
	}
	claim, err := c.claimOf(ctx, c.id)
	if err != nil {
		return b, err
	}
	b.problemText = c.borrowedProblem(b, aSum, claim)
	b.ok = b.problemText == ""
	return b, nil
}

// borrowedProblem is what is wrong with b, whose A has the SHA-256 aSum,
// as the approval of this request, whose claim has the hash claim; "" for
// nothing.
func (c *approvalCheck) borrowedProblem(b borrowed, aSum, claim string) string {
	a, v, u := b.a, b.v, b.use
	switch {
	case a.NestedRequestID != "" || a.ParentRequestID != "":
		return "uses approval " + a.ApprovalID + ", which a guest's call asked for"
	case a.CanonicalRequestHash != claim:
		return "uses approval " + a.ApprovalID + " of request " + b.owner + ", which approves another call"
	case v.ApprovalID != a.ApprovalID || v.ApprovalRequestSHA256 != aSum || v.CanonicalRequestHash != a.CanonicalRequestHash ||
		v.PolicySetDigest != a.PolicySetDigest || v.RuleID != a.RuleID:
		return Key(b.owner, ArtifactApproval) + " is not bound to " + Key(b.owner, ArtifactApprovalRequest)
	case v.Decision != ApprovalApprove:
		return "uses approval " + a.ApprovalID + ", which was " + v.Decision
	case u.UsedBy != c.id:
		return "uses approval " + a.ApprovalID + ", which " + Key(b.owner, ArtifactApprovalUse) + " says request " + u.UsedBy + " used"
	case u.ApprovalID != a.ApprovalID || u.ApprovalSHA256 != b.vSum || u.CanonicalRequestHash != a.CanonicalRequestHash:
		return Key(b.owner, ArtifactApprovalUse) + " is not bound to its approval"
	}
	return ""
}

// checkWaited checks a decision that held the call for the pending
// approval another request of the identical call had asked for, instead
// of asking for one more: that request's approval_request.json,
// authenticated, asks for that approval, for this call, under the
// decision's policy set and rule, unexpired when the call waited; the
// attempt ran nothing and is closed as waiting on it.
func (c *approvalCheck) checkWaited(ctx context.Context, at Attempt, d DecisionRecord, key string) error {
	owner, da := d.Approval.RequestID, d.Approval
	if validRequestID(owner) != nil || owner == c.id {
		c.problem("%s: waits on an approval of request %s, which cannot hold it", key, owner)
		return nil
	}
	aKey := Key(owner, ArtifactApprovalRequest)
	aData, err := c.r.v.store.Get(ctx, aKey)
	switch {
	case errors.Is(err, ErrNotExist):
		c.problem("%s: waits on approval %s of request %s, whose %s is missing", key, da.ApprovalID, owner, aKey)
		return nil
	case err != nil:
		return err
	}
	body := c.openApproval(aKey, aData)
	if body == nil {
		return nil
	}
	a, err := ParseApprovalRequestRecord(body, owner)
	if err != nil {
		c.problem("%s: waits on approval %s of request %s: %v", key, da.ApprovalID, owner, err)
		return nil
	}
	claim, err := c.claimOf(ctx, c.id)
	if err != nil {
		return err
	}
	switch {
	case d.Decision != DecisionApprovalRequired:
		c.problem("%s: waits on approval %s of request %s, but decided %q", key, da.ApprovalID, owner, d.Decision)
	case c.dispatched(at):
		c.problem("%s: waits on approval %s of request %s, yet attempt %d was dispatched", key, da.ApprovalID, owner, at.Number)
	case at.State != NotDispatched || at.Reason != WaitingApprovalReason(da.ApprovalID, owner):
		c.problem("%s: waits on approval %s of request %s, but attempt %d is not closed as waiting on it", key, da.ApprovalID, owner, at.Number)
	case a.NestedRequestID != "" || a.ParentRequestID != "":
		c.problem("%s: waits on approval %s, which a guest's call asked for", key, a.ApprovalID)
	case a.ApprovalID != da.ApprovalID || a.CanonicalRequestHash != claim:
		c.problem("%s: waits on approval %s of request %s, which holds %s for another or the same call", key, da.ApprovalID, owner, a.ApprovalID)
	case d.RuleID != a.RuleID || d.PolicySetDigest != a.PolicySetDigest:
		c.problem("%s: held by rule %q under %s, but approval %s was asked under rule %q and %s",
			key, d.RuleID, d.PolicySetDigest, a.ApprovalID, a.RuleID, a.PolicySetDigest)
	case !d.DecidedAt.Before(a.ExpiresAt):
		c.problem("%s: waited on approval %s at %s, at or after expires_at %s", key, a.ApprovalID, stamp(d.DecidedAt), stamp(a.ExpiresAt))
	default:
		return c.noteWaited(ctx, owner, a, aData)
	}
	return nil
}

// noteWaited sets the summary of a request that waited on approval a of
// request owner (whose stored bytes are aData) to that approval as its
// records say now: decided, used, and by whom.
func (c *approvalCheck) noteWaited(ctx context.Context, owner string, a ApprovalRequestRecord, aData []byte) error {
	s := &ApprovalSummary{ApprovalID: a.ApprovalID, GrantedFor: owner}
	var v *ApprovalRecord
	used := false
	vKey, uKey := Key(owner, ArtifactApproval), Key(owner, ArtifactApprovalUse)
	for _, key := range []string{vKey, uKey} {
		data, err := c.r.v.store.Get(ctx, key)
		if errors.Is(err, ErrNotExist) {
			break
		}
		if err != nil {
			return err
		}
		body := c.openApproval(key, data)
		if body == nil {
			return nil
		}
		if key == vKey {
			if v = c.waitedDecision(vKey, body, owner, a, aData); v == nil {
				return nil
			}
			s.Approver = v.Approver
			continue
		}
		u, err := ParseApprovalUseRecord(body, owner)
		if err != nil || u.ApprovalID != a.ApprovalID {
			c.problem("%s: does not use approval %s", uKey, a.ApprovalID)
			return nil
		}
		s.UsedBy, used = u.UsedBy, true
	}
	s.State = approvalState(a.Attempt, v, used, nil)
	s.Signature, s.KeyID = c.signature, c.keyID
	c.summary = s
	return nil
}

// waitedDecision parses body, the decision of approval a of request
// owner, whose approval_request.json's stored bytes are aData; nil, with a
// problem, when it is not bound to a.
func (c *approvalCheck) waitedDecision(vKey string, body []byte, owner string, a ApprovalRequestRecord, aData []byte) *ApprovalRecord {
	v, err := ParseApprovalRecord(body, owner)
	aSum := sha256.Sum256(aData)
	if err != nil || v.ApprovalID != a.ApprovalID || v.ApprovalRequestSHA256 != hex.EncodeToString(aSum[:]) {
		c.problem("%s: is not bound to approval %s of %s", vKey, a.ApprovalID, Key(owner, ArtifactApprovalRequest))
		return nil
	}
	return &v
}
