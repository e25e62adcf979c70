package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"golang.org/x/mod/sumdb/note"
)

// replica is one gateway of a shared store: its log, the store it writes
// through, and its peer witness.
type replica struct {
	inst    string
	signer  *Signer
	log     *LogWriter
	store   StoreCloser // logs what is stored through it
	w       *PeerWitness
	cfg     PeerWitnessConfig
	refused []string
	logs    *bytes.Buffer
	mu      sync.Mutex
}

// newReplica opens instance inst's log in s, signed by signer, with a
// peer witness that trusts the keys given (and its own).
func newReplica(t testing.TB, s *MemoryStore, inst string, signer *Signer, trusted ...*Signer) *replica {
	t.Helper()
	ctx := context.Background()
	origin, err := LogOrigin(ctx, s, inst)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	sealer, ring, err := LogKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(ctx, s, LogConfig{
		Instance: inst, Origin: origin, Gateway: "toolgate/test@" + inst, Interval: time.Hour, OpTimeout: time.Second,
		MaxPending: 10_000, Logger: slog.New(slog.DiscardHandler), Sealer: sealer, Trusted: ring,
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{inst: inst, signer: signer, log: l, store: WithLog(s, l), logs: &bytes.Buffer{}}
	keys := []ed25519.PublicKey{signer.PublicKey()}
	for _, p := range trusted {
		keys = append(keys, p.PublicKey())
	}
	r.cfg = PeerWitnessConfig{Store: s, Instance: inst, Origin: origin, Signer: signer, TrustedKeys: keys, Log: l,
		Gateway: "toolgate/test@" + inst, StateFile: filepath.Join(t.TempDir(), "peers.json"),
		Logger: slog.New(slog.NewTextHandler(syncWriter{r}, nil)),
		OnRefused: func(peer string, err error) {
			r.mu.Lock()
			r.refused = append(r.refused, peer+": "+err.Error())
			r.mu.Unlock()
		}}
	r.restartWitness(t)
	return r
}

// syncWriter lets the witness's logger write to the replica's buffer.
type syncWriter struct{ r *replica }

func (w syncWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.logs.Write(p)
}

// restartWitness starts the peer witness afresh, as after a restart of
// the gateway: it knows only what its state file and the store hold.
func (r *replica) restartWitness(t testing.TB) {
	t.Helper()
	w, err := NewPeerWitness(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
}

// calls stores finished calls through the replica and publishes them.
func (r *replica) calls(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		signedCall(t, r.store, id, r.signer)
	}
	mustFlush(t, r.log)
}

// round runs one round of witnessing, publishes the witness entries it
// logged, and returns the action taken for each peer.
func (r *replica) round(t *testing.T) map[string]PeerReport {
	t.Helper()
	reps, err := r.w.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustFlush(t, r.log)
	out := map[string]PeerReport{}
	for _, rep := range reps {
		out[rep.Instance] = rep
	}
	return out
}

func (r *replica) refusals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.refused)
}

// snapshot copies every object under a prefix: what a bucket owner keeps
// to roll back to later.
func snapshot(t *testing.T, s *MemoryStore, prefix string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, k := range mustList(t, s, prefix) {
		out[k] = mustGet(t, s, k)
	}
	return out
}

// restore replaces everything under prefix with a snapshot.
func restore(t *testing.T, s *MemoryStore, prefix string, snap map[string][]byte) {
	t.Helper()
	for _, k := range mustList(t, s, prefix) {
		s.remove(k)
	}
	for k, v := range snap {
		mustPut(t, s, k, v)
	}
}

func peerCosignedKeys(t *testing.T, s *MemoryStore, by, peer string) []string {
	t.Helper()
	return mustList(t, s, LogPrefix(by)+peerCosignedDir+peer+"/")
}

