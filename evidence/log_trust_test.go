package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// The attacks on the log of issue 24's classes 2 and 3, each on the file
// store and on a real MinIO: someone who can write to the store, but does
// not hold the gateway's key, must not make the log sign what the gateway
// did not write, nor make it sign a tree that does not extend the ones it
// signed before.

// hostileBucket is a store as an attacker with write and delete rights
// sees it.
type hostileBucket struct {
	StoreCloser
	remove func(t *testing.T, key string)
}

// replace overwrites key with data.
func (b *hostileBucket) replace(t *testing.T, key string, data []byte) {
	t.Helper()
	b.remove(t, key)
	mustPut(t, b, key, data)
}

// snapshot copies every object under prefix.
func (b *hostileBucket) snapshot(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	keys, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, k := range keys {
		out[k] = mustGet(t, b, k)
	}
	return out
}

// restore puts an older snapshot of prefix back: what it lacks is
// deleted, what differs is replaced.
func (b *hostileBucket) restore(t *testing.T, prefix string, snap map[string][]byte) {
	t.Helper()
	keys, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		b.remove(t, k)
	}
	for k, data := range snap {
		mustPut(t, b, k, data)
	}
}

// hostileStores opens a fresh bucket of each kind: the file store and a
// bucket of one real MinIO shared by the calls.
func hostileStores(t *testing.T) []struct {
	name string
	open func(t *testing.T) *hostileBucket
} {
	m := evidencetest.StartMinIO(t)
	buckets := 0
	return []struct {
		name string
		open func(t *testing.T) *hostileBucket
	}{
		{"file", func(t *testing.T) *hostileBucket {
			dir := t.TempDir()
			s, err := NewFileStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return &hostileBucket{StoreCloser: s, remove: func(t *testing.T, key string) {
				if err := os.Remove(filepath.Join(dir, key)); err != nil {
					t.Fatal(err)
				}
			}}
		}},
		{"minio", func(t *testing.T) *hostileBucket {
			buckets++
			name := fmt.Sprintf("hostile-%d", buckets)
			m.CreateBucket(t, name, false)
			s := newTestS3Store(t, m, S3Options{Bucket: name, Prefix: "tg"})
			return &hostileBucket{StoreCloser: s, remove: func(t *testing.T, key string) {
				_, err := m.Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String("tg/" + key)})
				if err != nil {
					t.Fatal(err)
				}
			}}
		}},
	}
}

// trustLog is a gateway's log over a hostile bucket: its configuration,
// the key that signs it, and the refusals it reported.
type trustLog struct {
	cfg      LogConfig
	signer   *Signer
	tampered *atomic.Int32
}

func newTrustLog(t *testing.T, s Store, stateFile string) trustLog {
	t.Helper()
	signer := newSigner(t)
	cfg := signedLogConfig(t, s, signer)
	cfg.StateFile = stateFile
	n := new(atomic.Int32)
	cfg.Tampered = func(error) { n.Add(1) }
	return trustLog{cfg: cfg, signer: signer, tampered: n}
}

func (tl trustLog) open(t *testing.T, s StoreCloser) (*LogWriter, StoreCloser) {
	t.Helper()
	return openLogged(t, s, tl.cfg)
}

