package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// approvalCheck is verification's reading of one request's approval:
// approval_request.json (A), the approval.json that decides it (V: the
// request's own, or the nested request's for a parent whose guest's call
// waits), and the decision records of the attempts, each checked against
// the others.
type approvalCheck struct {
	r        *requestCopies
	id       string
	has      map[string]bool // the request's keys, in the store or the spool
	attempts []Attempt       // nil when the dispatch records could not be read
	// decisions holds each decided attempt's policy_decision.json, read
	// leniently as every other reader does; absent when unreadable.
	decisions map[int]DecisionRecord
	problems  []string

	a *ApprovalRequestRecord
	// claimHash is request.json's canonical_request_hash.
	claimHash string
	v         *ApprovalRecord
	vSum      string // hex SHA-256 of V's stored bytes
	// use is approval_use.json, once authenticated and bound to A and V.
	use *ApprovalUseRecord
	// summary is set once A parses.
	summary *ApprovalSummary
	// signature and keyID say how the approval's records were sealed
	// (see openApproval).
	signature, keyID string
}

func (c *approvalCheck) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// checkApproval checks request id's approval evidence, keys being its
// keys in the store and the spool and attempts its attempts. A request
// that never asked for approval is checked only for decision records that
// claim it did. With trusted keys, each approval record must be signed
// by one of them (see openApproval). Only a failing store is an error.
func (r *requestCopies) checkApproval(ctx context.Context, id string, keys []string, attempts []Attempt) (*approvalCheck, error) {
	c := &approvalCheck{r: r, id: id, has: map[string]bool{}, attempts: attempts, decisions: map[int]DecisionRecord{}}
	for _, k := range keys {
		c.has[k] = true
	}
	aKey, vKey := Key(id, ArtifactApprovalRequest), Key(id, ArtifactApproval)
	if err := c.readDecisions(ctx, c.has[aKey] || c.has[vKey]); err != nil {
		return nil, err
	}
	if !c.has[aKey] {
		if c.has[vKey] || c.has[Key(id, ArtifactApprovalUse)] {
			c.problem("%s: present without %s: a decision on an approval nobody asked for", vKey, ArtifactApprovalRequest)
		}
		if err := c.checkBorrowed(ctx); err != nil {
			return nil, err
		}
		c.withoutAsk()
		return c, nil
	}
	aData, err := c.readOne(ctx, aKey)
	if err != nil || aData == nil {
		return c, err
	}
	aBody := c.openApproval(aKey, aData)
	if aBody == nil {
		return c, nil
	}
	a, err := ParseApprovalRequestRecord(aBody, id)
	if err != nil {
		c.problem("%s: %v", aKey, err)
		return c, nil
	}
	c.a = &a
	if err := c.checkClaim(ctx); err != nil {
		return nil, err
	}
	if a.NestedRequestID != "" {
		if err := c.checkNested(ctx); err != nil {
			return nil, err
		}
	} else if err := c.checkOwn(ctx, aData); err != nil {
		return nil, err
	} else if err := c.checkBorrowed(ctx); err != nil {
		// Attempts before the one that asked may have waited on another
		// request's pending approval of the same call.
		return nil, err
	}
	c.summary = &ApprovalSummary{ApprovalID: a.ApprovalID, NestedRequestID: a.NestedRequestID,
		State: approvalState(a.Attempt, c.v, c.use != nil, attempts), Signature: c.signature, KeyID: c.keyID}
	if c.v != nil {
		c.summary.Approver = c.v.Approver
	}
	if c.use != nil {
		c.summary.UsedBy = c.use.UsedBy
	}
	return c, nil
}

// awaiting reports whether the request, with no manifest and nothing
// dispatched, waits for a human (no decision yet) or for its retry (an
// approval not used yet).
func (c *approvalCheck) awaiting() bool {
	return c.a != nil && len(c.problems) == 0 && (c.v == nil || c.v.Decision == ApprovalApprove)
}