// A replica witnesses a peer log that grows: it cosigns the newest
// checkpoint (stored under its own folder, readable by any
// cosignature/v1 client with its key), logs a witness entry, and leaves
// the peer alone while it does not change, or grows only by its own
// witness entries: two idle replicas do not grow each other's logs.
func TestPeerWitnessCosignsAGrowingPeerAndLeavesIdleOnesAlone(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	sa, sb := testSigner(t, 1), testSigner(t, 2)
	a, b := newReplica(t, s, "gw-a", sa, sb), newReplica(t, s, "gw-b", sb, sa)
	a.calls(t, "a1", "a2")

	got := b.round(t)["gw-a"]
	if got.Action != PeerCosigned || got.Size != 4 || got.Witnessed != 0 {
		t.Fatalf("first round: %+v", got)
	}
	keys := peerCosignedKeys(t, s, "gw-b", "gw-a")
	if len(keys) != 1 || !strings.HasSuffix(keys[0], "/00000000000000000004") {
		t.Fatalf("cosigned checkpoints: %v", keys)
	}
	cosigner, err := tlog.CosignerVerifier(b.log.Origin(), sb.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := tlog.OpenCheckpoint(mustGet(t, s, keys[0]), tlog.CheckpointPolicy{LogKeys: []ed25519.PublicKey{sa.PublicKey()},
		Witnesses: []note.Verifier{cosigner}, Threshold: 1, Strict: true})
	if err != nil || cp.Size != 4 || cp.Origin != a.log.Origin() {
		t.Fatalf("the stored cosigned checkpoint: %+v, %v", cp, err)
	}
	if got := b.round(t)["gw-a"]; got.Action != PeerUnchanged {
		t.Fatalf("second round: %+v", got)
	}
	// Each witnesses the other until nothing but witness entries is new.
	if got := a.round(t)["gw-b"]; got.Action != PeerCosigned || got.Size != 1 {
		t.Fatalf("a's first round: %+v", got)
	}
	sizeA, sizeB := a.log.Size(), b.log.Size()
	for i := range 4 {
		if got := b.round(t)["gw-a"]; got.Action != PeerWitnessEntriesOnly {
			t.Fatalf("round %d of b: %+v", i, got)
		}
		if got := a.round(t)["gw-b"]; got.Action != PeerUnchanged && got.Action != PeerWitnessEntriesOnly {
			t.Fatalf("round %d of a: %+v", i, got)
		}
	}
	if a.log.Size() != sizeA || b.log.Size() != sizeB {
		t.Fatalf("idle replicas grew each other's logs: %d→%d, %d→%d", sizeA, a.log.Size(), sizeB, b.log.Size())
	}
	// A request on a is witnessed again.
	a.calls(t, "a3")
	if got := b.round(t)["gw-a"]; got.Action != PeerCosigned || got.Witnessed != 4 || got.Size != sizeA+2 {
		t.Fatalf("after a3: %+v", got)
	}
	if r := append(a.refusals(), b.refusals()...); len(r) != 0 {
		t.Fatalf("refusals of honest logs: %v", r)
	}
}

// A peer grown by more than a bundle is checked by a consistency proof
// from its tiles rather than re-hashed.
func TestPeerWitnessChecksAConsistencyProofOfALargeGrowth(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	sa, sb := testSigner(t, 1), testSigner(t, 2)
	a, b := newReplica(t, s, "gw-a", sa, sb), newReplica(t, s, "gw-b", sb, sa)
	a.calls(t, "a0")
	b.round(t)
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("big-%03d", i))
	}
	a.calls(t, ids...)
	if got := b.round(t)["gw-a"]; got.Action != PeerCosigned || got.Witnessed != 2 || got.Size != 402 {
		t.Fatalf("after 400 entries: %+v", got)
	}
}

// forkInto replaces inst's log in s by one of size entries with the same
// origin and key but other entries (calls named prefix…): what whoever
// holds the bucket and the signing key could publish.
func forkInto(t *testing.T, s *MemoryStore, inst string, signer *Signer, prefix string, size int) {
	t.Helper()
	fork := NewMemoryStore()
	mustPut(t, fork, bucketIDKey, mustGet(t, s, bucketIDKey))
	r := newReplica(t, fork, inst, signer)
	var ids []string
	for i := range size / 2 {
		ids = append(ids, fmt.Sprintf("%s-%d", prefix, i))
	}
	storeSignedCalls(t, r.store, signer, ids...)
	if size%2 == 1 {
		e, err := tlog.Entry{Kind: tlog.KindWitness, PeerOrigin: "toolgate.log/x/" + prefix, PeerSize: 1, Gateway: "g"}.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		r.log.Append(e)
	}
	mustFlush(t, r.log)
	restore(t, s, LogPrefix(inst), snapshot(t, fork, LogPrefix(inst)))
}