// checkpoints lists the log's checkpoint keys.
func checkpoints(t *testing.T, s Store) []string {
	t.Helper()
	keys, err := s.List(context.Background(), LogPrefix("gw-1")+checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// forgedEntry is a claim the gateway never logged.
func forgedEntry(t testing.TB) []byte {
	t.Helper()
	e, err := tlog.Entry{Kind: tlog.KindClaim, RequestID: "forged", CanonicalRequestHash: "sha256:" + strings.Repeat("ee", 32),
		RequestSHA256: strings.Repeat("ee", 32), ReceivedAt: storyT0, Gateway: "toolgate/test@gw-1"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sealedWith encodes b as the writer stores it, its header sealed by seal
// (nil: no seal).
func sealedWith(t testing.TB, key string, b batch, seal func(key string, body []byte) ([]byte, error)) []byte {
	t.Helper()
	if seal == nil {
		seal = func(_ string, body []byte) ([]byte, error) { return body, nil }
	}
	data, err := encodeBatch(&LogWriter{seal: seal}, key, b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// plantedBatch is the attack of issue 24: a batch of an older epoch in
// the log's next slot, extending its tree, with an entry the gateway
// never wrote; forge makes its stored bytes.
func plantedBatch(t *testing.T, l *LogWriter, forge func(key string, b batch) []byte) (string, []byte) {
	t.Helper()
	root := l.tree.Root()
	key := seqKey(LogPrefix("gw-1")+batchDir, l.tree.Size())
	b := batch{Version: batchVersion, Origin: l.cfg.Origin, Epoch: l.epoch - 1, Start: l.tree.Size(), RootBefore: root[:], Entries: [][]byte{forgedEntry(t)}}
	return key, forge(key, b)
}

// TestLogRefusesBatchesItCannotAuthenticate: a batch in the writer's next
// slot that no trusted key sealed is never integrated nor covered by a
// checkpoint; the writer fences itself, Ready refuses calls, and the
// refusal is reported. At the next start the same batch stops the log
// from opening.
func TestLogRefusesBatchesItCannotAuthenticate(t *testing.T) {
	t.Parallel()
	other := testSealerFor(t, newSigner(t))
	for _, st := range hostileStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				forge func(t *testing.T, l *LogWriter) func(key string, b batch) []byte
				want  error
			}{
				{"unsigned, older epoch, the format before seals", func(t *testing.T, _ *LogWriter) func(string, batch) []byte {
					return func(_ string, b batch) []byte {
						data, _ := json.Marshal(map[string]any{"v": 1, "origin": b.Origin, "epoch": b.Epoch, "start": b.Start,
							"root_before": b.RootBefore, "entries": b.Entries})
						return data
					}
				}, trust.ErrUnsealed},
				{"unsigned, older epoch", func(t *testing.T, _ *LogWriter) func(string, batch) []byte {
					return func(key string, b batch) []byte { return sealedWith(t, key, b, nil) }
				}, trust.ErrUnsealed},
				{"sealed by an untrusted key", func(t *testing.T, _ *LogWriter) func(string, batch) []byte {
					return func(key string, b batch) []byte { return sealedWith(t, key, b, other.Sign) }
				}, trust.ErrUntrustedKey},
				{"a MAC, not a signature", func(t *testing.T, l *LogWriter) func(string, batch) []byte {
					return func(key string, b batch) []byte { return sealedWith(t, key, b, l.cfg.Sealer.MAC) }
				}, trust.ErrTampered},
				{"a genuine seal of another slot", func(t *testing.T, l *LogWriter) func(string, batch) []byte {
					return func(key string, b batch) []byte {
						return sealedWith(t, key, b, func(key string, body []byte) ([]byte, error) { return l.cfg.Sealer.Sign(key+"0", body) })
					}
				}, trust.ErrTampered},
				{"a genuine header over other entries", func(t *testing.T, l *LogWriter) func(string, batch) []byte {
					return func(key string, b batch) []byte {
						genuine := b
						genuine.Entries = [][]byte{[]byte("what the writer sealed")}
						header, _, _ := bytes.Cut(sealedWith(t, key, genuine, l.cfg.Sealer.Sign), []byte("\n"))
						_, entries, _ := bytes.Cut(sealedWith(t, key, b, nil), []byte("\n"))
						return append(append(header, '\n'), entries...)
					}
				}, trust.ErrTampered},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					b := st.open(t)
					tl := newTrustLog(t, b, filepath.Join(t.TempDir(), "state"))
					l, s := tl.open(t, b)
					storeClaim(t, s, "r1", tl.cfg.Gateway)
					if err := l.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					before := checkpoints(t, b)
					key, data := plantedBatch(t, l, tc.forge(t, l))
					mustPut(t, b, key, data)

					storeClaim(t, s, "r2", tl.cfg.Gateway)
					err := l.Flush(ctx)
					if !errors.Is(err, ErrLogTampered) || !errors.Is(err, tc.want) {
						t.Fatalf("flush over the planted batch = %v, want ErrLogTampered and %v", err, tc.want)
					}
					if err := l.Ready(); !errors.Is(err, ErrLogTampered) {
						t.Fatalf("Ready = %v: the gateway would take calls it cannot log", err)
					}
					if err := s.Put(ctx, Key("r3", ArtifactRequest), []byte(`{}`)); !errors.Is(err, ErrLogTampered) {
						t.Fatalf("a claim through the tampered log: %v", err)
					}
					if got := checkpoints(t, b); !slices.Equal(got, before) {
						t.Fatalf("checkpoints %v after the planted batch, want only %v", got, before)
					}
					if got := loggedCalls(t, b); slices.Contains(got, "claim forged") {
						t.Fatalf("the forged entry is covered by a checkpoint: %v", got)
					}
					if n := tl.tampered.Load(); n != 1 {
						t.Fatalf("%d refusals reported, want 1", n)
					}
					// A restart meets the planted batch first and signs nothing.
					if _, err := OpenLog(ctx, b, tl.cfg); !errors.Is(err, ErrLogTampered) || !strings.Contains(err.Error(), key) {
						t.Fatalf("restart over the planted batch = %v, want ErrLogTampered naming %s", err, key)
					}
					if got := checkpoints(t, b); !slices.Equal(got, before) {
						t.Fatalf("the restart signed %v", got)
					}
				})
			}
		})
	}
}

