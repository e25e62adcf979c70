package evidence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/tessera/api/layout"
	"golang.org/x/mod/sumdb/note"
)

// signedLog opens instance gw-1's log on s with checkpoints signed by
// signer, as a signing gateway does, and returns the logging store.
func signedLog(t testing.TB, s StoreCloser, signer *Signer) (*LogWriter, StoreCloser) {
	t.Helper()
	ctx := context.Background()
	origin, err := LogOrigin(ctx, s, "gw-1")
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
	l, err := OpenLog(ctx, s, LogConfig{
		Instance: "gw-1", Origin: origin, Gateway: "toolgate/test@gw-1", Interval: time.Hour, OpTimeout: time.Second,
		MaxPending: 10_000, Logger: slog.New(slog.DiscardHandler), Sealer: sealer, Trusted: trusted,
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, WithLog(s, l)
}

// storeSignedCalls stores, through ls, the claim and signed manifest of
// each request, as a gateway does for a finished call.
func storeSignedCalls(t *testing.T, ls Store, signer *Signer, ids ...string) {
	t.Helper()
	for _, id := range ids {
		storeClaim(t, ls, id, "toolgate/test@gw-1")
		putManifest(t, ls, id, map[string]string{ArtifactRequest: "{}"}, signer)
	}
}

func mustFlush(t *testing.T, l *LogWriter) {
	t.Helper()
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mustProve(t testing.TB, r Reader, id string, opts ProveOptions) []byte {
	t.Helper()
	p, err := Prove(context.Background(), r, id, opts)
	if err != nil {
		t.Fatalf("Prove(%s): %v", id, err)
	}
	return p
}

func trustLogs(signers ...*Signer) ProofOptions {
	var o ProofOptions
	for _, s := range signers {
		o.LogKeys = append(o.LogKeys, s.PublicKey())
	}
	return o
}

func TestAProofRoundTripsOfflineOnMemoryAndFileStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	for name, open := range map[string]func() StoreCloser{
		"memory": func() StoreCloser { return NewMemoryStore() },
		"file": func() StoreCloser {
			s, err := NewFileStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := open()
			l, ls := signedLog(t, s, signer)
			var ids []string
			for i := range 150 { // 300 entries: two entry bundles
				ids = append(ids, fmt.Sprintf("r%03d", i))
			}
			ids[99] = `a&b<c>"d"é` // JSON escapes some of these; entries escape only the quotes
			storeSignedCalls(t, ls, signer, ids[:100]...)
			mustFlush(t, l)
			storeSignedCalls(t, ls, signer, ids[100:]...)
			mustFlush(t, l)
			for i, id := range []string{ids[0], ids[99], ids[100], ids[149]} {
				data := mustProve(t, s, id, ProveOptions{})
				rep, err := VerifyProof(data, trustLogs(testSigner(t, 9), signer))
				if err != nil {
					t.Fatalf("%s: %v\n%s", id, err, data)
				}
				origin, _ := LogOrigin(ctx, s, "gw-1")
				if rep.RequestID != id || rep.Outcome != OutcomeCompleted || rep.Origin != origin ||
					rep.CheckpointSize != 300 || rep.KeyID != signer.KeyID() || rep.CheckpointKeyID != signer.KeyID() || rep.Manifest.RequestID != id {
					t.Fatalf("proof %d reports %+v", i, rep)
				}
				stored := mustGet(t, s, Key(id, ArtifactManifest))
				if rep.ManifestSHA256 != sha256Hex(stored) {
					t.Fatalf("%s: the proof's manifest is not the stored one", id)
				}
			}
		})
	}
}

// provedLog returns a store with one signed log of a few calls and the
// proof of r1.
func provedLog(t *testing.T, signer *Signer) (*MemoryStore, []byte) {
	t.Helper()
	s := NewMemoryStore()
	l, ls := signedLog(t, s, signer)
	storeSignedCalls(t, ls, signer, "r1", "r2", "r3", "r4", "r5")
	mustFlush(t, l)
	return s, mustProve(t, s, "r1", ProveOptions{})
}

// Every bit of a proof file is checked: flipping any one of them makes
// the proof fail, whether it lands in the header, the index, a hash, the
// entry or manifest inside the extra data, the checkpoint or its
// signature. Under -race two bits of every byte are flipped, a different
// pair for each byte.
func TestAFlippedBitAnywhereInAProofFails(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	_, data := provedLog(t, signer)
	opts := trustLogs(signer)
	if _, err := VerifyProof(data, opts); err != nil {
		t.Fatal(err)
	}
	bits := 0
	for i := range data {
		for bit := range 8 {
			if raceDetector && bit != i%8 && bit != (i+3)%8 {
				continue
			}
			flipped := bytes.Clone(data)
			flipped[i] ^= 1 << bit
			if rep, err := VerifyProof(flipped, opts); !errors.Is(err, ErrInvalidProof) {
				t.Fatalf("bit %d of byte %d (%q) flipped: err %v, report %+v", bit, i, data[i], err, rep)
			}
			bits++
		}
	}
	t.Logf("%d bits flipped, each one refused; the proof is %d bytes", bits, len(data))
}

// reextra rebuilds a proof with its extra data changed by edit.
func reextra(t *testing.T, data []byte, edit func(*proofExtra)) []byte {
	t.Helper()
	p, err := tlog.ParseProof(data)
	if err != nil {
		t.Fatal(err)
	}
	x, err := parseExtra(p.Extra)
	if err != nil {
		t.Fatal(err)
	}
	edit(&x)
	if p.Extra, err = marshalExtra(x); err != nil {
		t.Fatal(err)
	}
	return p.Marshal()
}

func TestAProofFailsWhenWhatItProvesIsSwappedOrUntrusted(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	s, data := provedLog(t, signer)
	other := mustProve(t, s, "r2", ProveOptions{})
	otherExtra := func() proofExtra {
		p, _ := tlog.ParseProof(other)
		x, _ := parseExtra(p.Extra)
		return x
	}()
	// An unsigned manifest, logged honestly, proves nothing about its author.
	unsigned := NewMemoryStore()
	l, ls := signedLog(t, unsigned, signer)
	storeClaim(t, ls, "u1", "toolgate/test@gw-1")
	putManifest(t, ls, "u1", map[string]string{}, nil)
	mustFlush(t, l)
	tests := []struct {
		name  string
		proof []byte
		opts  ProofOptions
		want  string
	}{
		{"a proof checked with another gateway's key fails", data, trustLogs(testSigner(t, 2)), "no trusted log key"},
		{"a manifest swapped for another valid signed manifest fails", reextra(t, data, func(x *proofExtra) { x.Manifest = otherExtra.Manifest }),
			trustLogs(signer), "the entry commits to"},
		{"an entry and manifest swapped for another request's fail the inclusion proof", reextra(t, data, func(x *proofExtra) { *x = otherExtra }),
			trustLogs(signer), "not included"},
		{"a proof of an unsigned manifest fails", mustProve(t, unsigned, "u1", ProveOptions{}), trustLogs(signer), "not signed"},
		{"unknown fields in the extra data fail", bytes.Replace(data, []byte("extra "), []byte("extra eyJ"), 1), trustLogs(signer), "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyProof(tc.proof, tc.opts)
			if !errors.Is(err, ErrInvalidProof) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidProof saying %q", err, tc.want)
			}
		})
	}
}

