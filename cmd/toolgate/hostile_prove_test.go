package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
)

// provingDeployment is a signing gateway of instance "gw-a" and the
// folder it runs in.
type provingDeployment struct {
	dir string
	srv *server
	n   int
}

func startProvingDeployment(t *testing.T) *provingDeployment {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("read_for_all") permit (principal, action, resource == Tool::"workspace.readFile");`)
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "signing.pem"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	if err := os.MkdirAll(filepath.Join(dir, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workspace", "notes.txt"), []byte("notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := `instance: gw-a
evidence:
  url: file://./toolgate-evidence
  signing_key: {file: ./signing.pem}
log:
  checkpoint_interval: 1s
drivers:
  workspace:
    type: workspace
    root: ./workspace
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &provingDeployment{dir: dir, srv: startServer(t, dir, "--config", "toolgate.yaml")}
}

// call makes one allowed call and returns its request id.
func (d *provingDeployment) call(t *testing.T) string {
	t.Helper()
	d.n++
	id := fmt.Sprintf("proved-%d", d.n)
	out, stderr, code := runTool(t, d.dir, "call", "--addr", d.srv.addr, "--request-id", id,
		"--tool", "workspace.readFile", "--args", `{"path": "notes.txt"}`)
	if code != exitOK {
		t.Fatalf("call %s: exit %d\n%s%s", id, code, out, stderr)
	}
	return id
}