// testSealerFor returns the sealer of signer's key.
func testSealerFor(t *testing.T, signer *Signer) *trust.Sealer {
	t.Helper()
	s, err := signer.Sealer()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLogRefusesUnauthenticatedHeads: the records a restart builds on,
// the newest checkpoint and a closed lease, count only when a trusted key
// signed them. A forged checkpoint stops the start; a forged closed lease
// cannot hide that the previous process died with entries queued.
func TestLogRefusesUnauthenticatedHeads(t *testing.T) {
	t.Parallel()
	attacker := newSigner(t)
	for _, st := range hostileStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Run("a newer checkpoint signed by another key", func(t *testing.T) {
				ctx := context.Background()
				b := st.open(t)
				tl := newTrustLog(t, b, "")
				l, s := tl.open(t, b)
				storeClaim(t, s, "r1", tl.cfg.Gateway)
				if err := l.Close(ctx); err != nil {
					t.Fatal(err)
				}
				cs, _ := attacker.CheckpointSigner(tl.cfg.Origin)
				forged, _ := tlog.SignCheckpoint(cs, 9, tlog.Hash{9})
				mustPut(t, b, seqKey(LogPrefix("gw-1")+checkpointDir, 9), forged)
				if _, err := OpenLog(ctx, b, tl.cfg); !errors.Is(err, ErrLogTampered) {
					t.Fatalf("OpenLog over a forged checkpoint = %v, want ErrLogTampered", err)
				}
				if tl.tampered.Load() != 1 {
					t.Fatalf("%d refusals reported, want 1", tl.tampered.Load())
				}
			})
			t.Run("a planted closed lease after a crash", func(t *testing.T) {
				ctx := context.Background()
				b := st.open(t)
				tl := newTrustLog(t, b, "")
				l, s := tl.open(t, b)
				sealedCall(t, s, tl, "a")
				if err := l.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				sealedCall(t, s, tl, "b")
				// The process dies; the attacker marks its lease closed.
				mustPut(t, b, seqKey(LogPrefix("gw-1")+leaseDir, l.Epoch())+closedSuffix, []byte(`{"size":2}`))
				next, _ := tl.open(t, b)
				if err := next.Close(ctx); err != nil {
					t.Fatal(err)
				}
				want := []string{"claim a", "completion a", "claim b", "completion b"}
				if got := loggedCalls(t, b); !slices.Equal(got[:2], want[:2]) || !sameSet(got[2:], want[2:]) {
					t.Fatalf("log = %v, want %v", got, want)
				}
				if tl.tampered.Load() != 1 {
					t.Fatalf("%d refusals reported, want 1", tl.tampered.Load())
				}
			})
		})
	}
}