// readOne returns the first copy of key, or nil when it is gone.
func (c *approvalCheck) readOne(ctx context.Context, key string) ([]byte, error) {
	copies, err := c.r.read(ctx, key)
	if err != nil || len(copies) == 0 {
		return nil, err
	}
	return copies[0].data, nil
}

// readDecisions reads every decided attempt's decision record. An
// unreadable one is a problem only when the request has approval evidence
// the record must agree with; otherwise the manifest's digests judge it.
func (c *approvalCheck) readDecisions(ctx context.Context, strict bool) error {
	for _, a := range c.attempts {
		if !a.Decided {
			continue
		}
		key := AttemptKey(c.id, a.Number, ArtifactPolicyDecision)
		data, err := c.readOne(ctx, key)
		if err != nil {
			return err
		}
		d, err := c.r.parseDecision(key, data)
		if err != nil {
			if strict {
				c.problem("%s: unreadable: %v", key, err)
			}
			continue
		}
		c.decisions[a.Number] = d
	}
	return nil
}

// dispatched reports whether attempt n reached its driver: it is
// dispatched, or was and then closed by not_dispatched.json.
func (c *approvalCheck) dispatched(a Attempt) bool {
	return a.State == Dispatched || c.has[AttemptKey(c.id, a.Number, ArtifactNotDispatched)]
}

// eachDecision calls fn with every attempt that has a readable decision.
func (c *approvalCheck) eachDecision(fn func(a Attempt, d DecisionRecord, key string)) {
	for _, a := range c.attempts {
		if d, ok := c.decisions[a.Number]; ok {
			fn(a, d, AttemptKey(c.id, a.Number, ArtifactPolicyDecision))
		}
	}
}

// withoutAsk checks the decisions of a request with no
// approval_request.json: none may have been dispatched while holding the
// call for approval, close its attempt as awaiting an approval (which is
// written only once A is stored), or name an approval's decision. Nor may
// one allow the call by a rule that, under the same policy set, held it
// for approval: a permit marked for approval never allows by itself, so
// only a used approval, whose evidence is gone, explains it.
func (c *approvalCheck) withoutAsk() {
	held := map[[2]string]int{} // rule and policy set digest → attempt
	c.eachDecision(func(a Attempt, d DecisionRecord, key string) {
		if d.Decision == DecisionApprovalRequired && d.PolicySetDigest != "" {
			held[[2]string{d.RuleID, d.PolicySetDigest}] = a.Number
		}
	})
	c.eachDecision(func(a Attempt, d DecisionRecord, key string) {
		n, wasHeld := held[[2]string{d.RuleID, d.PolicySetDigest}]
		switch {
		case d.Decision == DecisionApprovalRequired && c.dispatched(a):
			c.problem("%s: decided %s, yet attempt %d was dispatched", key, DecisionApprovalRequired, a.Number)
		case d.Decision == DecisionApprovalRequired && strings.HasPrefix(a.Reason, AwaitingApprovalReason("")):
			c.problem("%s: attempt %d waits for an approval (%q), but the request has no %s", key, a.Number, a.Reason, ArtifactApprovalRequest)
		case d.Approval != nil && d.Approval.RequestID != "":
			// Another request's approval: checkBorrowed judged it.
		case d.Approval != nil && d.Approval.Outcome != ApprovalPending:
			c.problem("%s: names approval %s (%s), but the request has no %s", key, d.Approval.ApprovalID, d.Approval.Outcome, ArtifactApprovalRequest)
		case d.Decision == "allow" && wasHeld:
			c.problem("%s: allowed by rule %q, which under the same policy set held the call for approval at attempt %d, but the request has no %s",
				key, d.RuleID, n, ArtifactApprovalRequest)
		}
	})
}

