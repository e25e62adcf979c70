package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The attacks of issue 24 on the log (classes 2 and 3), against the real
// binary, on the file store and on a real MinIO: a bucket writer without
// the gateway's key must not make the gateway sign what it did not write,
// nor make it sign a log that does not extend its earlier checkpoints.

// logTrustStores opens a fresh logged bucket of each kind.
func logTrustStores(t *testing.T) []struct {
	name string
	open func(t *testing.T) *loggedBucket
} {
	m := evidencetest.StartMinIO(t)
	n := 0
	return []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket {
			n++
			return minioLoggedBucket(t, m, fmt.Sprintf("logtrust-%d", n))
		}},
	}
}

// newestCheckpoint returns the origin, size and root of the log's newest
// checkpoint.
func (b *loggedBucket) newestCheckpoint(t *testing.T) (string, uint64, []byte) {
	t.Helper()
	data, err := b.store.Get(context.Background(), b.newestCheckpointKey(t))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	size, err := strconv.ParseUint(lines[1], 10, 64)
	root, rerr := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || rerr != nil {
		t.Fatalf("checkpoint %q: %v %v", data, err, rerr)
	}
	return lines[0], size, root
}

func (b *loggedBucket) checkpointKeys(t *testing.T) []string {
	t.Helper()
	keys, err := b.store.List(context.Background(), evidence.LogPrefix("gw-1")+"checkpoint/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// forgedBatch is what the attack of issue 24 stored: a batch in the log's
// next slot, of an older epoch, extending the newest checkpoint's tree,
// with an entry the gateway never wrote. It carries no seal.
func (b *loggedBucket) forgedBatch(t *testing.T) (key string, data []byte) {
	t.Helper()
	origin, size, root := b.newestCheckpoint(t)
	entry, err := tlog.Entry{Kind: tlog.KindClaim, RequestID: "forged", CanonicalRequestHash: "sha256:" + strings.Repeat("ee", 32),
		RequestSHA256: strings.Repeat("ee", 32), ReceivedAt: time.Now().UTC().Truncate(time.Second), Gateway: "toolgate/0.1.0@gw-1"}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	data, _ = json.Marshal(map[string]any{"v": 1, "origin": origin, "epoch": 0, "start": size, "root_before": root, "entries": [][]byte{entry}})
	return fmt.Sprintf("%sbatch/%020d", evidence.LogPrefix("gw-1"), size), data
}

// snapshot copies every object under prefix; restoreSnapshot puts it back
// in place of what is there now.
func (b *loggedBucket) snapshot(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	keys, err := b.store.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if out[k], err = b.store.Get(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func (b *loggedBucket) restoreSnapshot(t *testing.T, prefix string, snap map[string][]byte) {
	t.Helper()
	b.removeAll(t, prefix)
	for k, data := range snap {
		if err := b.store.Put(context.Background(), k, data); err != nil {
			t.Fatal(err)
		}
	}
}

// serveRefused runs `toolgate serve` and returns its stderr and exit code
// once it exits, failing the test if it starts serving instead.
func (b *loggedBucket) serveRefused(t *testing.T, cfg string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolgateBin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--config", cfg)
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), b.env...)
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve did not refuse to start:\n%s", out)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestHostileInjectedLogBatch: an unsigned batch written into the next
// slot of a running gateway's log is never integrated nor covered by a
// checkpoint. The gateway stops signing, refuses new calls (UNAVAILABLE,
// nothing runs), counts the refusal in
// toolgate_evidence_tampering_total{record="log"}, and does not start
// again until the batch is removed; then every call that ran is logged
// and the forged entry never is.
func TestHostileInjectedLogBatch(t *testing.T) {
	t.Parallel()
	for _, st := range logTrustStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			cfg := signingGateway(t, b.dir, b.url)
			s := startServerEnv(t, b.dir, b.env, "--config", cfg)
			runCalls(t, s.addr, "call", 2)
			b.awaitLogged(t, "kept.txt", 4)
			before := b.checkpointKeys(t)
			key, forged := b.forgedBatch(t)
			if err := b.store.Put(context.Background(), key, forged); err != nil {
				t.Fatal(err)
			}

			// The next call's entries meet the planted batch in their slot.
			runCalls(t, s.addr, "after", 1)
			c := dial(t, s.addr)
			eventually(t, 10*time.Second, "the gateway refuses calls", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := c.RunTool(ctx, shellRequest(t, fmt.Sprintf("refused-%d", time.Now().UnixNano()), "echo ran >> refused.txt"))
				if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "failed authentication") {
					return fmt.Errorf("call answered %v", err)
				}
				return nil
			})
			if _, err := os.Stat(filepath.Join(b.dir, "ws", "refused.txt")); err == nil {
				t.Fatal("a gateway whose log refused a planted batch ran a call")
			}
			if v := sampleValue(scrape(t, s), "toolgate_evidence_tampering_total", `record="log"`); v != "1" {
				t.Errorf(`toolgate_evidence_tampering_total{record="log"} = %q, want 1`, v)
			}
			if !strings.Contains(s.log.String(), "evidence tampering") || !strings.Contains(s.log.String(), key) {
				t.Errorf("the gateway's log does not name the planted batch %s", key)
			}
			if got := b.checkpointKeys(t); !slices.Equal(got, before) {
				t.Fatalf("checkpoints signed after the planted batch: %v, before %v", got, before)
			}
			stopServer(t, s)

			// A restart meets the batch first: it says so and signs nothing.
			out, code := b.serveRefused(t, cfg)
			if code != exitError || !strings.Contains(out, key) || !strings.Contains(out, "failed authentication") {
				t.Fatalf("restart over the planted batch: exit %d, want 2 naming %s:\n%s", code, key, out)
			}
			if got := b.checkpointKeys(t); !slices.Equal(got, before) {
				t.Fatalf("the refused restart signed checkpoints: %v", got)
			}
			// The operator removes it; the call the batch held back is
			// logged by the next process, the forged entry never.
			b.remove(t, key)
			s = startServerEnv(t, b.dir, b.env, "--config", cfg)
			b.awaitLogged(t, "kept.txt", 6)
			stopServer(t, s)
		})
	}
}

