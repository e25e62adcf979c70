package main

// The rollback suite: a bucket owner replaces a gateway's log with an
// older copy and deletes the requests logged since, on the file store and
// on a real MinIO. Without a kept checkpoint, what catches it is a peer
// replica that witnessed the log, or an external witness (its cosigned
// checkpoint, the next cosign, or a proof handed out before).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
)

// keyNames returns every key under prefix: a copy of what the bucket
// held at one moment, to roll back to.
func (b *loggedBucket) keyNames(t *testing.T, prefix string) map[string]bool {
	t.Helper()
	keys, err := b.store.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// rollBack removes every key under prefix that was not there when older
// was taken, except those spared: the store is create-only, so this is
// the older copy put back.
func (b *loggedBucket) rollBack(t *testing.T, prefix string, older map[string]bool, spared ...string) {
	t.Helper()
	for k := range b.keyNames(t, prefix) {
		if !older[k] && !containsString(spared, k) {
			b.remove(t, k)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// witnessedReplicas are gateways gw-a and gw-b sharing one store, each
// signing with its own key and trusting the other's (evidence.trusted_keys),
// witnessing each other every 200ms.
type witnessedReplicas struct {
	b   *loggedBucket
	srv map[string]*server
}

func startWitnessedReplicas(t *testing.T, b *loggedBucket) *witnessedReplicas {
	t.Helper()
	r := &witnessedReplicas{b: b, srv: map[string]*server{}}
	for _, name := range []string{"gw-a", "gw-b"} {
		if _, stderr, code := runTool(t, b.dir, "evidence", "keygen", "--out", name+".pem"); code != exitOK {
			t.Fatalf("keygen: %s", stderr)
		}
		pub, stderr, code := runTool(t, b.dir, "evidence", "pubkey", "--key", name+".pem")
		if code != exitOK {
			t.Fatalf("pubkey: %s", stderr)
		}
		if err := os.WriteFile(filepath.Join(b.dir, name+".pub"), []byte(pub), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, peer := range map[string]string{"gw-a": "gw-b", "gw-b": "gw-a"} {
		cfg := fmt.Sprintf(`instance: %s
evidence:
  url: %q
  spool_dir: none
  signing_key: {file: %s.pem}
  trusted_keys: [{file: %s.pub}]
  peer_witness_interval: 200ms
log:
  checkpoint_interval: 100ms
drivers:
  workspace: {type: workspace, root: ./ws}
`, name, b.url, name, peer)
		if err := os.WriteFile(filepath.Join(b.dir, name+".yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"gw-a", "gw-b"} {
		r.srv[name] = startServerEnv(t, b.dir, b.env, "--config", name+".yaml")
	}
	return r
}

// audit runs verify --all as an auditor who holds both replicas' public
// keys and nothing else: no kept checkpoint, no witness.
func (r *witnessedReplicas) audit(t *testing.T, more ...string) (string, int) {
	t.Helper()
	args := append([]string{"evidence", "verify", "--all", "--evidence", r.b.url, "--pubkey", "gw-a.pub", "--pubkey", "gw-b.pub",
		"--require-signature", "--require-log"}, more...)
	out, stderr, code := runToolEnv(t, r.b.dir, r.b.env, args...)
	if code == exitError {
		t.Fatalf("verify: %s", stderr)
	}
	return out, code
}

// awaitWitnessed waits until the store verifies and gw-b has witnessed
// gw-a's log at a size larger than after that covers every entry of
// gw-a's requests (not necessarily gw-a's own newest witness entries:
// growth by witness entries alone is not witnessed), and returns it.
func (r *witnessedReplicas) awaitWitnessed(t *testing.T, after uint64) uint64 {
	t.Helper()
	var size uint64
	eventually(t, 30*time.Second, "gw-b witnessed every request of gw-a", func() error {
		out, code := r.audit(t, "--json")
		if code != exitOK {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		var origin string
		var witnessed, needed uint64
		var requests []jsonReport
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var l struct {
				Log *evidence.LogReport `json:"transparency_log"`
			}
			if err := json.Unmarshal([]byte(line), &l); err == nil && l.Log != nil {
				if l.Log.Instance == "gw-a" {
					origin = l.Log.Origin
					for _, p := range l.Log.PeerWitnessed {
						if p.By == "gw-b" {
							witnessed = p.Size
						}
					}
				}
				continue
			}
			var rep jsonReport
			if err := json.Unmarshal([]byte(line), &rep); err != nil {
				return err
			}
			requests = append(requests, rep)
		}
		for _, rep := range requests {
			for _, p := range rep.Logged {
				if p.Origin == origin {
					needed = max(needed, p.Index+1)
				}
			}
		}
		if origin == "" || witnessed <= after || witnessed < needed {
			return fmt.Errorf("gw-b witnessed size %d of gw-a's log, whose requests reach entry %d:\n%s", witnessed, needed, out)
		}
		size = witnessed
		return nil
	})
	return size
}

// TestHostileRollbackCaughtByPeerWitness: the attack of the issue
// against two replicas that witness each other, on the file store and on
// a real MinIO. gw-a's log is put back to an older copy and its newest
// requests are deleted; the auditor kept no checkpoint and runs no
// witness. verify --all still exits 1, naming gw-a's log rolled back and
// gw-b as the gateway whose witnessing caught it; and the live gw-b
// refuses to cosign gw-a's log again, logs it and counts it in
// toolgate_evidence_tampering_total{record="log"}.
func TestHostileRollbackCaughtByPeerWitness(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	for _, st := range []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "peers") }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			r := startWitnessedReplicas(t, b)
			runCalls(t, r.srv["gw-a"].addr, "early", 2)
			runCalls(t, r.srv["gw-b"].addr, "other", 1)
			before := r.awaitWitnessed(t, 0)
			older := b.keyNames(t, evidence.LogPrefix("gw-a"))

			runCalls(t, r.srv["gw-a"].addr, "late", 2)
			size := r.awaitWitnessed(t, before)
			stopServer(t, r.srv["gw-a"])
			b.rollBack(t, evidence.LogPrefix("gw-a"), older)
			for _, id := range []string{"late-1", "late-2"} {
				b.removeAll(t, evidence.RequestPrefix(id))
			}

			out, code := r.audit(t)
			want := regexp.MustCompile(`(?s)log-inconsistent toolgate\.log/[0-9a-f]{16}/gw-a: LOG NOT TRUSTWORTHY.*` +
				`log/gw-a/: rolled back or truncated: the gateway of gw-b witnessed size (\d+) \(log/gw-b/ entry \d+\), the log's newest checkpoint is (\d+)`)
			m := want.FindStringSubmatch(out)
			if code != exitFailure || m == nil {
				t.Fatalf("verify after the rollback: exit %d, want 1 matching %s:\n%s", code, want, out)
			}
			if n, _ := strconv.ParseUint(m[1], 10, 64); n < size {
				t.Fatalf("verify names size %s witnessed, less than the %d gw-b had witnessed:\n%s", m[1], size, out)
			}
			if strings.Contains(out, "late-") {
				t.Fatalf("the deleted requests are named, though nothing of them is left:\n%s", out)
			}

			// The rollback removes gw-a's newer log objects one at a time,
			// so gw-b may see, and refuse, states on the way down as well as
			// the last one. Each state it refuses is counted once, however
			// often it reads it again.
			gwB, last := r.srv["gw-b"], m[2]
			eventually(t, 20*time.Second, "gw-b refuses gw-a's rolled-back log, each state once", func() error {
				refusals := peerRefusals(gwB.log.String(), "gw-a")
				if len(refusals) == 0 || refusals[len(refusals)-1].size != last {
					return fmt.Errorf("gw-b's last refusal is not of size %s:\n%s", last, gwB.log.String())
				}
				for i := 1; i < len(refusals); i++ {
					if refusals[i] == refusals[i-1] {
						return fmt.Errorf("gw-b refused one state twice in a row: %+v", refusals[i])
					}
				}
				count := fmt.Sprintf(`toolgate_evidence_tampering_total{record="log"} %d`, len(refusals))
				if metrics := scrape(t, gwB); !strings.Contains(metrics, count) {
					return fmt.Errorf("gw-b logged %d refusals; its metrics:\n%s", len(refusals), grepLines(metrics, "tampering"))
				}
				return nil
			})
		})
	}
}

type peerRefusal struct{ size, reason string }

// peerRefusals lists, in order, the states of peer's log that a
// gateway's log says it refused to cosign: the checkpoint's size and why.
func peerRefusals(log, peer string) []peerRefusal {
	line := regexp.MustCompile(`msg="evidence tampering: a peer's transparency log went backwards or forked; not cosigned" peer=` +
		regexp.QuoteMeta(peer) + ` origin=\S+ size=(\d+) (.*)`)
	var refusals []peerRefusal
	for _, m := range line.FindAllStringSubmatch(log, -1) {
		refusals = append(refusals, peerRefusal{size: m[1], reason: m[2]})
	}
	return refusals
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestHostileRollbackAgainstAnExternalWitness: one gateway whose log a
// C2SP witness cosigns (toolgate evidence cosign), on the file store and
// on a real MinIO, rolled back and its newest requests deleted. What
// catches it, step by step: verify --witness-key while the larger
// cosigned checkpoint is still in the store; once it is deleted too,
// verify alone cannot tell, but the next cosign fails (the witness
// remembers the larger size), and verify --proof with a proof handed out
// before fails, while verify-proof still shows that proof valid: the
// deleted request was logged and witnessed.
func TestHostileRollbackAgainstAnExternalWitness(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	for _, st := range []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "witnessed") }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			s := startServerEnv(t, b.dir, b.env, "--config", signingGateway(t, b.dir, b.url))
			run := func(sub string, args ...string) (string, int) {
				out, stderr, code := runToolEnv(t, b.dir, b.env, append([]string{"evidence", sub, "--evidence", b.url}, args...)...)
				return out + stderr, code
			}
			runCalls(t, s.addr, "call", 2)
			b.awaitLogged(t, "kept.txt", 4)
			vkey, code := run("vkey", "--pubkey", "signing.pub")
			w := evidencetest.StartWitness(t, "witness.example/w1")
			if code != exitOK {
				t.Fatalf("vkey: %s", vkey)
			}
			w.AddVKey(t, strings.TrimSpace(vkey))
			cosign := func() (string, int) { return run("cosign", "--witness-url", w.URL) }
			if out, code := cosign(); code != exitOK {
				t.Fatalf("cosign: %s", out)
			}
			older := b.keyNames(t, evidence.LogPrefix("gw-1"))
			runCalls(t, s.addr, "late", 2)
			b.awaitLogged(t, "kept.txt", 8)
			if out, code := cosign(); code != exitOK {
				t.Fatalf("cosign: %s", out)
			}
			if out, code := run("prove", "--cosigned", "--out", "late-2.tlog-proof", "late-2"); code != exitOK {
				t.Fatalf("prove --cosigned: %s", out)
			}
			stopServer(t, s)
			cosigned8 := evidence.LogPrefix("gw-1") + "cosigned/00000000000000000008"
			b.rollBack(t, evidence.LogPrefix("gw-1"), older, cosigned8)
			for _, id := range []string{"late-1", "late-2"} {
				b.removeAll(t, evidence.RequestPrefix(id))
			}
			verify := func(more ...string) (string, int) {
				return run("verify", append([]string{"--all", "--pubkey", "signing.pub", "--require-log",
					"--witness-key", w.VKey}, more...)...)
			}

			// The larger cosigned checkpoint is still there.
			if out, code := verify(); code != exitFailure ||
				!strings.Contains(out, cosigned8+": rolled back or truncated: witnesses cosigned size 8, the log's newest is 4") {
				t.Fatalf("verify with the cosigned checkpoint left: exit %d, want 1:\n%s", code, out)
			}
			// The bucket owner deletes it too: verify alone cannot tell.
			b.remove(t, cosigned8)
			if out, code := verify(); code != exitOK {
				t.Fatalf("verify, every trace of the larger log gone: exit %d, want 0 (the gap the README names):\n%s", code, out)
			}
			if out, code := cosign(); code != exitFailure ||
				!strings.Contains(out, "has cosigned size 8 of") || !strings.Contains(out, "rolled back or forked") {
				t.Fatalf("cosign of the rolled-back log: exit %d, want 1:\n%s", code, out)
			}
			if out, code := verify("--proof", "late-2.tlog-proof"); code != exitFailure ||
				!strings.Contains(out, "rolled back or truncated: the kept checkpoint has size 8, the log's newest only 4") {
				t.Fatalf("verify --proof with a proof from before: exit %d, want 1:\n%s", code, out)
			}
			proof, err := os.ReadFile(filepath.Join(b.dir, "late-2.tlog-proof"))
			if err != nil {
				t.Fatal(err)
			}
			if out, code := verifyProof(t, proof, "--pubkey", filepath.Join(b.dir, "signing.pub"), "--witness-key", w.VKey); code != exitOK ||
				!strings.Contains(out, "request late-2") || !strings.Contains(out, "cosigned by trusted witnesses: witness.example/w1") {
				t.Fatalf("verify-proof of the deleted request's proof: exit %d, want 0:\n%s", code, out)
			}
		})
	}
}

// verify --help tells an auditor what to keep to catch what, and what
// nothing catches without it, as the README's auditor section does.
func TestEvidenceVerifyHelpSaysWhatToKeep(t *testing.T) {
	_, stderr, code := runInProcess(t, "", nil, "evidence", "verify", "--help")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	for _, want := range []string{
		"one replica's log rolled back, truncated or", "--pubkey of every replica",
		"every log rolled back together", "a kept --checkpoint, a --proof from",
		"nothing detects", "Keep, outside the store: each replica's public key",
		"-proof file",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("verify --help lacks %q:\n%s", want, stderr)
		}
	}
}