// sealedCall stores a finished call of request id as a gateway does:
// request.json and the decision sealed with the log's MAC, the manifest
// signed and listing both.
func sealedCall(t *testing.T, s Store, tl trustLog, id string) {
	t.Helper()
	req := sealedClaim(t, s, tl, id, tl.cfg.Gateway)
	dec, _ := json.Marshal(DecisionRecord{RequestID: id, Decision: "allow", Gateway: tl.cfg.Gateway})
	dec, err := tl.cfg.Sealer.MAC(Key(id, ArtifactPolicyDecision), dec)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, Key(id, ArtifactPolicyDecision), dec)
	putManifest(t, s, id, map[string]string{ArtifactRequest: string(req), ArtifactPolicyDecision: string(dec)}, tl.signer)
}

// sealedClaim stores request id's request.json, claimed by gateway,
// sealed with the log's MAC.
func sealedClaim(t *testing.T, s Store, tl trustLog, id, gateway string) []byte {
	t.Helper()
	req := claimRecord(id, gateway)
	req, err := tl.cfg.Sealer.MAC(Key(id, ArtifactRequest), req)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, Key(id, ArtifactRequest), req)
	return req
}

func claimRecord(id, gateway string) []byte {
	req, _ := json.Marshal(RequestRecord{
		RequestID: id, Caller: "c", ToolID: "t", Args: json.RawMessage(`{}`),
		ReceivedAt:           time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: gateway,
	})
	return req
}

// plainCall stores a finished call whose request.json and decision carry
// no seal (as a gateway before seals wrote them), with a manifest signed
// by signer (nil: unsigned) that lists both.
func plainCall(t *testing.T, s Store, id, gateway string, signer *Signer) {
	t.Helper()
	req := claimRecord(id, gateway)
	mustPut(t, s, Key(id, ArtifactRequest), req)
	dec, _ := json.Marshal(DecisionRecord{RequestID: id, Decision: "allow", Gateway: gateway})
	mustPut(t, s, Key(id, ArtifactPolicyDecision), dec)
	putManifest(t, s, id, map[string]string{ArtifactRequest: string(req), ArtifactPolicyDecision: string(dec)}, signer)
}