// TestHostileLogRollback: the log replaced by an older copy of itself,
// after the gateway signed more, makes the gateway refuse to start, name
// the sizes and the state file, and sign nothing. Removing the state
// file, as the README says for a store restored on purpose, lets it
// start again.
func TestHostileLogRollback(t *testing.T) {
	t.Parallel()
	for _, st := range logTrustStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			cfg := signingGateway(t, b.dir, b.url)
			s := startServerEnv(t, b.dir, b.env, "--config", cfg)
			runCalls(t, s.addr, "call", 2)
			b.awaitLogged(t, "kept.txt", 4)
			stopServer(t, s)
			old := b.snapshot(t, evidence.LogPrefix("gw-1"))

			s = startServerEnv(t, b.dir, b.env, "--config", cfg)
			runCalls(t, s.addr, "more", 2)
			b.awaitLogged(t, "kept.txt", 8)
			stopServer(t, s)
			b.restoreSnapshot(t, evidence.LogPrefix("gw-1"), old)
			before := b.checkpointKeys(t)

			state := "signing.pem.gw-1.log-state" // beside the key, relative as the key's path is
			out, code := b.serveRefused(t, cfg)
			for _, want := range []string{"rolled back", "size 8", "size 4", "remove " + state} {
				if code != exitError || !strings.Contains(out, want) {
					t.Fatalf("serve on the rolled-back log: exit %d, want 2 and %q in:\n%s", code, want, out)
				}
			}
			if got := b.checkpointKeys(t); !slices.Equal(got, before) {
				t.Fatalf("the refused start signed checkpoints: %v, before %v", got, before)
			}
			if err := os.Remove(filepath.Join(b.dir, state)); err != nil {
				t.Fatal(err)
			}
			s = startServerEnv(t, b.dir, b.env, "--config", cfg)
			if !strings.Contains(s.log.String(), "no state file") {
				t.Errorf("the start without a state file does not say so:\n%s", s.log.String())
			}
			stopServer(t, s)
		})
	}
}

// TestHostileLogFork: the log cut back to an older checkpoint and the
// batch after it rewritten with other entries (and the root it must
// extend), which the gateway would sign as a fork, is never signed. The state
// file and the closed lease refuse the store first, as rolled back; an
// operator who removes both still gets a refusal, for the batch.
func TestHostileLogFork(t *testing.T) {
	t.Parallel()
	for _, st := range logTrustStores(t) {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			cfg := signingGateway(t, b.dir, b.url)
			s := startServerEnv(t, b.dir, b.env, "--config", cfg)
			runCalls(t, s.addr, "call", 2)
			b.awaitLogged(t, "kept.txt", 4)
			runCalls(t, s.addr, "more", 2)
			b.awaitLogged(t, "kept.txt", 8)
			stopServer(t, s)

			// Back to size 4: the newer checkpoints, batches and partial tiles
			// deleted, and the batch at 4 rewritten.
			keys := b.checkpointKeys(t)
			all, err := b.store.List(context.Background(), evidence.LogPrefix("gw-1"))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range all {
				dir, last := k[:strings.LastIndexByte(k, '/')+1], k[strings.LastIndexByte(k, '/')+1:]
				n, err := strconv.ParseUint(last, 10, 64)
				newer := err == nil && n > 4 && !strings.HasSuffix(dir, "/lease/")
				if newer && (strings.HasSuffix(dir, ".p/") || strings.HasSuffix(dir, "/batch/") || strings.HasSuffix(dir, "/checkpoint/")) {
					b.remove(t, k)
				}
			}
			if _, size, _ := b.newestCheckpoint(t); size != 4 {
				t.Fatalf("no checkpoint of size 4 among %v", keys)
			}
			key, forged := b.forgedBatch(t)
			b.replace(t, key, forged)
			before := b.checkpointKeys(t)

			state := filepath.Join(b.dir, "signing.pem.gw-1.log-state")
			closed := b.snapshot(t, evidence.LogPrefix("gw-1")+"lease/")
			for _, step := range []struct {
				want   string
				remove func()
			}{
				{"rolled back", func() {
					if err := os.Remove(state); err != nil {
						t.Fatal(err)
					}
				}},
				{"closed lease", func() {
					for k := range closed {
						if strings.HasSuffix(k, ".closed") {
							b.remove(t, k)
						}
					}
				}},
				{key, nil},
			} {
				out, code := b.serveRefused(t, cfg)
				if code != exitError || !strings.Contains(out, step.want) {
					t.Fatalf("serve on the forked log: exit %d, want 2 and %q in:\n%s", code, step.want, out)
				}
				if got := b.checkpointKeys(t); !slices.Equal(got, before) {
					t.Fatalf("the refused start signed checkpoints: %v, before %v", got, before)
				}
				if step.remove != nil {
					step.remove()
				}
			}
		})
	}
}