// testCosign appends the cosignature of a witness to a checkpoint note,
// as a witness's add-checkpoint response is appended to it.
func testCosign(t *testing.T, cp []byte, w note.Signer) []byte {
	t.Helper()
	text, _, _ := bytes.Cut(cp, []byte("\n\n"))
	signed, err := note.Sign(&note.Note{Text: string(text) + "\n"}, w)
	if err != nil {
		t.Fatal(err)
	}
	_, sig, _ := bytes.Cut(signed, []byte("\n\n"))
	return append(bytes.Clone(cp), sig...)
}

func TestAProofOfACosignedCheckpointNeedsItsWitnesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s, _ := provedLog(t, signer)
	if _, err := Prove(ctx, s, "r1", ProveOptions{Cosigned: true}); err == nil || !strings.Contains(err.Error(), "no cosigned checkpoint") {
		t.Fatalf("a cosigned proof without a cosigned checkpoint: %v", err)
	}
	w := newTestWitness(t, "witness.example/w1")
	heads, err := logHeads(ctx, s)
	if err != nil || len(heads) != 1 {
		t.Fatalf("logHeads = %v, %v", heads, err)
	}
	cp := mustGet(t, s, heads[0].key)
	mustPut(t, s, fmt.Sprintf("%s%s%020d", LogPrefix("gw-1"), cosignedDir, heads[0].size), testCosign(t, cp, w.signer))
	data := mustProve(t, s, "r1", ProveOptions{Cosigned: true})

	withWitness := trustLogs(signer)
	withWitness.Witnesses = []note.Verifier{w.verifier}
	withWitness.WitnessThreshold = 1
	rep, err := VerifyProof(data, withWitness)
	if err != nil || len(rep.Witnesses) != 1 || rep.Witnesses[0] != "witness.example/w1" {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	other := newTestWitness(t, "witness.example/w2")
	tests := []struct {
		name string
		opts ProofOptions
	}{
		{"a cosignature by a witness not given fails: no line goes unchecked", trustLogs(signer)},
		{"a threshold of two witnesses with one cosignature fails", ProofOptions{LogKeys: withWitness.LogKeys,
			Witnesses: []note.Verifier{w.verifier, other.verifier}, WitnessThreshold: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := VerifyProof(data, tc.opts); !errors.Is(err, ErrInvalidProof) {
				t.Fatalf("err = %v, want ErrInvalidProof", err)
			}
		})
	}
	if _, err := VerifyProof(data, ProofOptions{LogKeys: withWitness.LogKeys, WitnessThreshold: 1}); err == nil || errors.Is(err, ErrInvalidProof) {
		t.Fatalf("a threshold above the number of witness keys is a usage error, got %v", err)
	}
}

func TestProveSaysWhyThereIsNoProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, ls := signedLog(t, s, signer)
	storeSignedCalls(t, ls, signer, "logged", "deleted", "replaced")
	storeClaim(t, ls, "in-flight", "toolgate/test@gw-1")
	mustFlush(t, l)
	storeSignedCalls(t, ls, signer, "unsequenced")
	if err := os.Remove(filepath.Join(dir, "requests", "deleted", ArtifactManifest)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "requests", "replaced", ArtifactManifest)); err != nil {
		t.Fatal(err)
	}
	putManifest(t, s, "replaced", map[string]string{}, signer)
	tests := []struct {
		id   string
		want error
		say  string
	}{
		{"never-seen", ErrUnknownRequest, "no evidence"},
		{"in-flight", ErrNotLogged, "no manifest yet"},
		{"unsequenced", ErrNotLogged, "log.checkpoint_interval"},
		{"deleted", ErrLoggedManifestGone, "evidence was deleted"},
		{"replaced", ErrLoggedManifestGone, "it was replaced"},
		{"../x", ErrInvalidKey, ""},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			_, err := Prove(ctx, s, tc.id, ProveOptions{})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.say)
			}
		})
	}
	if _, err := Prove(ctx, s, "logged", ProveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A log whose tiles were rewritten after the checkpoint is refused by
// Prove itself: it never hands out a proof of a tampered log.
func TestProveRefusesATamperedTile(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 1)
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, ls := signedLog(t, s, signer)
	storeSignedCalls(t, ls, signer, "r1", "r2", "r3")
	mustFlush(t, l)
	tile := filepath.Join(dir, filepath.FromSlash(LogPrefix("gw-1")+layout.TilePath(0, 0, 6)))
	data, err := os.ReadFile(tile)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(tile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Prove(context.Background(), s, "r1", ProveOptions{}); err == nil || !strings.Contains(err.Error(), "tampered log") {
		t.Fatalf("err = %v, want the tampered log reported", err)
	}
}

// The proof size of a request in a log of 100,000 entries, with a
// manifest of four artifacts: what an auditor hands a third party. Under
// -race the log has 10,000 entries, which takes three hashes off the proof.
func TestProofSizeAtOneHundredThousandEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	signer := testSigner(t, 1)
	s := NewMemoryStore()
	origin, err := LogOrigin(ctx, s, "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	size, target := 100_000, 54_321
	if raceDetector {
		size, target = 10_000, 5_432
	}
	tree := tlog.NewTree()
	put := func(objs []tlog.Object) {
		for _, o := range objs {
			mustPut(t, s, LogPrefix("gw-1")+o.Path, o.Data)
		}
	}
	for i := range size {
		id := fmt.Sprintf("01J%023d", i)
		e := tlog.Entry{Kind: tlog.KindCompletion, RequestID: id, ManifestSHA256: strings.Repeat("ab", 32),
			Outcome: OutcomeCompleted, KeyID: signer.KeyID(), Gateway: "toolgate/1.0.0@gw-1"}
		if i == target {
			manifest := putManifest(t, s, id, map[string]string{ArtifactRequest: "{}", ArtifactPolicyDecision: "{}",
				ArtifactToolResult: "{}", ArtifactResponse: "{}"}, signer)
			e.ManifestSHA256 = sha256Hex(manifest)
		}
		data, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.Append(data); err != nil {
			t.Fatal(err)
		}
		put(tree.TakeFull())
	}
	put(tree.Partials())
	cs, _ := signer.CheckpointSigner(origin)
	cp, err := tlog.SignCheckpoint(cs, uint64(size), tree.Root())
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, seqKey(LogPrefix("gw-1")+checkpointDir, uint64(size)), cp)
	data := mustProve(t, s, fmt.Sprintf("01J%023d", target), ProveOptions{})
	rep, err := VerifyProof(data, trustLogs(signer))
	if err != nil || rep.Index != uint64(target) || rep.CheckpointSize != uint64(size) {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	var x proofExtra
	p, _ := tlog.ParseProof(data)
	_ = json.Unmarshal(p.Extra, &x)
	t.Logf("proof of entry %d in a log of %d entries: %d bytes (%d hashes, entry %d bytes, manifest %d bytes, checkpoint %d bytes)",
		target, size, len(data), len(p.Hashes), len(x.Entry), len(x.Manifest), len(p.Checkpoint))
	if len(data) > 6000 {
		t.Fatalf("the proof is %d bytes, more than the 6 KB it should take", len(data))
	}
}

// testWitness is a witness's cosignature signer and verifier.
type testWitness struct {
	signer   note.Signer
	verifier note.Verifier
	vkey     string
}

func newTestWitness(t testing.TB, name string) testWitness {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tlog.ParseWitnessKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return testWitness{signer: s, verifier: v, vkey: vkey}
}

// No input but the proof Prove wrote verifies under the gateway's key:
// whatever the fuzzer derives from it, VerifyProof refuses without
// panicking, and says so with ErrInvalidProof.
func FuzzVerifyProof(f *testing.F) {
	signer := testSigner(f, 1)
	s := NewMemoryStore()
	// A fixed bucket id makes the proofs the same in every fuzz worker.
	mustPut(f, s, bucketIDKey, []byte("0123456789abcdef"))
	l, ls := signedLog(f, s, signer)
	for _, id := range []string{"r1", "r2", "r3"} {
		req, _ := json.Marshal(RequestRecord{RequestID: id, Caller: "c", ToolID: "t", Args: json.RawMessage(`{}`),
			ReceivedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: "g"})
		mustPut(f, ls, Key(id, ArtifactRequest), req)
		putManifest(f, ls, id, map[string]string{}, signer)
	}
	if err := l.Flush(context.Background()); err != nil {
		f.Fatal(err)
	}
	var proofs [][]byte
	for _, id := range []string{"r1", "r2", "r3"} {
		proofs = append(proofs, mustProve(f, s, id, ProveOptions{}))
		f.Add(proofs[len(proofs)-1])
	}
	opts := trustLogs(signer)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := VerifyProof(data, opts)
		switch {
		case err == nil && !slices.ContainsFunc(proofs, func(p []byte) bool { return bytes.Equal(p, data) }):
			t.Fatalf("accepted a proof that Prove did not write:\n%s", data)
		case err != nil && !errors.Is(err, ErrInvalidProof):
			t.Fatalf("a bad proof is not ErrInvalidProof: %v", err)
		}
	})
}