// TestLogCatchUpLogsOnlyWhatItAuthenticates: after a crash, the catch-up
// logs the artifacts the previous process stored but did not sequence,
// and only those it can authenticate: a record sealed by a trusted key,
// or listed by a manifest a trusted key signed. A request folder planted
// in the bucket gets no entry, so recovery's manifest for it cannot be
// backed by a logged claim; every planted record that names this
// instance is reported.
func TestLogCatchUpLogsOnlyWhatItAuthenticates(t *testing.T) {
	t.Parallel()
	attacker := newSigner(t)
	cases := []struct {
		name     string
		crash    func(t *testing.T, b *hostileBucket, s Store, tl trustLog)
		want     []string // logged after the flushed call "a"
		tampered bool
	}{
		{"sealed records of the crashed process", func(t *testing.T, _ *hostileBucket, s Store, tl trustLog) {
			sealedCall(t, s, tl, "b")
			sealedClaim(t, s, tl, "c", tl.cfg.Gateway)
		}, []string{"claim b", "completion b", "claim c"}, false},
		{"unsealed records a trusted manifest lists", func(t *testing.T, _ *hostileBucket, s Store, tl trustLog) {
			plainCall(t, s, "b", tl.cfg.Gateway, tl.signer)
		}, []string{"claim b", "completion b"}, false},
		{"another instance's records", func(t *testing.T, b *hostileBucket, _ Store, tl trustLog) {
			plainCall(t, b, "other", "toolgate/test@gw-2", nil)
		}, nil, false},
		{"a planted claim", func(t *testing.T, b *hostileBucket, _ Store, tl trustLog) {
			mustPut(t, b, Key("planted", ArtifactRequest), claimRecord("planted", tl.cfg.Gateway))
		}, nil, true},
		{"a planted folder with an unsigned manifest", func(t *testing.T, b *hostileBucket, _ Store, tl trustLog) {
			plainCall(t, b, "planted", tl.cfg.Gateway, nil)
		}, nil, true},
		{"a planted folder signed by an untrusted key", func(t *testing.T, b *hostileBucket, _ Store, tl trustLog) {
			plainCall(t, b, "planted", tl.cfg.Gateway, attacker)
		}, nil, true},
		{"a sealed claim copied into another folder", func(t *testing.T, b *hostileBucket, s Store, tl trustLog) {
			sealed := sealedClaim(t, s, tl, "b", tl.cfg.Gateway)
			mustPut(t, b, Key("copy", ArtifactRequest), sealed)
		}, []string{"claim b"}, true},
		{"a claim sealed by another gateway's MAC key", func(t *testing.T, b *hostileBucket, _ Store, tl trustLog) {
			sealed, _ := testSealerFor(t, attacker).MAC(Key("planted", ArtifactRequest), claimRecord("planted", tl.cfg.Gateway))
			mustPut(t, b, Key("planted", ArtifactRequest), sealed)
		}, nil, true},
		{"an unsealed batch that claims the lost entries were logged", func(t *testing.T, b *hostileBucket, s Store, tl trustLog) {
			sealedCall(t, s, tl, "b")
			var entries [][]byte
			for _, k := range []string{ArtifactRequest, ArtifactManifest} {
				kind := map[string]string{ArtifactRequest: tlog.KindClaim, ArtifactManifest: tlog.KindCompletion}[k]
				e, _ := logEntry(kind, mustGet(t, b, Key("b", k)), tl.cfg.Gateway)
				entries = append(entries, e)
			}
			key := seqKey(LogPrefix("gw-1")+batchDir, 900)
			mustPut(t, b, key, sealedWith(t, key, batch{Version: batchVersion, Origin: tl.cfg.Origin, Epoch: 1, Start: 900, Entries: entries}, nil))
		}, []string{"claim b", "completion b"}, true},
	}
	for _, st := range hostileStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					ctx := context.Background()
					b := st.open(t)
					tl := newTrustLog(t, b, "")
					l, s := tl.open(t, b)
					sealedCall(t, s, tl, "a")
					if err := l.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					tc.crash(t, b, s, tl)
					// The process dies here: no Flush, no Close.
					next, _ := tl.open(t, b)
					if err := next.Close(ctx); err != nil {
						t.Fatal(err)
					}
					got := loggedCalls(t, b)
					if !slices.Equal(got[:2], []string{"claim a", "completion a"}) || !sameSet(got[2:], tc.want) {
						t.Fatalf("log = %v, want claim a, completion a, then %v in any order", got, tc.want)
					}
					if n := tl.tampered.Load(); (n > 0) != tc.tampered {
						t.Fatalf("%d refusals reported, want some: %v", n, tc.tampered)
					}
				})
			}
		})
	}
}

// rolledBucket is a log of five entries whose state file and closed lease
// record size 5, and a snapshot of the log taken at size 3.
type rolledBucket struct {
	*hostileBucket
	tl    trustLog
	state string
	at3   map[string][]byte
}