// Whatever a bucket owner does to a peer log that the witness saw —
// rolling it back to an older copy, deleting its checkpoints, forking
// it at the same size or rewriting it longer (even with the real key),
// signing its newest checkpoint with another key, altering a tile — the
// witness refuses it: nothing is cosigned or logged, the refusal is
// logged and reported once, and the next round refuses again quietly.
func TestPeerWitnessRefusesAPeerLogThatWentBackwards(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, want string
		tamper     func(t *testing.T, s *MemoryStore, a *replica, older map[string][]byte)
	}{
		{"rolled back to an older copy", "rolled back: its newest checkpoint has size 4, and this gateway witnessed size 8",
			func(t *testing.T, s *MemoryStore, a *replica, older map[string][]byte) {
				restore(t, s, LogPrefix("gw-a"), older)
			}},
		{"every checkpoint deleted", "rolled back: the log has no checkpoint",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				for _, k := range mustList(t, s, LogPrefix("gw-a")+checkpointDir) {
					s.remove(k)
				}
			}},
		{"forked at the same size", "forked: at size 8",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				forkInto(t, s, "gw-a", a.signer, "other", 8)
			}},
		{"rewritten longer with the real key", "does not extend the one of size 8",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				forkInto(t, s, "gw-a", a.signer, "other", 12)
			}},
		{"rewritten far longer with the real key", "does not extend the one of size 8",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				forkInto(t, s, "gw-a", a.signer, "other", 600)
			}},
		{"the newest checkpoint signed by another key", "no trusted log key signed",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				keys := mustList(t, s, LogPrefix("gw-a")+checkpointDir)
				cs, _ := testSigner(t, 9).CheckpointSigner(a.log.Origin())
				forged, err := tlog.SignCheckpoint(cs, 8, tlog.Hash{1})
				if err != nil {
					t.Fatal(err)
				}
				s.remove(keys[len(keys)-1])
				mustPut(t, s, keys[len(keys)-1], forged)
			}},
		{"a tile at the witnessed size altered", "does not extend the one of size 8",
			func(t *testing.T, s *MemoryStore, a *replica, _ map[string][]byte) {
				a.calls(t, "a5") // the witness re-hashes from size 8 on
				key := LogPrefix("gw-a") + "tile/0/000.p/8"
				tile := mustGet(t, s, key)
				tile[0] ^= 1
				s.remove(key)
				mustPut(t, s, key, tile)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewMemoryStore()
			sa, sb := testSigner(t, 1), testSigner(t, 2)
			a, b := newReplica(t, s, "gw-a", sa, sb), newReplica(t, s, "gw-b", sb, sa)
			a.calls(t, "a1", "a2")
			older := snapshot(t, s, LogPrefix("gw-a"))
			b.round(t)
			a.calls(t, "a3", "a4")
			if got := b.round(t)["gw-a"]; got.Action != PeerCosigned || got.Size != 8 {
				t.Fatalf("before the tamper: %+v", got)
			}
			cosigned, sizeB := peerCosignedKeys(t, s, "gw-b", "gw-a"), b.log.Size()

			tc.tamper(t, s, a, older)
			for i := range 2 {
				got := b.round(t)["gw-a"]
				if got.Action != PeerRefused || !errors.Is(got.Err, ErrPeerRefused) || !strings.Contains(got.Err.Error(), tc.want) {
					t.Fatalf("round %d after the tamper: %+v, want refused with %q", i, got, tc.want)
				}
			}
			if r := b.refusals(); len(r) != 1 || !strings.Contains(r[0], "gw-a: ") {
				t.Fatalf("refusals reported: %q, want one", r)
			}
			if !strings.Contains(b.logs.String(), "level=ERROR") || !strings.Contains(b.logs.String(), "peer=gw-a") {
				t.Fatalf("no error logged naming the peer:\n%s", b.logs)
			}
			if got := peerCosignedKeys(t, s, "gw-b", "gw-a"); !slices.Equal(got, cosigned) || b.log.Size() != sizeB {
				t.Fatalf("something was cosigned or logged: %v (was %v), log %d (was %d)", got, cosigned, b.log.Size(), sizeB)
			}
		})
	}
}