// checkClaim compares A with request.json: the call approved must be the
// call claimed. A parent's A, which waits on its guest's call, may carry
// either its own hash or the guest call's; readNested judges the latter.
func (c *approvalCheck) checkClaim(ctx context.Context) error {
	key := Key(c.id, ArtifactRequest)
	data, err := c.readOne(ctx, key)
	if err != nil {
		return err
	}
	var req RequestRecord
	switch {
	case data == nil:
		c.problem("%s: missing, so %s binds no call", key, ArtifactApprovalRequest)
	case json.Unmarshal(data, &req) != nil:
		c.problem("%s: unreadable, so %s binds no call", key, ArtifactApprovalRequest)
	case c.a.NestedRequestID != "":
		c.claimHash = req.CanonicalRequestHash
	case req.CanonicalRequestHash != c.a.CanonicalRequestHash:
		c.problem("%s: canonical_request_hash is %s, %s asks about %s", key, req.CanonicalRequestHash, ArtifactApprovalRequest, c.a.CanonicalRequestHash)
	}
	return nil
}

// asking returns the attempt that asked for the approval and its decision.
func (c *approvalCheck) asking() (Attempt, DecisionRecord, bool) {
	for _, at := range c.attempts {
		if at.Number == c.a.Attempt {
			d, ok := c.decisions[at.Number]
			if !ok {
				c.problem("%s: attempt %d, which asked for the approval, has no readable decision", Key(c.id, ArtifactApprovalRequest), at.Number)
			}
			return at, d, ok
		}
	}
	if c.attempts != nil {
		c.problem("%s: attempt %d, which asked for the approval, is not stored", Key(c.id, ArtifactApprovalRequest), c.a.Attempt)
	}
	return Attempt{}, DecisionRecord{}, false
}

// checkOwn checks a request that asked for its own approval: the attempt
// that asked, the decision V and every attempt against both.
func (c *approvalCheck) checkOwn(ctx context.Context, aData []byte) error {
	a := c.a
	aKey := Key(c.id, ArtifactApprovalRequest)
	if at, d, ok := c.asking(); ok {
		dKey := AttemptKey(c.id, at.Number, ArtifactPolicyDecision)
		switch {
		case d.Decision != DecisionApprovalRequired:
			c.problem("%s: attempt %d asked for approval, but its decision is %q", aKey, at.Number, d.Decision)
		case d.Approval == nil || d.Approval.ApprovalID != a.ApprovalID:
			c.problem("%s: does not name approval %s", dKey, a.ApprovalID)
		case d.RuleID != a.RuleID:
			c.problem("%s: rule_id is %q, %s asks under %q", dKey, d.RuleID, ArtifactApprovalRequest, a.RuleID)
		case c.dispatched(at):
			c.problem("%s: attempt %d asked for approval, yet was dispatched", aKey, at.Number)
		}
	}
	vKey := Key(c.id, ArtifactApproval)
	if c.has[vKey] {
		vData, err := c.readOne(ctx, vKey)
		if err != nil {
			return err
		}
		c.readDecision(vKey, vData, c.id, aData)
	}
	if c.has[Key(c.id, ArtifactApprovalUse)] {
		if err := c.readUse(ctx); err != nil {
			return err
		}
	}
	c.checkReasons()
	c.eachDecision(c.checkAttempt)
	return nil
}

