package evidence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The times of an approval story: asked at t0, expiring a day later.
var (
	storyT0      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	storyExpires = storyT0.Add(24 * time.Hour)
)

const (
	storyGateway = "toolgate/test@gw-1"
	storyRule    = "ops-deletes"
	storyDigest  = "sha256:" + "cd" + "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
)

// story writes the evidence of one request as a gateway does (the
// approvals contract): its claim, the attempt that asks for approval and
// approval_request.json, the approver's approval.json, the attempt that
// uses it, and the manifest. With a signer, the approval records are
// signed and the manifest too. Each step may be bent to forge evidence.
type story struct {
	t      testing.TB
	s      Store
	id     string
	signer *Signer
	hash   string // request.json's canonical_request_hash
	a      ApprovalRequestRecord
	aData  []byte
	v      *ApprovalRecord
	vData  []byte
	keys   []string // stored so far, in order, for the manifest
}

// newStory stores request id's claim; hash, if given, is its canonical
// request hash.
func newStory(t testing.TB, s Store, id string, signer *Signer, hash ...string) *story {
	t.Helper()
	st := &story{t: t, s: s, id: id, signer: signer, hash: "sha256:" + strings.Repeat("ab", 32)}
	if len(hash) > 0 {
		st.hash = hash[0]
	}
	st.putJSON(ArtifactRequest, RequestRecord{RequestID: id, Caller: "bob", ToolID: "fs.delete", Args: json.RawMessage(`{}`),
		ReceivedAt: storyT0, CanonicalRequestHash: st.hash, Gateway: storyGateway})
	return st
}

func (st *story) put(name string, data []byte) {
	st.t.Helper()
	mustPut(st.t, st.s, Key(st.id, name), data)
	st.keys = append(st.keys, Key(st.id, name))
}

func (st *story) putJSON(name string, v any) []byte {
	st.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		st.t.Fatal(err)
	}
	if d, ok := v.(DispatchRecord); ok && d.State == NotDispatched {
		data = st.seal(name, data) // a close is signed as approvals are
	}
	st.put(name, data)
	return data
}