// The last checkpoint witnessed survives a restart of the witness: from
// the state file beside the key, or, when that is lost, from the
// witness's own cosigned checkpoints in the store. With neither, the peer
// is trusted on first sight again.
func TestPeerWitnessRemembersWhatItWitnessedAcrossRestarts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		forget  func(t *testing.T, s *MemoryStore, b *replica)
		refused bool
	}{
		{"the state file", func(t *testing.T, s *MemoryStore, b *replica) {
			for _, k := range peerCosignedKeys(t, s, "gw-b", "gw-a") {
				s.remove(k)
			}
		}, true},
		{"the store's cosigned checkpoints", func(t *testing.T, s *MemoryStore, b *replica) {
			if err := os.Remove(b.cfg.StateFile); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"neither: trusted on first sight", func(t *testing.T, s *MemoryStore, b *replica) {
			os.Remove(b.cfg.StateFile)
			for _, k := range peerCosignedKeys(t, s, "gw-b", "gw-a") {
				s.remove(k)
			}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewMemoryStore()
			sa, sb := testSigner(t, 1), testSigner(t, 2)
			a, b := newReplica(t, s, "gw-a", sa, sb), newReplica(t, s, "gw-b", sb, sa)
			a.calls(t, "a1")
			older := snapshot(t, s, LogPrefix("gw-a"))
			a.calls(t, "a2")
			b.round(t)
			tc.forget(t, s, b)
			restore(t, s, LogPrefix("gw-a"), older)
			b.restartWitness(t)
			got := b.round(t)["gw-a"]
			if tc.refused != (got.Action == PeerRefused) {
				t.Fatalf("after the restart: %+v, refused want %v", got, tc.refused)
			}
		})
	}
}

// A log no trusted key signs is not witnessed: a replica whose key this
// gateway was not given, or a folder planted in the bucket.
func TestPeerWitnessLeavesAnUntrustedLogAlone(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	sa, sb := testSigner(t, 1), testSigner(t, 2)
	a, b := newReplica(t, s, "gw-a", sa), newReplica(t, s, "gw-b", sb)
	a.calls(t, "a1")
	for range 2 {
		if got := b.round(t)["gw-a"]; got.Action != PeerUntrusted {
			t.Fatalf("%+v", got)
		}
	}
	if keys := peerCosignedKeys(t, s, "gw-b", "gw-a"); len(keys) != 0 || len(b.refusals()) != 0 {
		t.Fatalf("an untrusted log was cosigned (%v) or refused (%v)", keys, b.refusals())
	}
	if n := strings.Count(b.logs.String(), "untrusted"); n != 1 {
		t.Fatalf("the untrusted log was told %d times, want once:\n%s", n, b.logs)
	}
}

// newestCheckpointOf finds the newest checkpoint from the entry bundles,
// whatever the log's size and the hint, as walking the checkpoint folder
// would.
func TestNewestCheckpointOfFindsItFromTheBundles(t *testing.T) {
	t.Parallel()
	s := NewMemoryStore()
	a := newReplica(t, s, "gw-a", testSigner(t, 1))
	ctx := context.Background()
	if data, err := newestCheckpointOf(ctx, s, "gw-a", 0); data != nil || err != nil {
		t.Fatalf("an empty log: %q, %v", data, err)
	}
	n := 0
	for _, calls := range []int{1, 63, 64, 1, 127, 128, 300} { // sizes 2, 128, 256, 258, 512, 768, 1368
		var ids []string
		for range calls {
			ids = append(ids, fmt.Sprintf("c%04d", n))
			n++
		}
		a.calls(t, ids...)
		keys := mustList(t, s, LogPrefix("gw-a")+checkpointDir)
		want := mustGet(t, s, keys[len(keys)-1])
		for _, hint := range []uint64{0, 1, 256, a.log.Size(), a.log.Size() + 5000} {
			got, err := newestCheckpointOf(ctx, s, "gw-a", hint)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("size %d, hint %d: got %q, %v; want %q", a.log.Size(), hint, got, err, want)
			}
		}
	}
}