func newRolledBucket(t *testing.T, b *hostileBucket) *rolledBucket {
	t.Helper()
	ctx := context.Background()
	r := &rolledBucket{hostileBucket: b, state: filepath.Join(t.TempDir(), "signing.key.gw-1.log-state")}
	r.tl = newTrustLog(t, b, r.state)
	l, err := OpenLog(ctx, b, r.tl.cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(l, "e1", "e2", "e3")
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r.at3 = b.snapshot(t, LogPrefix("gw-1"))
	appendAll(l, "e4", "e5")
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, size, _, err := checkpointBody(readFile(t, r.state)); err != nil || size != 5 {
		t.Fatalf("the state file holds size %d (%v), want 5", size, err)
	}
	return r
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// fork signs, with the log's own key but no state file (as a gateway
// before state files did on a rolled-back store), n other entries on top
// of the snapshot at size 3.
func (r *rolledBucket) fork(t *testing.T, n int) {
	t.Helper()
	r.restore(t, LogPrefix("gw-1"), r.at3)
	cfg := r.tl.cfg
	cfg.StateFile = ""
	l, err := OpenLog(context.Background(), r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		l.Append(fmt.Appendf(nil, "fork-%d", i))
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLogRefusesRollbackAndFork: a gateway restarted on a log older than,
// or forked from, the newest checkpoint it signed (as its state file and
// its closed lease record it) refuses to open the log, names the sizes
// and says what to do, and signs nothing; an honest restart and the first
// start without a state file go on.
func TestLogRefusesRollbackAndFork(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		tamper  func(t *testing.T, r *rolledBucket) LogConfig
		want    []string // in the error; none: the start succeeds
		wantErr error    // ErrLogBehind unless set
	}{
		{"an honest restart", func(t *testing.T, r *rolledBucket) LogConfig { return r.tl.cfg }, nil, nil},
		{"an older snapshot of the log restored", func(t *testing.T, r *rolledBucket) LogConfig {
			r.restore(t, LogPrefix("gw-1"), r.at3)
			return r.tl.cfg
		}, []string{"rolled back", "size 5", "size 3", "state file"}, nil},
		{"the newest checkpoints deleted", func(t *testing.T, r *rolledBucket) LogConfig {
			keys := checkpoints(t, r)
			r.remove(t, keys[len(keys)-1])
			return r.tl.cfg
		}, []string{"rolled back", "size 5", "size 3"}, nil},
		{"an older snapshot and no state file: the closed lease", func(t *testing.T, r *rolledBucket) LogConfig {
			leases := r.snapshot(t, LogPrefix("gw-1")+leaseDir)
			r.restore(t, LogPrefix("gw-1"), r.at3)
			for k, v := range leases {
				if _, ok := r.at3[k]; !ok {
					mustPut(t, r, k, v)
				}
			}
			cfg := r.tl.cfg
			cfg.StateFile = ""
			return cfg
		}, []string{"rolled back", "closed lease", "size 5", "size 3"}, nil},
		{"a fork of the same size", func(t *testing.T, r *rolledBucket) LogConfig {
			r.fork(t, 2)
			return r.tl.cfg
		}, []string{"forked", "size 5"}, nil},
		{"a longer fork", func(t *testing.T, r *rolledBucket) LogConfig {
			r.fork(t, 4)
			return r.tl.cfg
		}, []string{"forked", "size 7", "size 5"}, nil},
		{"the log and the bucket id deleted", func(t *testing.T, r *rolledBucket) LogConfig {
			r.restore(t, "log/", nil)
			cfg := r.tl.cfg
			origin, err := LogOrigin(context.Background(), r, "gw-1")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Origin = origin
			return cfg
		}, []string{"bucket-id", "toolgate.log/"}, nil},
		{"the bucket id replaced", func(t *testing.T, r *rolledBucket) LogConfig {
			r.remove(t, bucketIDKey)
			cfg := r.tl.cfg
			origin, err := LogOrigin(context.Background(), r, "gw-1")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Origin = origin
			return cfg
		}, []string{"bucket-id", "put the one the checkpoints name back"}, nil},
		{"a state file that holds no checkpoint", func(t *testing.T, r *rolledBucket) LogConfig {
			if err := os.WriteFile(r.state, []byte("size 5\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return r.tl.cfg
		}, []string{"does not hold a checkpoint", "remove it"}, errNotBehind},
	}
	for _, st := range hostileStores(t) {
		t.Run(st.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					r := newRolledBucket(t, st.open(t))
					cfg := tc.tamper(t, r)
					before := checkpoints(t, r)
					l, err := OpenLog(context.Background(), r, cfg)
					if tc.want == nil {
						if err != nil {
							t.Fatalf("OpenLog = %v", err)
						}
						l.Append([]byte("e6"))
						if err := l.Close(context.Background()); err != nil {
							t.Fatal(err)
						}
						if _, size, _, _ := checkpointBody(readFile(t, r.state)); size != 6 {
							t.Fatalf("the state file holds size %d, want 6", size)
						}
						return
					}
					if behind := errors.Is(err, ErrLogBehind); err == nil || behind != (tc.wantErr == nil) {
						t.Fatalf("OpenLog = %v, want ErrLogBehind: %v", err, tc.wantErr == nil)
					}
					for _, w := range tc.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("the refusal does not say %q: %v", w, err)
						}
					}
					if got := checkpoints(t, r); !slices.Equal(got, before) {
						t.Fatalf("the refused start signed checkpoints: %v, before %v", got, before)
					}
					if reported := r.tl.tampered.Load() > 0; reported != (tc.wantErr == nil) {
						t.Fatalf("the refusal reported: %v, want %v", reported, tc.wantErr == nil)
					}
				})
			}
		})
	}
}

