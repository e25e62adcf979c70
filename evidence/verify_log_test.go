package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
	"golang.org/x/mod/sumdb/note"
)

// auditedBucket is a store written through a logged gateway's store, and
// what an auditor holds: the public key and a kept checkpoint.
type auditedBucket struct {
	mem    *MemoryStore
	signer *Signer
	cfg    LogConfig
	kept   []byte // the checkpoint after the first three calls
}

func newSigner(t testing.TB) *Signer {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(nil)
	s, err := NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func signedLogConfig(t testing.TB, s Store, signer *Signer) LogConfig {
	t.Helper()
	origin, err := LogOrigin(context.Background(), s, "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	sealer, trusted, err := LogKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	return LogConfig{
		Instance: "gw-1", Origin: origin, Gateway: "toolgate/test@gw-1", Sealer: sealer, Trusted: trusted,
		Interval: time.Hour, OpTimeout: time.Second, MaxPending: 1000, Logger: slog.New(slog.DiscardHandler),
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	}
}

// signedCall stores a finished call as a gateway does: request.json, the
// decision and a signed manifest listing both.
func signedCall(t *testing.T, s Store, id string, signer *Signer) {
	t.Helper()
	req, _ := json.Marshal(RequestRecord{
		RequestID: id, Caller: "c", ToolID: "t", Args: json.RawMessage(`{}`),
		ReceivedAt:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: "toolgate/test@gw-1",
	})
	dec, _ := json.Marshal(DecisionRecord{RequestID: id, Decision: "allow", Gateway: "toolgate/test@gw-1"})
	artifacts := map[string]string{ArtifactRequest: string(req), ArtifactPolicyDecision: string(dec)}
	putArtifacts(t, s, id, artifacts)
	putManifest(t, s, id, artifacts, signer)
}

// newAuditedBucket logs three calls, keeps the checkpoint, then logs two
// more, and closes the log.
func newAuditedBucket(t *testing.T) *auditedBucket {
	t.Helper()
	ctx := context.Background()
	b := &auditedBucket{mem: NewMemoryStore(), signer: newSigner(t)}
	b.cfg = signedLogConfig(t, b.mem, b.signer)
	l, s := openLogged(t, b.mem, b.cfg)
	for _, id := range []string{"r1", "r2", "r3"} {
		signedCall(t, s, id, b.signer)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b.kept = b.newestCheckpoint(t)
	for _, id := range []string{"r4", "r5"} {
		signedCall(t, s, id, b.signer)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *auditedBucket) newestCheckpoint(t *testing.T) []byte {
	t.Helper()
	keys, _ := b.mem.List(context.Background(), LogPrefix("gw-1")+checkpointDir)
	data, err := b.mem.Get(context.Background(), keys[len(keys)-1])
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// audit runs VerifyAll as an auditor with the key, the kept checkpoint
// and --require-log does, and returns the verdict of each request and the
// status of each log.
func (b *auditedBucket) audit(t *testing.T, opts VerifyOptions) (map[string]string, []LogReport) {
	t.Helper()
	opts.TrustedKeys = []ed25519.PublicKey{b.signer.PublicKey()}
	opts.RequireLog, opts.RequireSignature = true, true
	opts.TempDir = t.TempDir()
	var logs []LogReport
	opts.OnLog = func(r LogReport) error { logs = append(logs, r); return nil }
	verdicts := map[string]string{}
	err := VerifyAll(context.Background(), b.mem, opts, func(r VerifyReport) error {
		verdicts[r.RequestID] = r.Verdict()
		if r.Failed() != slices.Contains([]string{"mismatch", "missing", "bad-signature", "unknown-key", "unsigned-required", "unlogged"}, r.Verdict()) {
			t.Errorf("%s: Failed() = %v for verdict %s", r.RequestID, r.Failed(), r.Verdict())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return verdicts, logs
}

func (b *auditedBucket) remove(t *testing.T, prefix string) {
	t.Helper()
	keys, _ := b.mem.List(context.Background(), prefix)
	for _, k := range keys {
		b.mem.remove(k)
	}
}

func (b *auditedBucket) replace(t *testing.T, key string, data []byte) {
	t.Helper()
	b.mem.remove(key)
	mustPut(t, b.mem, key, data)
}

func logStatuses(logs []LogReport) []string {
	var out []string
	for _, l := range logs {
		out = append(out, l.Status)
	}
	return out
}

func TestVerifyAllDetectsEveryTamperWithTheLog(t *testing.T) {
	t.Parallel()
	allOK := map[string]string{"r1": "ok", "r2": "ok", "r3": "ok", "r4": "ok", "r5": "ok"}
	with := func(changes map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range allOK {
			out[k] = v
		}
		for k, v := range changes {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name     string
		tamper   func(t *testing.T, b *auditedBucket)
		verdicts map[string]string
		logs     []string
	}{
		{"an untouched bucket verifies", func(*testing.T, *auditedBucket) {}, allOK, []string{LogOK}},
		{"a deleted manifest is missing, not incomplete", func(t *testing.T, b *auditedBucket) {
			b.remove(t, Key("r2", ArtifactManifest))
		}, with(map[string]string{"r2": "missing"}), []string{LogOK}},
		{"a deleted artifact is a mismatch", func(t *testing.T, b *auditedBucket) {
			b.remove(t, Key("r2", ArtifactPolicyDecision))
		}, with(map[string]string{"r2": "mismatch"}), []string{LogOK}},
		{"a deleted request.json is a mismatch", func(t *testing.T, b *auditedBucket) {
			b.remove(t, Key("r2", ArtifactRequest))
		}, with(map[string]string{"r2": "mismatch"}), []string{LogOK}},
		{"a deleted whole request is missing", func(t *testing.T, b *auditedBucket) {
			b.remove(t, RequestPrefix("r3"))
		}, with(map[string]string{"r3": "missing"}), []string{LogOK}},
		{"all requests deleted are all missing", func(t *testing.T, b *auditedBucket) {
			b.remove(t, "requests/")
		}, map[string]string{"r1": "missing", "r2": "missing", "r3": "missing", "r4": "missing", "r5": "missing"}, []string{LogOK}},
		{"a manifest replaced by another validly signed one is a mismatch", func(t *testing.T, b *auditedBucket) {
			m, _ := b.mem.Get(context.Background(), Key("r1", ArtifactManifest))
			parsed, _ := ParseManifest(m)
			parsed.CreatedAt = parsed.CreatedAt.Add(-time.Hour)
			parsed.Signature = nil
			if err := b.signer.Sign(&parsed); err != nil {
				t.Fatal(err)
			}
			older, _ := EncodeManifest(parsed)
			b.replace(t, Key("r1", ArtifactManifest), older)
		}, with(map[string]string{"r1": "mismatch"}), []string{LogOK}},
		{"a manifest re-signed by another key is refused", func(t *testing.T, b *auditedBucket) {
			m, _ := b.mem.Get(context.Background(), Key("r1", ArtifactManifest))
			parsed, _ := ParseManifest(m)
			parsed.Signature = nil
			if err := newSigner(t).Sign(&parsed); err != nil {
				t.Fatal(err)
			}
			resigned, _ := EncodeManifest(parsed)
			b.replace(t, Key("r1", ArtifactManifest), resigned)
		}, with(map[string]string{"r1": "mismatch"}), []string{LogOK}},
		{"a checkpoint re-signed by another key makes the log inconsistent", func(t *testing.T, b *auditedBucket) {
			other := signedLogConfig(t, b.mem, newSigner(t))
			keys, _ := b.mem.List(context.Background(), LogPrefix("gw-1")+checkpointDir)
			_, size, root, _ := checkpointBody(b.newestCheckpoint(t))
			forged, _ := other.SignCheckpoint(size, root)
			b.replace(t, keys[len(keys)-1], forged)
			// A log no trusted key vouches for records nothing.
		}, map[string]string{"r1": "unlogged", "r2": "unlogged", "r3": "unlogged", "r4": "unlogged", "r5": "unlogged"}, []string{LogInconsistent}},
		{"a truncated log is caught by the kept checkpoint", func(t *testing.T, b *auditedBucket) {
			keys, _ := b.mem.List(context.Background(), LogPrefix("gw-1"))
			for _, k := range keys {
				if strings.Contains(k, "/tile/") || strings.Contains(k, "/checkpoint/") || strings.Contains(k, "/batch/") {
					b.mem.remove(k)
				}
			}
		}, nil, []string{LogInconsistent}},
		{"a bundle of the log deleted", func(t *testing.T, b *auditedBucket) {
			b.remove(t, LogPrefix("gw-1")+"tile/entries/")
		}, nil, []string{LogInconsistent}},
		{"a whole log deleted with its requests", func(t *testing.T, b *auditedBucket) {
			b.remove(t, "log/")
			b.remove(t, "requests/")
		}, map[string]string{}, []string{LogInconsistent}},
		{"a request inserted behind the log's back is unlogged", func(t *testing.T, b *auditedBucket) {
			signedCall(t, b.mem, "r9", b.signer)
		}, with(map[string]string{"r9": "unlogged"}), []string{LogOK}},
		{"an approval.json deleted after it was logged is missing", func(t *testing.T, b *auditedBucket) {
			l, s := openLogged(t, b.mem, b.cfg)
			newStory(t, s, "r6", b.signer).ask(1).settle(ApprovalApprove, hourIn)
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			b.remove(t, Key("r6", ArtifactApproval))
		}, with(map[string]string{"r6": "missing"}), []string{LogOK}},
		{"an approval.json stored behind the log's back is unlogged", func(t *testing.T, b *auditedBucket) {
			l, s := openLogged(t, b.mem, b.cfg)
			st := newStory(t, s, "r6", b.signer).ask(1)
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			st.s = b.mem
			st.settle(ApprovalApprove, hourIn)
		}, with(map[string]string{"r6": "unlogged"}), []string{LogOK}},
		{"an approval a run used, stored behind the log's back, is a mismatch", func(t *testing.T, b *auditedBucket) {
			l, s := openLogged(t, b.mem, b.cfg)
			st := newStory(t, s, "r6", b.signer).ask(1)
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			st.s = b.mem
			st.settle(ApprovalApprove, hourIn).use(2, twoHours).finish()
		}, with(map[string]string{"r6": "mismatch"}), []string{LogOK}},
		{"an approval.json replaced after it was logged is a mismatch", func(t *testing.T, b *auditedBucket) {
			l, s := openLogged(t, b.mem, b.cfg)
			st := newStory(t, s, "r6", b.signer).ask(1).settle(ApprovalDeny, hourIn)
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			b.remove(t, Key("r6", ArtifactApproval))
			st.s = b.mem
			st.settle(ApprovalApprove, hourIn)
		}, with(map[string]string{"r6": "mismatch"}), []string{LogOK}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newAuditedBucket(t)
			tc.tamper(t, b)
			verdicts, logs := b.audit(t, VerifyOptions{Kept: [][]byte{b.kept}, LogGrace: time.Nanosecond})
			if tc.verdicts != nil && !mapsEqual(verdicts, tc.verdicts) {
				t.Errorf("verdicts %v, want %v", verdicts, tc.verdicts)
			}
			if got := logStatuses(logs); !slices.Equal(got, tc.logs) {
				t.Errorf("logs %v, want %v (%v)", got, tc.logs, logs)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Two checkpoints of one size that differ: the auditor kept one, the log
// signs another. Only a forked log can produce both.
func TestVerifyAllCatchesAForkAgainstAKeptCheckpoint(t *testing.T) {
	t.Parallel()
	b := newAuditedBucket(t)
	_, size, _, _ := checkpointBody(b.kept)
	fork, _ := b.cfg.SignCheckpoint(size, tlog.Hash{1})
	_, logs := b.audit(t, VerifyOptions{Kept: [][]byte{fork}})
	if len(logs) != 1 || logs[0].Status != LogInconsistent || !strings.Contains(fmt.Sprint(logs[0].Problems), "forked") {
		t.Fatalf("logs = %+v", logs)
	}
}

// The honest states are not tampering: a request in flight (claimed, no
// manifest), one whose entries are not yet sequenced, one that ran
// nothing.
func TestVerifyAllHonestStatesAreNotFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newAuditedBucket(t)
	l, s := openLogged(t, b.mem, b.cfg)
	storeClaim(t, s, "in-flight", b.cfg.Gateway)
	// Ran, but the store refused the rest: it waits in the spool, and its
	// completion is logged only once the manifest reaches the store.
	storeClaim(t, s, "spooled", b.cfg.Gateway)
	req, _ := b.mem.Get(ctx, Key("spooled", ArtifactRequest))
	spool := NewMemoryStore()
	putManifest(t, spool, "spooled", map[string]string{ArtifactRequest: string(req)}, b.signer)
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	storeClaim(t, s, "not-yet-sequenced", b.cfg.Gateway)
	storeClaim(t, s, "ran-nothing", b.cfg.Gateway)
	mustPut(t, b.mem, Key("ran-nothing", ArtifactDispatch),
		sealClose(t, b.signer, Key("ran-nothing", ArtifactDispatch), []byte(dispatchJSON(t, "ran-nothing", 1, NotDispatched))))
	verdicts, logs := b.audit(t, VerifyOptions{Kept: [][]byte{b.kept}, Spool: spool})
	// Claimed a moment ago and not finished: both in flight, whether
	// their claims are sequenced yet or not.
	want := map[string]string{"in-flight": "pending", "not-yet-sequenced": "pending", "ran-nothing": "not-dispatched", "spooled": "pending"}
	for id, v := range want {
		if verdicts[id] != v {
			t.Errorf("%s: verdict %s, want %s", id, verdicts[id], v)
		}
	}
	if got := logStatuses(logs); !slices.Equal(got, []string{LogOK}) {
		t.Errorf("logs %v", got)
	}
}

// remove deletes a key, as a bucket owner with delete rights can.
func (s *MemoryStore) remove(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data, key)
}

// Witnesses: a log cosigned by enough trusted witnesses verifies; too few
// cosignatures leave it unwitnessed; and a cosigned checkpoint the log
// does not extend, as after a rewrite, is a fork.
func TestVerifyAllWithWitnesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newAuditedBucket(t)
	w1, w2 := evidencetest.StartWitness(t, "w1.example"), evidencetest.StartWitness(t, "w2.example")
	w1.AddLog(t, b.cfg.Origin, b.signer.PublicKey())
	if _, err := Cosign(ctx, b.mem, "gw-1", CosignOptions{WitnessURLs: []string{w1.URL}}); err != nil {
		t.Fatal(err)
	}
	v1, _ := tlog.ParseWitnessKey(w1.VKey)
	v2, _ := tlog.ParseWitnessKey(w2.VKey)

	_, logs := b.audit(t, VerifyOptions{Witnesses: []note.Verifier{v1}, WitnessThreshold: 1})
	if len(logs) != 1 || logs[0].Status != LogOK || !slices.Equal(logs[0].Witnesses, []string{"w1.example"}) {
		t.Fatalf("cosigned by w1, threshold 1: %+v", logs)
	}
	_, logs = b.audit(t, VerifyOptions{Witnesses: []note.Verifier{v1, v2}, WitnessThreshold: 2})
	if len(logs) != 1 || logs[0].Status != LogUnwitnessed {
		t.Fatalf("cosigned by w1 only, threshold 2: %+v", logs)
	}

	// A witness that never saw this log cosigns a checkpoint of another
	// root at the same size: the log as stored does not extend it.
	keys, _ := b.mem.List(ctx, LogPrefix("gw-1")+cosignedDir)
	_, size, _, _ := checkpointBody(b.newestCheckpoint(t))
	fork, _ := b.cfg.SignCheckpoint(size, tlog.Hash{9})
	w3 := evidencetest.StartWitness(t, "w3.example")
	w3.AddLog(t, b.cfg.Origin, b.signer.PublicKey())
	forked := cosignDirectly(t, w3, fork)
	b.replace(t, keys[len(keys)-1], forked)
	v3, _ := tlog.ParseWitnessKey(w3.VKey)
	_, logs = b.audit(t, VerifyOptions{Witnesses: []note.Verifier{v3}, WitnessThreshold: 1})
	if len(logs) != 1 || logs[0].Status != LogInconsistent || !strings.Contains(fmt.Sprint(logs[0].Problems), "forked") {
		t.Fatalf("a cosigned fork: %+v", logs)
	}
}

// cosignDirectly has a witness cosign a checkpoint, as add-checkpoint with
// no earlier size does, and returns the checkpoint with its cosignature.
func cosignDirectly(t *testing.T, w *evidencetest.Witness, cp []byte) []byte {
	t.Helper()
	body := append([]byte("old 0\n\n"), cp...)
	resp, err := http.Post(w.URL+"/add-checkpoint", "text/plain", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("witness answered %d: %s", resp.StatusCode, lines)
	}
	return append(bytes.Clone(cp), lines...)
}