// Run witnesses at once and then every interval; synctest's clock stands
// in for the interval.
func TestPeerWitnessRunsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore()
		sa, sb := testSigner(t, 1), testSigner(t, 2)
		a, b := newReplica(t, s, "gw-a", sa, sb), newReplica(t, s, "gw-b", sb, sa)
		b.cfg.Interval, b.cfg.StateFile = 10*time.Second, ""
		b.restartWitness(t)
		a.calls(t, "a1")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { b.w.Run(ctx); close(done) }()
		synctest.Wait()
		if keys := peerCosignedKeys(t, s, "gw-b", "gw-a"); len(keys) != 1 {
			t.Fatalf("at start: %v", keys)
		}
		a.calls(t, "a2")
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if keys := peerCosignedKeys(t, s, "gw-b", "gw-a"); len(keys) != 1 {
			t.Fatalf("before the interval: %v", keys)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if keys := peerCosignedKeys(t, s, "gw-b", "gw-a"); len(keys) != 2 {
			t.Fatalf("after the interval: %v", keys)
		}
		cancel()
		<-done
	})
}

func TestPeerWitnessStateFileIsCheckedOnLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ name, text string }{
		{"not JSON", "peers"},
		{"another version", `{"v":2,"peers":{}}`},
		{"a damaged root", `{"v":1,"peers":{"toolgate.log/x/gw-a":{"size":3,"root":"AAAA"}}}`},
		{"a size of 0", `{"v":1,"peers":{"toolgate.log/x/gw-a":{"size":0,"root":"` + strings.Repeat("A", 43) + `="}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(file, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := loadPeerState(file); err == nil {
				t.Fatal("loaded")
			}
		})
	}
}

// BenchmarkPeerWitnessRound measures one round of witnessing one peer
// whose log holds 10,000 entries, on a file store: when it has not
// changed (most rounds), and when it grew by one call (two entries
// re-hashed, a cosignature, a durable store write, the state file
// written and synced).
func BenchmarkPeerWitnessRound(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "unchanged"
		if grow {
			name = "grown-by-one-call"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s, err := NewFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			mem := NewMemoryStore()
			mustPut(b, s, bucketIDKey, []byte("0123456789abcdef"))
			mustPut(b, mem, bucketIDKey, []byte("0123456789abcdef"))
			sa, sb := testSigner(b, 1), testSigner(b, 2)
			// gw-a's log is written in memory and copied, as it grows, to
			// the file store gw-b witnesses.
			a, w := newReplica(b, mem, "gw-a", sa, sb), newReplica(b, mem, "gw-b", sb, sa)
			copied := map[string]bool{}
			grown := func(entries int) {
				for range entries {
					e, err := tlog.Entry{Kind: tlog.KindClaim, RequestID: fmt.Sprintf("r%d", a.log.Size()),
						CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), RequestSHA256: strings.Repeat("cd", 32),
						ReceivedAt: time.Unix(1, 0), Gateway: "toolgate/test@gw-a"}.Marshal()
					if err != nil {
						b.Fatal(err)
					}
					a.log.Append(e)
				}
				if err := a.log.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				for _, k := range mustList(b, mem, LogPrefix("gw-a")) {
					if !copied[k] {
						copied[k] = true
						mustPut(b, s, k, mustGet(b, mem, k))
					}
				}
			}
			grown(10_000)
			w.cfg.Store = s
			w.restartWitness(b)
			if _, err := w.w.Round(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if grow {
					b.StopTimer()
					grown(2)
					b.StartTimer()
				}
				reps, err := w.w.Round(ctx)
				if err != nil || len(reps) != 1 || (grow && reps[0].Action != PeerCosigned) || (!grow && reps[0].Action != PeerUnchanged) {
					b.Fatalf("%+v, %v", reps, err)
				}
			}
		})
	}
}
