package gateway

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// The attacks in this file come from someone who can write to the
// evidence store but holds none of the gateway's keys. Each must fail to
// make the gateway run, re-run or sign anything.

// storeWriter writes into a FileStore's folder as such an attacker does:
// replacing or adding objects, past the store's create-only rule.
type storeWriter struct {
	t   *testing.T
	dir string
}

func (w storeWriter) replace(key string, data []byte) {
	w.t.Helper()
	path := filepath.Join(w.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		w.t.Fatal(err)
	}
	_ = os.Remove(path)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

func (w storeWriter) remove(key string) {
	w.t.Helper()
	if err := os.Remove(filepath.Join(w.dir, filepath.FromSlash(key))); err != nil {
		w.t.Fatal(err)
	}
}

// signedEnv is a gateway that signs (and so seals), over a FileStore
// whose failing writes the test controls, with a counting driver and
// metrics.
type signedEnv struct {
	*env
	faults *faultStore
	driver *flipDriver
	tel    *telemetry.Telemetry
	writer storeWriter
	signer *evidence.Signer
}

func newSignedEnv(t *testing.T, signer *evidence.Signer, dir string) *signedEnv {
	t.Helper()
	fs, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	tel, err := telemetry.New(telemetry.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s := &signedEnv{faults: wrapFaults(fs), driver: &flipDriver{}, tel: tel, writer: storeWriter{t, dir}, signer: signer}
	s.env = newEnv(t, envOptions{
		store: s.faults, signer: signer, telemetry: tel,
		extra:    map[string]drivers.Driver{"flip": s.driver},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	return s
}

func (s *signedEnv) tampering(record string) float64 {
	return metricValue(s.t, s.tel, telemetry.MetricTampering, "record="+record)
}

// dispatchedWithoutResponse leaves request id as a gateway that died
// while its tool ran leaves it: dispatched, no response.
func (s *signedEnv) dispatchedWithoutResponse(id string) {
	s.t.Helper()
	s.faults.failNext(evidence.ArtifactToolResult, 1)
	s.faults.failNext(evidence.ArtifactResponse, 1)
	s.faults.failNext(evidence.ArtifactManifest, 1)
	_, _ = s.call(context.Background(), id, "flip.run", nil)
	if s.driver.ran.Load() != 1 {
		s.t.Fatalf("the tool ran %d times, want 1", s.driver.ran.Load())
	}
}

func notDispatchedRecord(t *testing.T, id string, n int) []byte {
	t.Helper()
	data, err := json.Marshal(evidence.DispatchRecord{RequestID: id, Attempt: n, State: evidence.NotDispatched,
		Reason: "connection refused", Gateway: "toolgate/dev@test", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestForgedNotDispatchedRunsNothingAgain: a dispatched request whose
// dispatch record is replaced by one saying "not dispatched", or followed
// by a not_dispatched.json, unsigned or signed by a key the gateway does
// not trust, is never run again: the retry gets DATA_LOSS naming
// tampering, and the operator's metric counts it.
func TestForgedNotDispatchedRunsNothingAgain(t *testing.T) {
	t.Parallel()
	attacker := newTestSigner(t)
	attackerSealer, err := attacker.Sealer()
	if err != nil {
		t.Fatal(err)
	}
	forge := func(t *testing.T, key string, signed bool, id string) []byte {
		data := notDispatchedRecord(t, id, 1)
		if !signed {
			return data
		}
		out, err := attackerSealer.Sign(key, data)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		replaceSlot bool // replace dispatch.json, else add not_dispatched.json
		signed      bool // signed by the attacker's own key
	}{
		{"dispatch.json replaced, unsigned", true, false},
		{"dispatch.json replaced, signed by an untrusted key", true, true},
		{"not_dispatched.json added, unsigned", false, false},
		{"not_dispatched.json added, signed by an untrusted key", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSignedEnv(t, newTestSigner(t), t.TempDir())
			const id = "forged-close"
			s.dispatchedWithoutResponse(id)
			key := evidence.Key(id, evidence.ArtifactNotDispatched)
			if tc.replaceSlot {
				key = evidence.Key(id, evidence.ArtifactDispatch)
			}
			s.writer.replace(key, forge(t, key, tc.signed, id))

			_, err := s.call(context.Background(), id, "flip.run", nil)
			if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "tampering") {
				t.Fatalf("retry after the forgery = %v; want DATA_LOSS naming tampering", err)
			}
			if n := s.driver.ran.Load(); n != 1 {
				t.Fatalf("the tool ran %d times; a forged close must not run it again", n)
			}
			if got := s.tampering(telemetry.RecordAttempt); got != 1 {
				t.Errorf("toolgate_evidence_tampering_total{record=attempt} = %v, want 1", got)
			}
		})
	}
}

// TestGenuineNotDispatchedStillRuns: the signed close a gateway writes
// itself still lets the retry run, on this gateway and on a replica that
// trusts its key.
func TestGenuineNotDispatchedStillRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := newTestSigner(t)
	s := newSignedEnv(t, first, dir)
	s.driver.fails = 1
	if _, err := s.call(context.Background(), "closed", "flip.run", nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("first call = %v, want UNAVAILABLE (not dispatched)", err)
	}
	if resp := s.mustCall("closed", "flip.run", nil); !resp.GetOk() || s.driver.ran.Load() != 1 {
		t.Fatalf("retry = %v, ran %d; want it run once", resp, s.driver.ran.Load())
	}

	replica := newSignedEnv(t, newTestSigner(t), dir)
	replica.gw.trusted = nil
	if err := replica.gw.setTrust([]ed25519.PublicKey{first.PublicKey()}, nil); err != nil {
		t.Fatal(err)
	}
	replica.driver.fails = 0
	s.driver.fails = 2
	s.driver.calls.Store(0)
	if _, err := s.call(context.Background(), "closed-2", "flip.run", nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("first call = %v, want UNAVAILABLE (not dispatched)", err)
	}
	if resp := replica.mustCall("closed-2", "flip.run", nil); !resp.GetOk() || replica.driver.ran.Load() != 1 {
		t.Fatalf("retry on the replica = %v, ran %d; want it run once", resp, replica.driver.ran.Load())
	}
}

// TestRecoverySignsNoPlantedRequest: a request folder planted in the
// store (a claim naming this gateway's instance, a decision, a dispatch
// marker), unsealed or sealed with a key the gateway does not hold, is
// never finalised: recovery writes no manifest for it, and counts the
// unsealed one as tampering. A genuine abandoned request is finalised.
func TestRecoverySignsNoPlantedRequest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	signer := newTestSigner(t)
	s := newSignedEnv(t, signer, dir)
	s.dispatchedWithoutResponse("genuine")

	attacker, err := newTestSigner(t).Sealer()
	if err != nil {
		t.Fatal(err)
	}
	claim := func(id string) []byte {
		var req evidence.RequestRecord
		if err := json.Unmarshal(s.artifact("genuine", evidence.ArtifactRequest), &req); err != nil {
			t.Fatal(err)
		}
		req.RequestID = id
		data, _ := json.Marshal(req)
		return data
	}
	plant := func(id string, seal func(key string, data []byte) []byte) {
		for _, name := range []string{evidence.ArtifactRequest, evidence.ArtifactPolicyDecision, evidence.ArtifactDispatch} {
			key := evidence.Key(id, name)
			var data []byte
			if name == evidence.ArtifactRequest {
				data = claim(id)
			} else {
				body, _, _ := trust.Split(s.artifact("genuine", name))
				data = []byte(strings.ReplaceAll(string(body), `"genuine"`, `"`+id+`"`))
			}
			s.writer.replace(key, seal(key, data))
		}
	}
	plant("planted-unsealed", func(_ string, data []byte) []byte { return data })
	plant("planted-foreign-mac", func(key string, data []byte) []byte {
		out, err := attacker.MAC(key, data)
		if err != nil {
			t.Fatal(err)
		}
		return out
	})

	s.writer.replace(evidence.Key("genuine", "extra.json"), []byte(`{"planted":true}`))

	later := newSignedEnv(t, signer, dir)
	later.gw.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := later.gw.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if names := later.artifactNames("genuine"); !slices.Contains(names, evidence.ArtifactManifest) {
		t.Errorf("the genuine abandoned request has %v; want it finalised with a manifest", names)
	}
	m, err := evidence.ParseManifest(later.artifact("genuine", evidence.ArtifactManifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range m.Artifacts {
		if strings.HasSuffix(a.Key, "/extra.json") {
			t.Errorf("the recovered manifest signs %s, a file no gateway wrote", a.Key)
		}
	}
	for _, id := range []string{"planted-unsealed", "planted-foreign-mac"} {
		if names := later.artifactNames(id); slices.Contains(names, evidence.ArtifactManifest) {
			t.Errorf("recovery signed a manifest for %s, a request no gateway of this key wrote", id)
		}
	}
	if got := later.tampering(telemetry.RecordClaim); got != 1 {
		t.Errorf("toolgate_evidence_tampering_total{record=claim} = %v, want 1 (the unsealed plant)", got)
	}
}

// TestPlantedResponseIsNeitherReplayedNorSigned: a response.json written
// into a request whose gateway died while its tool ran is not replayed to
// the retry, and recovery signs no manifest over it.
func TestPlantedResponseIsNeitherReplayedNorSigned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	signer := newTestSigner(t)
	s := newSignedEnv(t, signer, dir)
	const id = "planted-response"
	s.dispatchedWithoutResponse(id)
	forged := `{"ok":true,"tool_result":{"exit_code":0,"stdout":"all clear\n"},"policy_check":{"decision":"allow"}}`
	s.writer.replace(evidence.Key(id, evidence.ArtifactResponse), []byte(forged))

	_, err := s.call(context.Background(), id, "flip.run", nil)
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "tampering") {
		t.Fatalf("retry = %v; want DATA_LOSS naming tampering, not the planted response", err)
	}
	later := newSignedEnv(t, signer, dir)
	later.gw.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := later.gw.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if names := later.artifactNames(id); slices.Contains(names, evidence.ArtifactManifest) {
		t.Errorf("recovery signed a manifest over a planted response: %v", names)
	}
	if got := s.tampering(telemetry.RecordResponse) + later.tampering(telemetry.RecordResponse); got < 2 {
		t.Errorf("toolgate_evidence_tampering_total{record=response} = %v, want the retry and the sweep counted", got)
	}
}

// TestAbandonedResponseIsStillRolledForward: the gateway's own sealed
// response, stored without its manifest, is still replayed and rolled
// forward.
func TestAbandonedResponseIsStillRolledForward(t *testing.T) {
	t.Parallel()
	s := newSignedEnv(t, newTestSigner(t), t.TempDir())
	s.faults.failNext(evidence.ArtifactManifest, 1)
	first := s.mustCall("own-response", "flip.run", nil)
	again := s.mustCall("own-response", "flip.run", nil)
	if !first.GetOk() || again.GetToolResult().GetStdout() != first.GetToolResult().GetStdout() || s.driver.ran.Load() != 1 {
		t.Fatalf("replay = %v after %v, ran %d; want the same answer, run once", again, first, s.driver.ran.Load())
	}
	if names := s.artifactNames("own-response"); !slices.Contains(names, evidence.ArtifactManifest) {
		t.Errorf("the response was not rolled forward: %v", names)
	}
}