// sealClose signs data, a record to be stored under key, with signer's
// seal, as a gateway signs its closes of attempts and its approvals.
func sealClose(t testing.TB, signer *Signer, key string, data []byte) []byte {
	t.Helper()
	sealer, err := signer.Sealer()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sealer.Sign(key, data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// seal signs data, an approval record to be stored as name, with the
// story's signer, as a gateway signs its approval records; unsigned when
// the story has no signer.
func (st *story) seal(name string, data []byte) []byte {
	st.t.Helper()
	if st.signer == nil {
		return data
	}
	return sealClose(st.t, st.signer, Key(st.id, name), data)
}

// putSealed stores v, an approval record, as name, sealed (see seal).
func (st *story) putSealed(name string, v any) []byte {
	st.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		st.t.Fatal(err)
	}
	data = st.seal(name, data)
	st.put(name, data)
	return data
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func (st *story) decide(n int, d DecisionRecord) {
	st.t.Helper()
	d.RequestID, d.Attempt, d.Caller, d.ToolID, d.Gateway = st.id, n, "bob", "fs.delete", storyGateway
	d.PolicySetDigest = storyDigest
	st.putJSON(AttemptArtifact(n, ArtifactPolicyDecision), d)
}

func (st *story) dispatch(n int, state, reason string) {
	st.t.Helper()
	st.putJSON(AttemptArtifact(n, ArtifactDispatch), DispatchRecord{RequestID: st.id, Attempt: n, State: state,
		Reason: reason, Gateway: storyGateway, At: storyT0})
}

// ask writes attempt n asking for approval, with change bending A.
func (st *story) ask(n int, change ...func(*ApprovalRequestRecord)) *story {
	st.t.Helper()
	st.a = ApprovalRequestRecord{RequestID: st.id, ApprovalID: NewApprovalID(), Attempt: n, Caller: "bob",
		Action: "call", ToolID: "fs.delete", Driver: "workspace", CanonicalRequestHash: st.hash, PolicyRef: "default",
		PolicySetDigest: storyDigest, RuleID: storyRule, Reason: "deletes files", Approvers: "ops",
		RequestedAt: storyT0, ExpiresAt: storyExpires, Gateway: storyGateway}
	st.decide(n, DecisionRecord{Decision: DecisionApprovalRequired, RuleID: storyRule, DecidedAt: storyT0,
		Approval: &DecisionApproval{ApprovalID: st.a.ApprovalID, Approvers: "ops", Outcome: ApprovalPending}})
	for _, c := range change {
		c(&st.a)
	}
	st.aData = st.putSealed(ArtifactApprovalRequest, st.a)
	st.dispatch(n, NotDispatched, AwaitingApprovalReason(st.a.ApprovalID))
	return st
}

// approval returns the decision an approver (or the expiry) makes at at.
func (st *story) approval(word string, at time.Time) ApprovalRecord {
	v := ApprovalRecord{RequestID: st.id, ApprovalID: st.a.ApprovalID, Decision: word, Approver: "alice",
		Reason: "checked with the owner", DecidedAt: at, CanonicalRequestHash: st.a.CanonicalRequestHash,
		PolicySetDigest: st.a.PolicySetDigest, RuleID: st.a.RuleID, ApprovalRequestSHA256: sha(st.aData),
		Authorization: &ApproverDecision{PolicyRef: "default", PolicySetDigest: storyDigest, RuleID: "ops-approve"},
		Gateway:       storyGateway}
	if word == ApprovalExpired {
		v.Approver, v.Reason, v.Authorization = storyGateway, "", nil
	}
	return v
}

// settle stores approval.json, with change bending it.
func (st *story) settle(word string, at time.Time, change ...func(*ApprovalRecord)) *story {
	st.t.Helper()
	v := st.approval(word, at)
	for _, c := range change {
		c(&v)
	}
	st.v = &v
	st.vData = st.putSealed(ArtifactApproval, v)
	return st
}

// use writes attempt n consuming the approval at at and running the tool,
// with change bending its decision.
func (st *story) use(n int, at time.Time, change ...func(*DecisionRecord)) *story {
	st.t.Helper()
	d := DecisionRecord{Decision: "allow", RuleID: storyRule, DecidedAt: at,
		Approval: &DecisionApproval{ApprovalID: st.a.ApprovalID, Approvers: "ops", Outcome: ApprovalApprove,
			ApprovalSHA256: sha(st.vData), Approver: "alice"}}
	for _, c := range change {
		c(&d)
	}
	st.decide(n, d)
	st.dispatch(n, Dispatched, "")
	return st
}

// end writes attempt n's final deny by an approval: denied, expired or
// stale; outcome, if given, overrides approval.json's decision.
func (st *story) end(n int, rule string, at time.Time, outcome ...string) *story {
	st.t.Helper()
	d := DecisionRecord{Decision: "deny", RuleID: rule, Reason: "approval ended", DecidedAt: at,
		Approval: &DecisionApproval{ApprovalID: st.a.ApprovalID, Approvers: "ops", Outcome: st.v.Decision,
			ApprovalSHA256: sha(st.vData), Approver: st.v.Approver}}
	if len(outcome) > 0 {
		d.Approval.Outcome = outcome[0]
	}
	st.decide(n, d)
	return st
}

// finish writes the result, the response and a manifest listing every
// artifact stored so far, signed by the story's signer.
func (st *story) finish() *story {
	st.t.Helper()
	st.putJSON(ArtifactResponse, ResponseRecord{OK: true, EvidenceRefs: []string{}})
	m := Manifest{Version: ManifestVersion, RequestID: st.id, CanonicalRequestHash: st.hash, EngineRef: "test",
		PolicySetDigest: storyDigest, Outcome: OutcomeCompleted, CreatedAt: storyT0.Add(3 * time.Hour)}
	ctx := context.Background()
	for _, k := range st.keys {
		data, err := st.s.Get(ctx, k)
		if err != nil {
			st.t.Fatal(err)
		}
		m.Artifacts = append(m.Artifacts, Digest(k, data))
	}
	if st.signer != nil {
		if err := st.signer.Sign(&m); err != nil {
			st.t.Fatal(err)
		}
	}
	data, err := EncodeManifest(m)
	if err != nil {
		st.t.Fatal(err)
	}
	mustPut(st.t, st.s, Key(st.id, ArtifactManifest), data)
	return st
}