// readDecision authenticates and parses V (the stored bytes vData of
// vKey, which belongs to request owner) and checks it is bound to A, whose
// stored bytes are aData.
// Order is proved by the digests, not by clocks: V holds A's SHA-256 and
// the attempt that uses V holds V's, so neither can predate what it
// names, while replicas' clocks may disagree by seconds. Times are only
// compared with expires_at by the gateway that read its own clock to
// decide, exactly as it decided.
func (c *approvalCheck) readDecision(vKey string, vData []byte, owner string, aData []byte) {
	if vData == nil {
		return
	}
	body := c.openApproval(vKey, vData)
	if body == nil {
		return
	}
	v, err := ParseApprovalRecord(body, owner)
	if err != nil {
		c.problem("%s: %v", vKey, err)
		return
	}
	a := c.a
	aSum, vSum := sha256.Sum256(aData), sha256.Sum256(vData)
	switch {
	case v.ApprovalID != a.ApprovalID:
		c.problem("%s: decides approval %s, %s asks for %s", vKey, v.ApprovalID, ArtifactApprovalRequest, a.ApprovalID)
	case v.ApprovalRequestSHA256 != hex.EncodeToString(aSum[:]):
		c.problem("%s: approval_request_sha256 %s is not the SHA-256 of the stored %s", vKey, v.ApprovalRequestSHA256, ArtifactApprovalRequest)
	case v.CanonicalRequestHash != a.CanonicalRequestHash || v.PolicySetDigest != a.PolicySetDigest || v.RuleID != a.RuleID:
		c.problem("%s: is bound to another call, policy set or rule than %s asks about", vKey, ArtifactApprovalRequest)
	case v.Decision != ApprovalExpired && !v.DecidedAt.Before(a.ExpiresAt):
		c.problem("%s: %s decided at %s, at or after expires_at %s", vKey, v.Decision, stamp(v.DecidedAt), stamp(a.ExpiresAt))
	case v.Decision == ApprovalExpired && v.DecidedAt.Before(a.ExpiresAt):
		c.problem("%s: expired at %s, before expires_at %s", vKey, stamp(v.DecidedAt), stamp(a.ExpiresAt))
	default:
		c.v, c.vSum = &v, hex.EncodeToString(vSum[:])
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// checkReasons checks that only the attempt that asked is closed as
// awaiting this approval.
func (c *approvalCheck) checkReasons() {
	for _, at := range c.attempts {
		if !strings.HasPrefix(at.Reason, AwaitingApprovalReason("")) {
			continue
		}
		if at.Number != c.a.Attempt || at.Reason != AwaitingApprovalReason(c.a.ApprovalID) {
			c.problem("%s: attempt %d closed %q, but %s was asked for by attempt %d",
				AttemptKey(c.id, at.Number, ArtifactDispatch), at.Number, at.Reason, c.a.ApprovalID, c.a.Attempt)
		}
	}
}

// checkAttempt checks one attempt's decision of a request with its own
// approval. Before the attempt that asked, a decision may hold the call
// for an approval whose request was never stored, but never name a
// decided one. After it, every decision goes through the approval: an
// allow uses V=approve before expires_at; a
// deny that names the approval agrees with V; nothing asks again.
func (c *approvalCheck) checkAttempt(at Attempt, d DecisionRecord, key string) {
	a := c.a
	switch {
	case d.Decision == DecisionApprovalRequired && c.dispatched(at):
		c.problem("%s: decided %s, yet attempt %d was dispatched", key, DecisionApprovalRequired, at.Number)
	case at.Number < a.Attempt && d.Approval != nil && d.Approval.Outcome != ApprovalPending:
		c.problem("%s: names approval %s (%s) before attempt %d asked for it", key, d.Approval.ApprovalID, d.Approval.Outcome, a.Attempt)
	case at.Number <= a.Attempt:
	case d.Decision == DecisionApprovalRequired:
		c.problem("%s: asks for approval again after attempt %d did", key, a.Attempt)
	case d.Decision == "allow":
		c.checkUse(at, d, key)
	case d.Approval != nil:
		c.checkEnd(d, key)
	}
}

// checkUse checks an allowed attempt after the one that asked: the record
// that consumes the approval.
func (c *approvalCheck) checkUse(at Attempt, d DecisionRecord, key string) {
	a, v := c.a, c.v
	switch {
	case d.Approval == nil || d.Approval.ApprovalID != a.ApprovalID || d.Approval.Outcome != ApprovalApprove:
		c.problem("%s: attempt %d is allowed after approval %s was asked for, without naming its approval", key, at.Number, a.ApprovalID)
	case v == nil:
		c.problem("%s: attempt %d runs under approval %s, but no valid %s approves it", key, at.Number, a.ApprovalID, ArtifactApproval)
	case v.Decision != ApprovalApprove:
		c.problem("%s: attempt %d runs under approval %s, which was %s", key, at.Number, a.ApprovalID, v.Decision)
	case d.Approval.ApprovalSHA256 != c.vSum:
		c.problem("%s: approval_sha256 %s is not the SHA-256 of the stored %s", key, d.Approval.ApprovalSHA256, ArtifactApproval)
	case !d.DecidedAt.Before(a.ExpiresAt):
		c.problem("%s: attempt %d used approval %s at %s, at or after expires_at %s", key, at.Number, a.ApprovalID,
			stamp(d.DecidedAt), stamp(a.ExpiresAt))
	case c.use != nil && c.use.UsedBy != c.id:
		c.problem("%s: attempt %d runs under approval %s, which %s says request %s used", key, at.Number, a.ApprovalID,
			ArtifactApprovalUse, c.use.UsedBy)
	}
}

// checkEnd checks a deny after the one that asked which names the
// approval: the final deny of a denied or expired approval, of an
// approval policy no longer accepts, or of one approved but not used
// before it expired.
func (c *approvalCheck) checkEnd(d DecisionRecord, key string) {
	a, v, da := c.a, c.v, d.Approval
	unusedInTime := v != nil && v.Decision == ApprovalApprove && da.Outcome == ApprovalExpired && !d.DecidedAt.Before(a.ExpiresAt)
	usedElsewhere := v != nil && v.Decision == ApprovalApprove && c.use != nil && c.use.UsedBy != c.id
	switch {
	case da.ApprovalID != a.ApprovalID:
		c.problem("%s: names approval %s, the request asked for %s", key, da.ApprovalID, a.ApprovalID)
	case v == nil:
		c.problem("%s: ends on approval %s (%s), but no valid %s decides it", key, a.ApprovalID, da.Outcome, ArtifactApproval)
	case da.Outcome == ApprovalUsed && !usedElsewhere:
		c.problem("%s: says approval %s was used by another request, but no valid %s says so", key, a.ApprovalID, ArtifactApprovalUse)
	case da.Outcome != v.Decision && !unusedInTime && da.Outcome != ApprovalUsed:
		c.problem("%s: says approval %s was %q, %s says %q", key, a.ApprovalID, da.Outcome, ArtifactApproval, v.Decision)
	case da.ApprovalSHA256 != c.vSum:
		c.problem("%s: approval_sha256 %s is not the SHA-256 of the stored %s", key, da.ApprovalSHA256, ArtifactApproval)
	case (v.Decision != ApprovalApprove || unusedInTime || da.Outcome == ApprovalUsed) && d.RuleID != a.RuleID:
		c.problem("%s: a %s approval ends the request under rule %q, not the approval's %q", key, da.Outcome, d.RuleID, a.RuleID)
	}
}

// checkNested checks a parent whose sandboxed guest's call waits for the
// nested request's approval: the parent's asking attempt was allowed,
// dispatched and closed not_dispatched; it has no approval.json of its
// own; the nested request asked for the same approval; and a decision of
// the parent that names the approval's decision names the nested V.
func (c *approvalCheck) checkNested(ctx context.Context) error {
	a := c.a
	aKey := Key(c.id, ArtifactApprovalRequest)
	if at, d, ok := c.asking(); ok {
		switch {
		case d.Decision != "allow":
			c.problem("%s: attempt %d waits on a guest's approval, but its own decision is %q", aKey, at.Number, d.Decision)
		case at.State != NotDispatched || !c.has[AttemptKey(c.id, at.Number, ArtifactNotDispatched)]:
			c.problem("%s: attempt %d waits on a guest's approval, but was not dispatched and then closed %s", aKey, at.Number, NotDispatched)
		}
	}
	if vKey := Key(c.id, ArtifactApproval); c.has[vKey] {
		c.problem("%s: the approval is nested request %s's, so the parent has no %s of its own", vKey, a.NestedRequestID, ArtifactApproval)
	}
	if err := c.readNested(ctx); err != nil {
		return err
	}
	vKey := Key(a.NestedRequestID, ArtifactApproval)
	c.eachDecision(func(at Attempt, d DecisionRecord, key string) {
		switch {
		case d.Decision == DecisionApprovalRequired && c.dispatched(at):
			c.problem("%s: decided %s, yet attempt %d was dispatched", key, DecisionApprovalRequired, at.Number)
		case d.Approval != nil && d.Approval.ApprovalSHA256 != "" && (c.v == nil || d.Approval.ApprovalSHA256 != c.vSum):
			c.problem("%s: approval_sha256 %s is not the SHA-256 of %s", key, d.Approval.ApprovalSHA256, vKey)
		}
	})
	return nil
}

// readNested reads the nested request's approval_request.json, which must
// ask for the approval the parent waits on, and its approval.json, judged
// against the nested request's own A, which it is bound to.
func (c *approvalCheck) readNested(ctx context.Context) error {
	a := c.a
	aKey, nestedKey := Key(c.id, ArtifactApprovalRequest), Key(a.NestedRequestID, ArtifactApprovalRequest)
	nData, err := c.r.v.store.Get(ctx, nestedKey)
	if errors.Is(err, ErrNotExist) {
		c.problem("%s: waits on %s, which is missing", aKey, nestedKey)
		return nil
	}
	if err != nil {
		return err
	}
	nBody := c.openApproval(nestedKey, nData)
	if nBody == nil {
		return nil
	}
	n, err := ParseApprovalRequestRecord(nBody, a.NestedRequestID)
	switch {
	case err != nil:
		c.problem("%s: %v", nestedKey, err)
		return nil
	case n.ApprovalID != a.ApprovalID || n.RuleID != a.RuleID || !n.ExpiresAt.Equal(a.ExpiresAt) ||
		n.ParentRequestID != c.id && (n.ParentRequestID != "" || !strings.HasPrefix(a.NestedRequestID, c.id+":")):
		c.problem("%s: waits on approval %s of %s, which asks for %s under rule %q for parent %q",
			aKey, a.ApprovalID, a.NestedRequestID, n.ApprovalID, n.RuleID, n.ParentRequestID)
		return nil
	case c.claimHash != "" && a.CanonicalRequestHash != c.claimHash && a.CanonicalRequestHash != n.CanonicalRequestHash:
		c.problem("%s: canonical_request_hash %s is neither the parent's claim's nor its guest call's", aKey, a.CanonicalRequestHash)
	}
	vKey := Key(a.NestedRequestID, ArtifactApproval)
	vData, err := c.r.v.store.Get(ctx, vKey)
	switch {
	case errors.Is(err, ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	c.a = &n
	c.readDecision(vKey, vData, a.NestedRequestID, nData)
	c.a = a
	return nil
}

// finalProblems checks a request with a manifest against its approval: the
// manifest is of the call asked about, and, as a manifest is written only
// once the approval is decided, a request that asked for its own approval
// has its approval.json.
func (c *approvalCheck) finalProblems(m Manifest) []string {
	if c.a == nil {
		return nil
	}
	manifestKey := Key(c.id, ArtifactManifest)
	var out []string
	if m.CanonicalRequestHash != "" && c.a.NestedRequestID == "" && m.CanonicalRequestHash != c.a.CanonicalRequestHash {
		out = append(out, fmt.Sprintf("%s: canonical_request_hash is %s, %s asks about %s",
			manifestKey, m.CanonicalRequestHash, ArtifactApprovalRequest, c.a.CanonicalRequestHash))
	}
	if c.a.NestedRequestID == "" && !c.has[Key(c.id, ArtifactApproval)] {
		out = append(out, fmt.Sprintf("%s: the request asked for approval %s and was finished, but has no %s",
			manifestKey, c.a.ApprovalID, ArtifactApproval))
	}
	return out
}