// prove runs evidence prove until the request's completion is in a
// checkpoint (the log publishes one a second) and returns the proof file.
func (d *provingDeployment) prove(t *testing.T, id string, extra ...string) string {
	t.Helper()
	file := filepath.Join(d.dir, id+".tlog-proof")
	deadline := time.Now().Add(20 * time.Second)
	for {
		args := append([]string{"evidence", "prove", "--config", "toolgate.yaml", "--out", file}, extra...)
		_, stderr, code := runTool(t, d.dir, append(args, id)...)
		if code == exitOK {
			return file
		}
		if code != exitError || !strings.Contains(stderr, "not logged yet") || time.Now().After(deadline) {
			t.Fatalf("prove %s: exit %d\n%s", id, code, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// publicKey writes the gateway's public key, as the operator hands it to
// an auditor, into a folder of its own, and returns its path.
func (d *provingDeployment) publicKey(t *testing.T) string {
	t.Helper()
	pub, stderr, code := runTool(t, d.dir, "evidence", "pubkey", "--key", "signing.pem")
	if code != exitOK {
		t.Fatalf("pubkey: %s", stderr)
	}
	file := filepath.Join(t.TempDir(), "gateway.pub")
	if err := os.WriteFile(file, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// verifyProof runs verify-proof in a folder holding nothing but the
// proof: the third party's machine.
func verifyProof(t *testing.T, proof []byte, args ...string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.tlog-proof"), proof, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runTool(t, dir, append([]string{"evidence", "verify-proof", "p.tlog-proof"}, args...)...)
	return out + stderr, code
}

// TestHostileProofTampering: a proof written by prove verifies offline
// with the gateway's public key alone, and no alteration of it does.
func TestHostileProofTampering(t *testing.T) {
	t.Parallel()
	d := startProvingDeployment(t)
	first := d.call(t)
	id := d.call(t)
	proof, err := os.ReadFile(d.prove(t, id))
	if err != nil {
		t.Fatal(err)
	}
	pub := d.publicKey(t)
	out, code := verifyProof(t, proof, "--pubkey", pub)
	if code != exitOK || !strings.Contains(out, "valid p.tlog-proof: request "+id+", outcome completed") ||
		!strings.Contains(out, "of log toolgate.log/") {
		t.Fatalf("verify-proof: exit %d\n%s", code, out)
	}
	out, code = verifyProof(t, proof, "--pubkey", pub, "--json")
	var rep struct {
		Valid     bool   `json:"valid"`
		RequestID string `json:"request_id"`
		Index     uint64 `json:"index"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != exitOK || err != nil || !rep.Valid || rep.RequestID != id {
		t.Fatalf("verify-proof --json: exit %d, %v\n%s", code, err, out)
	}

	other := filepath.Join(t.TempDir(), "other.pem")
	if _, stderr, code := runTool(t, t.TempDir(), "evidence", "keygen", "--out", other); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	otherPub, _, _ := runTool(t, d.dir, "evidence", "pubkey", "--key", other)
	otherFile := filepath.Join(t.TempDir(), "other.pub")
	if err := os.WriteFile(otherFile, []byte(otherPub), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("the proof of a real call is %d bytes", len(proof))
	// The checkpoint follows the first blank line: origin, size, root.
	checkpoint := bytes.Index(proof, []byte("\n\n")) + 2
	root := checkpoint + bytes.IndexByte(proof[checkpoint:], '\n') + 1
	root += bytes.IndexByte(proof[root:], '\n') + 1
	attacks := []struct {
		name  string
		proof []byte
		key   string
	}{
		{"a bit flipped in the header", flipBit(proof, 3), pub},
		{"a bit flipped in the manifest inside the extra data", flipBit(proof, 200), pub},
		{"a bit flipped in an inclusion hash", flipBit(proof, checkpoint-10), pub},
		{"a bit flipped in the checkpoint's root", flipBit(proof, root+20), pub},
		{"a bit flipped in the checkpoint's signature", flipBit(proof, len(proof)-5), pub},
		{"a proof checked with another gateway's key", proof, otherFile},
		{"a truncated proof", proof[:len(proof)/2], pub},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			out, code := verifyProof(t, a.proof, "--pubkey", a.key)
			if code != exitFailure || !strings.Contains(out, "INVALID") {
				t.Fatalf("exit %d, want 1 and INVALID:\n%s", code, out)
			}
		})
	}
	if _, code := verifyProof(t, proof); code != exitError {
		t.Fatalf("verify-proof without --pubkey: exit %d, want 2", code)
	}

	// Deleting a logged request's manifest cannot make it unprovable
	// quietly: prove reports the deletion as tampering.
	if err := os.Remove(filepath.Join(d.dir, "toolgate-evidence", "requests", first, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runTool(t, d.dir, "evidence", "prove", "--config", "toolgate.yaml", "--out", "-", first)
	if code != exitFailure || !strings.Contains(out, "TAMPERED "+first) || !strings.Contains(out, "evidence was deleted") {
		t.Fatalf("prove of a request whose manifest was deleted: exit %d, want 1\n%s%s", code, out, stderr)
	}
}

func TestEvidenceProofUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "toolgate-evidence"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.tlog-proof"), []byte("c2sp.org/tlog-proof@v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", filepath.Join(dir, "k.pem"))
	if code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	key := filepath.Join(dir, "k.pub")
	if err := os.WriteFile(key, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"prove without a request", []string{"evidence", "prove"}, "usage: toolgate evidence prove"},
		{"prove two requests", []string{"evidence", "prove", "r1", "r2"}, "usage: toolgate evidence prove"},
		{"prove an unknown request", []string{"evidence", "prove", "r1"}, `no evidence and no log entry for request "r1"`},
		{"prove an invalid request id", []string{"evidence", "prove", "../x"}, `request id "../x"`},
		{"verify-proof without --pubkey", []string{"evidence", "verify-proof", "p.tlog-proof"}, "usage: toolgate evidence verify-proof"},
		{"verify-proof of a missing file", []string{"evidence", "verify-proof", "nope", "--pubkey", key}, "open nope"},
		{"a witness key that is not one", []string{"evidence", "verify-proof", "p.tlog-proof", "--pubkey", key, "--witness-key", "w+1+2"}, "--witness-key"},
		{"a threshold above the witness keys", []string{"evidence", "verify-proof", "p.tlog-proof", "--pubkey", key, "--witness-threshold", "1"}, "witness threshold 1 is outside 0..0"},
		{"cosign without a witness", []string{"evidence", "cosign"}, "usage: toolgate evidence cosign"},
		{"cosign a store without a log", []string{"evidence", "cosign", "--witness-url", "http://127.0.0.1:9"}, "no log with a checkpoint"},
		{"vkey without a key", []string{"evidence", "vkey"}, "usage: toolgate evidence vkey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, tt.args...)
			if code != exitError || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, output:\n%s%s\nwant exit %d mentioning %q", code, out, stderr, exitError, tt.want)
			}
		})
	}
}

func flipBit(data []byte, i int) []byte {
	out := bytes.Clone(data)
	out[i] ^= 0x04
	return out
}

// TestHostileForkedLogRefusedByWitness: a witness cosigns the gateway's
// log through cosign, a cosigned proof carries its cosignature, and a
// bucket owner who rewrites the log under the same origin and key is
// refused by the witness: cosign exits 1.
func TestHostileForkedLogRefusedByWitness(t *testing.T) {
	t.Parallel()
	d := startProvingDeployment(t)
	id := d.call(t)
	d.prove(t, id)
	evDir := filepath.Join(d.dir, "toolgate-evidence")
	store, err := evidence.NewFileStore(evDir)
	if err != nil {
		t.Fatal(err)
	}
	signer := readSigner(t, filepath.Join(d.dir, "signing.pem"))
	pub := d.publicKey(t)
	// The operator configures the witness with the log's verifier key.
	vkey, stderr, code := runTool(t, d.dir, "evidence", "vkey", "--config", "toolgate.yaml", "--pubkey", pub)
	origin, _, _ := strings.Cut(vkey, "+")
	if code != exitOK || strings.Count(vkey, "\n") != 1 || !strings.HasPrefix(origin, "toolgate.log/") || !strings.HasSuffix(origin, "/gw-a") {
		t.Fatalf("vkey: exit %d\n%s%s", code, vkey, stderr)
	}
	w := evidencetest.StartWitness(t, "witness.example/w1")
	w.AddVKey(t, strings.TrimSpace(vkey))

	out, stderr, code := runTool(t, d.dir, "evidence", "cosign", "--config", "toolgate.yaml", "--witness-url", w.URL)
	if code != exitOK || !strings.Contains(out, "cosigned "+origin) || w.Latest(origin) == 0 {
		t.Fatalf("cosign: exit %d\n%s%s", code, out, stderr)
	}
	proof, err := os.ReadFile(d.prove(t, id, "--cosigned"))
	if err != nil {
		t.Fatal(err)
	}
	if out, code := verifyProof(t, proof, "--pubkey", pub, "--witness-key", w.VKey); code != exitOK ||
		!strings.Contains(out, "cosigned by trusted witnesses: witness.example/w1") {
		t.Fatalf("cosigned proof: exit %d\n%s", code, out)
	}
	if out, code := verifyProof(t, proof, "--pubkey", pub); code != exitFailure {
		t.Fatalf("a cosigned proof checked without the witness's key: exit %d, want 1 (no line unchecked)\n%s", code, out)
	}
	// verify --all reads the cosigned checkpoint cosign stored.
	out, stderr, code = runTool(t, d.dir, "evidence", "verify", "--all", "--config", "toolgate.yaml", "--pubkey", pub,
		"--witness-key", w.VKey, "--json")
	if code != exitOK || !strings.Contains(out, `"witnesses":["witness.example/w1"]`) {
		t.Fatalf("verify --all with the witness's key: exit %d\n%s%s", code, out, stderr)
	}

	t.Run("a rewritten log under the same origin and key is refused", func(t *testing.T) {
		fork := forkedLog(t, store, signer, "gw-a", w.Latest(origin)+3)
		out, stderr, code := runTool(t, d.dir, "evidence", "cosign", "--evidence", "file://"+fork, "--witness-url", w.URL)
		if code != exitFailure || !strings.Contains(out, "REFUSED gw-a") || !strings.Contains(out, "not consistent") {
			t.Fatalf("cosign of a fork: exit %d, want 1\n%s%s", code, out, stderr)
		}
	})
	t.Run("a truncated log is refused as a rollback", func(t *testing.T) {
		fork := forkedLog(t, store, signer, "gw-a", 1)
		out, stderr, code := runTool(t, d.dir, "evidence", "cosign", "--evidence", "file://"+fork, "--witness-url", w.URL)
		if code != exitFailure || !strings.Contains(out, "rolled back or forked") {
			t.Fatalf("cosign of a rollback: exit %d, want 1\n%s%s", code, out, stderr)
		}
	})
}

func readSigner(t *testing.T, file string) *evidence.Signer {
	t.Helper()
	s, err := evidence.NewSigner(readKey(t, file))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// forkedLog writes, in a new folder, a log of instance with size entries
// that are not the real log's, under the same bucket id (so the same
// origin) and signed by the same key: what someone holding the bucket and
// the key could publish.
func forkedLog(t *testing.T, real evidence.Reader, signer *evidence.Signer, instance string, size uint64) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	fork, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := real.Get(ctx, "log/bucket-id")
	if err != nil {
		t.Fatal(err)
	}
	if err := fork.Put(ctx, "log/bucket-id", id); err != nil {
		t.Fatal(err)
	}
	origin, err := evidence.LogOrigin(ctx, fork, instance)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	sealer, trusted, err := evidence.LogKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	l, err := evidence.OpenLog(ctx, fork, evidence.LogConfig{
		Instance: instance, Origin: origin, Gateway: "toolgate/fork@" + instance, Interval: time.Hour, OpTimeout: time.Second,
		Sealer: sealer, Trusted: trusted,
		MaxPending: 100, Logger: slog.New(slog.DiscardHandler),
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range size {
		l.Append(fmt.Appendf(nil, "forged entry %d", i))
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return dir
}
