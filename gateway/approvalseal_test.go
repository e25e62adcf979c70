package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/gateway/telemetry"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// testSigner is a signing key made from seed.
func testSigner(t testing.TB, seed byte) *evidence.Signer {
	t.Helper()
	s, err := evidence.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testSealer is the record sealer of the signing key made from seed.
func testSealer(t testing.TB, seed byte) *trust.Sealer {
	t.Helper()
	s, err := testSigner(t, seed).Sealer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sealedApprovalEnv is an approvalEnv whose replicas sign with the key of
// seed 1, on a file store whose folder the test can write into as an
// attacker with access to the store would.
type sealedApprovalEnv struct {
	*approvalEnv
	dir string
	tel *telemetry.Telemetry
}

func newSealedApprovalEnv(t *testing.T, replicas int) *sealedApprovalEnv {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "evidence")
	store, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &sealedApprovalEnv{dir: dir, tel: newTelemetry(t), approvalEnv: newApprovalEnv(t, approvalEnvOptions{
		store: store, replicas: replicas, signer: func(int) *evidence.Signer { return testSigner(t, 1) },
	})}
	for _, g := range e.gws {
		g.telemetry = e.tel
	}
	return e
}

// plant writes data under key, replacing what is there.
func (e *sealedApprovalEnv) plant(key string, data []byte) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.dir, filepath.FromSlash(key))); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.t.Fatal(err)
	}
	if err := e.store.Put(context.Background(), key, data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *sealedApprovalEnv) raw(key string) []byte {
	e.t.Helper()
	data, err := e.store.Get(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// forgedApproval is the approval.json an attacker writes for held request
// id: an approval by bob, bound by digests copied from the stored
// approval_request.json, as a gateway would have written it.
func (e *sealedApprovalEnv) forgedApproval(id string) []byte {
	e.t.Helper()
	aData := e.raw(evidence.Key(id, evidence.ArtifactApprovalRequest))
	body, _, _ := trust.Split(aData)
	var a evidence.ApprovalRequestRecord
	if err := json.Unmarshal(body, &a); err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(aData)
	v, err := json.Marshal(evidence.ApprovalRecord{
		RequestID: id, ApprovalID: a.ApprovalID, Decision: evidence.ApprovalApprove, Approver: "bob",
		DecidedAt: e.clock.Now().UTC(), CanonicalRequestHash: a.CanonicalRequestHash, PolicySetDigest: a.PolicySetDigest,
		RuleID: a.RuleID, ApprovalRequestSHA256: hex.EncodeToString(sum[:]), Gateway: a.Gateway,
		Authorization: &evidence.ApproverDecision{PolicyRef: a.PolicyRef, PolicySetDigest: a.PolicySetDigest, RuleID: "ops_may_approve"},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// otherCall is the arguments of a call other than the held one, so that
// it asks for an approval of its own rather than waiting on the held
// call's.
var otherCall = map[string]any{"n": 2}

// TestForgedApprovalRecordsAreRefused: whoever can write to the store but
// holds no trusted key cannot get a held call run: an approval.json or
// approval_request.json the gateway did not sign is tampering. The retry
// gets DATA_LOSS and runs nothing, an approver's decision on it is refused
// and writes nothing, and the tampering is counted.
func TestForgedApprovalRecordsAreRefused(t *testing.T) {
	t.Parallel()
	approvalKey := evidence.Key("held", evidence.ArtifactApproval)
	askKey := evidence.Key("held", evidence.ArtifactApprovalRequest)
	for _, tc := range []struct {
		name   string
		attack func(e *sealedApprovalEnv)
		want   string // in the error, which names the record
	}{
		{"an unsealed approval.json with the digests copied", func(e *sealedApprovalEnv) {
			e.plant(approvalKey, e.forgedApproval("held"))
		}, "approval.json: the record carries no seal"},
		{"an approval.json signed by an untrusted key", func(e *sealedApprovalEnv) {
			sealed, err := testSealer(t, 2).Sign(approvalKey, e.forgedApproval("held"))
			if err != nil {
				t.Fatal(err)
			}
			e.plant(approvalKey, sealed)
		}, "sealed by a key that is not trusted"},
		{"an approval.json moved from another request", func(e *sealedApprovalEnv) {
			e.mustDecide("bob", e.pendingID("alice", "other", otherCall), "approve", "")
			e.plant(approvalKey, e.raw(evidence.Key("other", evidence.ArtifactApproval)))
		}, "held/approval.json: the signature by"},
		{"a genuine approval altered to name another approver", func(e *sealedApprovalEnv) {
			e.mustDecide("bob", e.pendingID("alice", "held", nil), "approve", "")
			genuine := e.raw(approvalKey)
			altered := bytes.Replace(genuine, []byte(`"approver": "bob"`), []byte(`"approver": "eve"`), 1)
			if bytes.Equal(genuine, altered) {
				t.Fatalf("no approver to alter in %s", genuine)
			}
			e.plant(approvalKey, altered)
		}, "does not match the record"},
		{"an approval_request.json swapped for another request's", func(e *sealedApprovalEnv) {
			e.pendingID("alice", "other", otherCall)
			e.plant(askKey, e.raw(evidence.Key("other", evidence.ArtifactApprovalRequest)))
			e.plant(approvalKey, e.forgedApproval("held"))
		}, "held/approval_request.json: the signature by"},
		{"an approval_request.json without its seal, as an older version wrote it", func(e *sealedApprovalEnv) {
			body, _, _ := trust.Split(e.raw(askKey))
			e.plant(askKey, body)
		}, "approval_request.json: the record carries no seal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSealedApprovalEnv(t, 1)
			apr := e.pendingID("alice", "held", nil)
			tc.attack(e)
			before, _ := e.store.Get(context.Background(), approvalKey)

			_, err := e.run(0, "alice", "held", nil)
			wantCode(t, err, codes.DataLoss, "failed authentication (evidence tampering), nothing was executed")
			wantCode(t, err, codes.DataLoss, tc.want)
			if n := e.driver.runs.Load(); n != 0 {
				t.Fatalf("the held call ran %d times on a forged approval", n)
			}
			_, err = e.decide(0, "carol", apr, "approve", "")
			wantCode(t, err, codes.DataLoss, "failed authentication")
			if after, _ := e.store.Get(context.Background(), approvalKey); !bytes.Equal(before, after) {
				t.Fatalf("a decision on a tampered approval wrote approval.json:\n%s", after)
			}
			if _, err := e.clients[0].ListApprovals(as("bob"), &toolgatev1.ListApprovalsRequest{State: "all"}); err != nil {
				t.Fatalf("one tampered approval broke the listing of the others: %v", err)
			}
			if got := metricValue(t, e.tel, telemetry.MetricTampering, "record=approval"); got < 2 {
				t.Errorf("%s{record=approval} = %v, want the retry and the decision counted", telemetry.MetricTampering, got)
			}
			if n := e.driver.runs.Load(); n != 0 {
				t.Fatalf("the held call ran %d times", n)
			}
			rep, err := evidence.Verify(context.Background(), e.store, "held",
				evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{testSigner(t, 1).PublicKey()}})
			if err != nil || !rep.Tampered() {
				t.Fatalf("verify with the gateway's key: %+v, %v; want tampered", rep, err)
			}
		})
	}
}

// TestApprovalIndexNamesOnlyAuthenticRequests: an index entry is only a
// pointer; what it points to must be an authenticated
// approval_request.json carrying that approval id.
func TestApprovalIndexNamesOnlyAuthenticRequests(t *testing.T) {
	t.Parallel()
	e := newSealedApprovalEnv(t, 1)
	apr := e.pendingID("alice", "held", nil)
	e.pendingID("alice", "decoy", otherCall)
	// The index of the real approval now points at a request held under
	// another approval id: it names nothing.
	e.plant(approval.IndexKey(apr), []byte("decoy"))
	_, err := e.decide(0, "bob", apr, "approve", "")
	wantCode(t, err, codes.NotFound, "no approval")
	// Pointing at a request whose record fails authentication decides
	// nothing either.
	body, _, _ := trust.Split(e.raw(evidence.Key("decoy", evidence.ArtifactApprovalRequest)))
	e.plant(evidence.Key("decoy", evidence.ArtifactApprovalRequest), body)
	_, err = e.decide(0, "bob", apr, "approve", "")
	wantCode(t, err, codes.DataLoss, "failed authentication")
	if keys := e.keys("decoy"); len(keys) == 0 || e.driver.runs.Load() != 0 {
		t.Fatalf("keys %v, runs %d", keys, e.driver.runs.Load())
	}
	for _, id := range []string{"held", "decoy"} {
		if _, err := e.store.Get(context.Background(), evidence.Key(id, evidence.ArtifactApproval)); !errors.Is(err, evidence.ErrNotExist) {
			t.Fatalf("%s: approval.json written (%v)", id, err)
		}
	}
}

// TestSignedApprovalRunsOnceAcrossReplicas: a genuine decision, signed by
// the replica that recorded it, is used by a retry on the other replica
// (same key) exactly once; verify with the key finds every approval record
// signed. A replica that does not trust the key refuses it as tampering.
func TestSignedApprovalRunsOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newSealedApprovalEnv(t, 2)
	apr := e.pendingID("alice", "held", nil)
	if _, err := e.decide(1, "bob", apr, "approve", "ok"); err != nil {
		t.Fatal(err)
	}
	resp, err := e.run(0, "alice", "held", nil)
	if err != nil || !resp.GetOk() || e.driver.runs.Load() != 1 {
		t.Fatalf("the approved call: %v, %v, %d runs", resp, err, e.driver.runs.Load())
	}
	for i := range 2 {
		if _, err := e.run(i, "alice", "held", nil); err != nil {
			t.Fatalf("replay on replica %d: %v", i, err)
		}
	}
	if n := e.driver.runs.Load(); n != 1 {
		t.Fatalf("the approved call ran %d times", n)
	}
	rep, err := evidence.Verify(context.Background(), e.store, "held",
		evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{testSigner(t, 1).PublicKey()}})
	if err != nil || rep.Status != evidence.StatusOK || rep.Approval == nil || rep.Approval.Signature != evidence.SignatureValid {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	if got := metricValue(t, e.tel, telemetry.MetricTampering, "record=approval"); got != 0 {
		t.Errorf("genuine approvals counted as tampering %v times", got)
	}

	// A gateway with its own key, trusting nobody else, on the same store.
	apr = e.pendingID("alice", "held-2", nil)
	e.mustDecide("bob", apr, "approve", "")
	stranger := newApprovalEnv(t, approvalEnvOptions{store: e.store, signer: func(int) *evidence.Signer { return testSigner(t, 3) }})
	_, err = stranger.run(0, "alice", "held-2", nil)
	wantCode(t, err, codes.DataLoss, "sealed by a key that is not trusted")
	if n := stranger.driver.runs.Load(); n != 0 {
		t.Fatalf("a decision signed by an untrusted key ran the call (%d runs)", n)
	}
}

// TestSignedGuestApprovalRunsOnceAndForgedOneIsRefused: a guest's call
// held for approval is used once under signing, and a forged approval of
// the nested request does not get the parent's guest run.
func TestSignedGuestApprovalRunsOnceAndForgedOneIsRefused(t *testing.T) {
	t.Parallel()
	t.Run("genuine", func(t *testing.T) {
		guestWaitsThenRunsOnce(t, newGuestEnvWith(t, guestOptions{script: gatedScript, signer: testSigner(t, 1)}))
	})
	t.Run("forged", func(t *testing.T) {
		t.Parallel()
		e := newGuestEnvWith(t, guestOptions{script: gatedScript, signer: testSigner(t, 1)})
		wantPending(t, e.run("par-1"))
		nid := nestedRequestID("par-1", e.toolCalls()[0][0])
		se := &sealedApprovalEnv{approvalEnv: &approvalEnv{t: t, store: e.store, clock: e.clock}}
		if err := e.store.Put(context.Background(), evidence.Key(nid, evidence.ArtifactApproval), se.forgedApproval(nid)); err != nil {
			t.Fatal(err)
		}
		_, err := e.client.RunTool(as("alice"), &toolgatev1.RunToolRequest{
			RequestId: "par-1", ToolId: "code.run", Args: mustStruct(t, map[string]any{"code": "return await gated.run({n: 1})"}),
		})
		wantCode(t, err, codes.DataLoss, "failed authentication (evidence tampering), nothing was executed")
		if n := e.gated.runs.Load(); n != 0 {
			t.Fatalf("the guest's held call ran %d times on a forged approval", n)
		}
	})
}

// BenchmarkApprovalSeal measures what signing adds to an approval's
// paths: signing a record as it is stored (once per ask and per decision)
// and checking one as it is read back (A on every retry while pending, A
// and V on the retry that uses the approval).
func BenchmarkApprovalSeal(b *testing.B) {
	e := newApprovalEnv(b, approvalEnvOptions{signer: func(int) *evidence.Signer { return testSigner(b, 1) }})
	g := e.gws[0]
	e.mustPend("alice", "held", nil)
	key := evidence.Key("held", evidence.ArtifactApprovalRequest)
	raw, err := e.store.Get(context.Background(), key)
	if err != nil {
		b.Fatal(err)
	}
	body, _, _ := trust.Split(raw)
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := g.signApproval(key, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		for b.Loop() {
			if _, err := g.openApproval(key, "held", raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