// errNotBehind marks a refused start that is not a store behind the
// state file.
var errNotBehind = errors.New("not behind")

// The first start of a version that keeps a state file, on an existing
// log, accepts the log as it is and writes the state file; from then on
// a rollback is refused.
func TestLogStateFileCreatedOnFirstStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	tl := newTrustLog(t, mem, "")
	l, err := OpenLog(ctx, mem, tl.cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(l, "e1", "e2")
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// No closed lease: the process died, and its successor keeps state.
	tl.cfg.StateFile = filepath.Join(t.TempDir(), "state")
	l, err = OpenLog(ctx, mem, tl.cfg)
	if err != nil {
		t.Fatalf("the first start with a state file: %v", err)
	}
	if _, size, _, err := checkpointBody(readFile(t, tl.cfg.StateFile)); err != nil || size != 2 {
		t.Fatalf("state file: size %d, %v; want 2", size, err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A new log's state file exists from its first start.
	fresh := NewMemoryStore()
	ftl := newTrustLog(t, fresh, filepath.Join(t.TempDir(), "state"))
	if _, err := OpenLog(ctx, fresh, ftl.cfg); err != nil {
		t.Fatal(err)
	}
	if _, size, _, err := checkpointBody(readFile(t, ftl.cfg.StateFile)); err != nil || size != 0 {
		t.Fatalf("a new log's state file: size %d, %v; want 0", size, err)
	}
}

// A state file that cannot be written stops the start with a message
// that says which setting to change.
func TestLogStateFileUnwritable(t *testing.T) {
	t.Parallel()
	mem := NewMemoryStore()
	tl := newTrustLog(t, mem, filepath.Join(t.TempDir(), "missing-folder", "state"))
	_, err := OpenLog(context.Background(), mem, tl.cfg)
	if err == nil || !strings.Contains(err.Error(), "log.state_file") {
		t.Fatalf("OpenLog = %v, want an error naming log.state_file", err)
	}
}

// FuzzOpenBatch: whatever the store holds at a batch key, openBatch
// accepts only what the writer stored there, byte for byte, and refuses
// the rest as a bad batch.
func FuzzOpenBatch(f *testing.F) {
	s := NewMemoryStore()
	cfg := testLogConfig(f, s)
	l := &LogWriter{cfg: cfg, prefix: LogPrefix("gw-1"), seal: cfg.Sealer.Sign}
	key := seqKey(l.prefix+batchDir, 0)
	b := batch{Version: batchVersion, Origin: cfg.Origin, RootBefore: make([]byte, 32), Entries: [][]byte{[]byte("e"), []byte("f")}}
	f.Add(sealedWith(f, key, b, cfg.Sealer.Sign))
	f.Add(sealedWith(f, key, b, nil))
	f.Add([]byte(`{"v":2,"seal":{"alg":"ed25519","key_id":"","value":""}}` + "\n[]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := l.openBatch(key, data)
		if err != nil {
			if !errors.Is(err, errBadBatch) {
				t.Fatalf("openBatch error %v is not errBadBatch", err)
			}
			return
		}
		again, err := encodeBatch(l, key, got)
		if err != nil || !bytes.Equal(again, data) || len(got.Entries) == 0 {
			t.Fatalf("opened %q, which the writer did not store (%v)", data, err)
		}
	})
}
