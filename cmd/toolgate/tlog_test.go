package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/tlog"
)

// loggedBucket is an evidence store written by a signing gateway, as an
// attacker with delete and write rights on the bucket sees it, and the
// auditor's side: the public key and the kept checkpoints.
type loggedBucket struct {
	dir    string // working folder: config, keys, kept checkpoints
	url    string
	env    []string
	store  evidence.Store
	remove func(t *testing.T, key string)
	key    ed25519.PrivateKey
}

// signingGateway writes the configuration of a gateway that signs with
// signing.pem and publishes a checkpoint every 100ms.
func signingGateway(t *testing.T, dir, url string) string {
	t.Helper()
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "signing.pem"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	if out, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", "signing.pem"); code != exitOK {
		t.Fatalf("pubkey: %s", stderr)
	} else if err := os.WriteFile(filepath.Join(dir, "signing.pub"), []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`instance: gw-1
evidence:
  url: %q
  signing_key: {file: signing.pem}
log:
  checkpoint_interval: 100ms
drivers:
  workspace: {type: workspace, root: ./ws}
`, url)
	if err := os.WriteFile(filepath.Join(dir, "gw.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return "gw.yaml"
}

// audit runs verify --all as an auditor does: with the public key, every
// requirement, and the kept checkpoints in kept.
func (b *loggedBucket) audit(t *testing.T, kept string, more ...string) (string, int) {
	t.Helper()
	args := append([]string{"evidence", "verify", "--all", "--evidence", b.url, "--pubkey", "signing.pub",
		"--require-signature", "--require-log", "--checkpoint", kept}, more...)
	out, stderr, code := runToolEnv(t, b.dir, b.env, args...)
	if code == exitError {
		t.Fatalf("verify: %s", stderr)
	}
	return out, code
}

// calls runs n shell calls named prefix-1… through a gateway.
func runCalls(t *testing.T, addr, prefix string, n int) {
	t.Helper()
	c := dial(t, addr)
	for i := 1; i <= n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := c.RunTool(ctx, shellRequest(t, fmt.Sprintf("%s-%d", prefix, i), "echo hi"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// awaitLogged waits until verify --all passes with every entry logged,
// keeping the checkpoints in kept.
func (b *loggedBucket) awaitLogged(t *testing.T, kept string, entries int) {
	t.Helper()
	eventually(t, 20*time.Second, "every call logged", func() error {
		out, code := b.audit(t, kept)
		if code != exitOK || !strings.Contains(out, fmt.Sprintf("logs: 1 checked, %d entries in all", entries)) {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
}

func stopServer(t *testing.T, s *server) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		t.Fatal("toolgate serve did not stop")
	}
}

// fillBucket runs a signing gateway over the store: four calls, an audit
// that keeps the checkpoints, then stops it.
func fillBucket(t *testing.T, b *loggedBucket) {
	t.Helper()
	s := startServerEnv(t, b.dir, b.env, "--config", signingGateway(t, b.dir, b.url))
	runCalls(t, s.addr, "call", 4)
	b.awaitLogged(t, "kept.txt", 8)
	stopServer(t, s)
	b.key = readKey(t, filepath.Join(b.dir, "signing.pem"))
}

// fileLoggedBucket is a file store in a fresh working folder.
func fileLoggedBucket(t *testing.T) *loggedBucket {
	dir := t.TempDir()
	writePolicy(t, dir, faultPolicy)
	return openFileBucket(t, dir)
}

func openFileBucket(t *testing.T, dir string) *loggedBucket {
	ev := filepath.Join(dir, "ev")
	if err := os.MkdirAll(ev, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := evidence.NewFileStore(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &loggedBucket{dir: dir, url: "file://" + ev, store: store, remove: func(t *testing.T, key string) {
		if err := os.Remove(filepath.Join(ev, key)); err != nil {
			t.Fatal(err)
		}
	}}
}

// cloneFiles copies a filled file bucket and its working folder, times
// and all, for one tamper.
func cloneFiles(t *testing.T, b *loggedBucket) *loggedBucket {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "w")
	if out, err := exec.Command("cp", "-a", b.dir, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	c := openFileBucket(t, dir)
	c.key = b.key
	return c
}

// minioLoggedBucket is a fresh bucket of a real MinIO.
func minioLoggedBucket(t *testing.T, m *evidencetest.MinIO, name string) *loggedBucket {
	m.CreateBucket(t, name, false)
	dir := t.TempDir()
	writePolicy(t, dir, faultPolicy)
	return openMinIOBucket(t, m, name, dir)
}

func openMinIOBucket(t *testing.T, m *evidencetest.MinIO, name, dir string) *loggedBucket {
	b := &loggedBucket{dir: dir, url: m.URL(name, "tg"), env: m.Env()}
	b.store = openBucket(t, m, b.url)
	b.remove = func(t *testing.T, key string) {
		_, err := m.Client().DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String("tg/" + key)})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// cloneMinIO copies every object of a filled bucket, byte for byte, into
// a new bucket, and the working folder, for one tamper.
func cloneMinIO(t *testing.T, m *evidencetest.MinIO, from string, b *loggedBucket, name string) *loggedBucket {
	t.Helper()
	ctx := context.Background()
	m.CreateBucket(t, name, false)
	pages := s3.NewListObjectsV2Paginator(m.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(from)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			_, err := m.Client().CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(name), Key: o.Key,
				CopySource: aws.String(from + "/" + aws.ToString(o.Key))})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "w")
	if out, err := exec.Command("cp", "-a", b.dir, dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	c := openMinIOBucket(t, m, name, dir)
	c.key = b.key
	return c
}

func (b *loggedBucket) removeAll(t *testing.T, prefix string) {
	t.Helper()
	keys, err := b.store.List(context.Background(), prefix)
	if err != nil || len(keys) == 0 {
		t.Fatalf("nothing under %s to remove (%v)", prefix, err)
	}
	for _, k := range keys {
		b.remove(t, k)
	}
}

func (b *loggedBucket) replace(t *testing.T, key string, data []byte) {
	t.Helper()
	b.remove(t, key)
	if err := b.store.Put(context.Background(), key, data); err != nil {
		t.Fatal(err)
	}
}

// resign replaces a request's manifest with one the signer signs anew,
// an hour older: a valid, signed manifest that is not the one logged.
func (b *loggedBucket) resign(t *testing.T, id string, key ed25519.PrivateKey) {
	t.Helper()
	data, err := b.store.Get(context.Background(), evidence.Key(id, evidence.ArtifactManifest))
	if err != nil {
		t.Fatal(err)
	}
	m, err := evidence.ParseManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	m.CreatedAt, m.Signature = m.CreatedAt.Add(-time.Hour), nil
	signer, err := evidence.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.Sign(&m); err != nil {
		t.Fatal(err)
	}
	older, _ := evidence.EncodeManifest(m)
	b.replace(t, evidence.Key(id, evidence.ArtifactManifest), older)
}

func (b *loggedBucket) newestCheckpointKey(t *testing.T) string {
	t.Helper()
	keys, err := b.store.List(context.Background(), evidence.LogPrefix("gw-1")+"checkpoint/")
	if err != nil || len(keys) == 0 {
		t.Fatalf("no checkpoint (%v)", err)
	}
	return keys[len(keys)-1]
}

// tampers are what a bucket owner with delete and write rights may try,
// each with the word verify --all must answer it with.
var tampers = []struct {
	name, want string
	tamper     func(t *testing.T, b *loggedBucket)
}{
	{"a deleted manifest", "missing call-2", func(t *testing.T, b *loggedBucket) {
		b.remove(t, evidence.Key("call-2", evidence.ArtifactManifest))
	}},
	{"a deleted artifact", "mismatch call-2", func(t *testing.T, b *loggedBucket) {
		b.remove(t, evidence.Key("call-2", evidence.ArtifactToolResult))
	}},
	{"a deleted whole request", "missing call-3", func(t *testing.T, b *loggedBucket) {
		b.removeAll(t, evidence.RequestPrefix("call-3"))
	}},
	{"all requests deleted", "verified 4 requests: 4 missing", func(t *testing.T, b *loggedBucket) {
		b.removeAll(t, "requests/")
	}},
	{"a truncated log", "log-inconsistent", func(t *testing.T, b *loggedBucket) {
		b.removeAll(t, evidence.LogPrefix("gw-1")+"tile/entries/")
	}},
	{"a rolled-back checkpoint", "rolled back", func(t *testing.T, b *loggedBucket) {
		b.remove(t, b.newestCheckpointKey(t))
	}},
	{"a forked log", "forked", func(t *testing.T, b *loggedBucket) {
		// Another checkpoint of the kept size, signed by the log's own key:
		// only a log that forked can show the auditor both.
		kept, err := os.ReadFile(filepath.Join(b.dir, "kept.txt"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(kept), "\n")
		size, _ := strconv.ParseUint(lines[1], 10, 64)
		signer, err := tlog.NewSigner(lines[0], b.key)
		if err != nil {
			t.Fatal(err)
		}
		fork, err := tlog.SignCheckpoint(signer, size, [32]byte{7})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b.dir, "kept.txt"), fork, 0o600); err != nil {
			t.Fatal(err)
		}
	}},
	{"a manifest replaced by an older valid one", "mismatch call-1", func(t *testing.T, b *loggedBucket) {
		b.resign(t, "call-1", b.key)
	}},
	{"a manifest re-signed by another trusted key", "mismatch call-4", func(t *testing.T, b *loggedBucket) {
		b.resign(t, "call-4", otherKey(t, b.dir))
	}},
	{"a checkpoint re-signed by another key", "log-inconsistent", func(t *testing.T, b *loggedBucket) {
		key := b.newestCheckpointKey(t)
		data, _ := b.store.Get(context.Background(), key)
		lines := strings.Split(string(data), "\n")
		size, _ := strconv.ParseUint(lines[1], 10, 64)
		signer, _ := tlog.NewSigner(lines[0], otherKey(t, b.dir))
		forged, err := tlog.SignCheckpoint(signer, size, [32]byte{})
		if err != nil {
			t.Fatal(err)
		}
		b.replace(t, key, forged)
	}},
}

// otherKey is a second key whose public half the auditor also trusts
// (other.pub): a key the attacker holds.
func otherKey(t *testing.T, dir string) ed25519.PrivateKey {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "other.pem")); err != nil {
		if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "other.pem"); code != exitOK {
			t.Fatal(stderr)
		}
	}
	key := readKey(t, filepath.Join(dir, "other.pem"))
	out, _, _ := runTool(t, dir, "evidence", "pubkey", "--key", "other.pem")
	os.WriteFile(filepath.Join(dir, "other.pub"), []byte(out), 0o600)
	return key
}

// TestLogTampersFailVerify: every tamper the issue names, on the file
// store and on a real MinIO, makes verify --all exit 1 with the word that
// names it, where the untouched bucket verifies with exit 0.
func TestLogTampersFailVerify(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	stores := []struct {
		name  string
		fill  func(t *testing.T) *loggedBucket
		clone func(t *testing.T, b *loggedBucket, i int) *loggedBucket
	}{
		{"file", fileLoggedBucket, func(t *testing.T, b *loggedBucket, _ int) *loggedBucket { return cloneFiles(t, b) }},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "filled") },
			func(t *testing.T, b *loggedBucket, i int) *loggedBucket {
				return cloneMinIO(t, m, "filled", b, fmt.Sprintf("tamper-%d", i))
			}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			filled := st.fill(t)
			fillBucket(t, filled)
			otherKey(t, filled.dir)
			if out, code := filled.audit(t, "kept.txt", "--pubkey", "other.pub"); code != exitOK {
				t.Fatalf("the untouched bucket: exit %d:\n%s", code, out)
			}
			for i, tc := range tampers {
				t.Run(tc.name, func(t *testing.T) {
					b := st.clone(t, filled, i)
					tc.tamper(t, b)
					out, code := b.audit(t, "kept.txt", "--pubkey", "other.pub")
					if code != exitFailure || !strings.Contains(out, tc.want) {
						t.Fatalf("exit %d, want 1 and %q in:\n%s", code, tc.want, out)
					}
				})
			}
		})
	}
}

// TestLogTwoReplicasUnderLoad: two gateways sharing one MinIO bucket, each
// with its own log, take concurrent calls, some of them the same request
// ids sent to both. The logs verify and record every request exactly once
// per state: one claim, one completion.
func TestLogTwoReplicasUnderLoad(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	b := minioLoggedBucket(t, m, "replicas")
	cfg := signingGateway(t, b.dir, b.url)
	text, _ := os.ReadFile(filepath.Join(b.dir, cfg))
	var addrs []string
	for _, name := range []string{"gw-a", "gw-b"} {
		own := strings.Replace(string(text), "instance: gw-1", "instance: "+name, 1)
		if err := os.WriteFile(filepath.Join(b.dir, name+".yaml"), []byte(own), 0o600); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, startServerEnv(t, b.dir, b.env, "--config", name+".yaml").addr)
	}
	const callers, perCaller = 8, 12
	errs := make(chan error, callers)
	for c := range callers {
		go func() {
			client := dial(t, addrs[c%2])
			for i := range perCaller {
				// Even callers share ids with the next odd one, on the other
				// replica: the same request raced through both gateways.
				id := fmt.Sprintf("load-%d-%d", c/2, i)
				if c%2 == 0 || i%3 != 0 {
					id = fmt.Sprintf("load-%d-%d-%d", c/2, c%2, i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := client.RunTool(ctx, shellRequest(t, id, "echo hi"))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var reports []jsonReport
	eventually(t, 20*time.Second, "both logs caught up", func() error {
		out, code := b.audit(t, "kept.txt", "--json")
		if code != exitOK {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		reports = reports[:0]
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r jsonReport
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				return err
			}
			if r.RequestID == "" {
				continue
			}
			// A completion stored within the last interval may still be
			// on its way: wait until every request is wholly logged.
			if r.Log != evidence.LogLogged {
				return fmt.Errorf("%s: log state %q", r.RequestID, r.Log)
			}
			reports = append(reports, r)
		}
		return nil
	})
	origins := map[string]bool{}
	for _, r := range reports {
		kinds := map[string]int{}
		for _, p := range r.Logged {
			kinds[p.Kind]++
			origins[p.Origin] = true
		}
		if r.Verdict != "ok" || kinds["claim"] != 1 || kinds["completion"] != 1 {
			t.Errorf("%s: verdict %s, logged %v", r.RequestID, r.Verdict, r.Logged)
		}
	}
	if want := callers * perCaller * 5 / 6; len(reports) < want || len(origins) != 2 {
		t.Fatalf("%d requests in %d logs, want at least %d in 2", len(reports), len(origins), want)
	}
}

// TestLogHonestStatesPassVerify: with every requirement on, a request in
// flight and one that ran nothing (its executor down) are reported as
// they are, never as tampering, on the file store and on a real MinIO.
// (A request waiting in the spool is covered by the evidence package's
// tests and, over MinIO, by the fault suite.)
func TestLogHonestStatesPassVerify(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	for _, st := range []struct {
		name string
		open func(t *testing.T) *loggedBucket
	}{
		{"file", fileLoggedBucket},
		{"minio", func(t *testing.T) *loggedBucket { return minioLoggedBucket(t, m, "honest") }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := st.open(t)
			cfg := signingGateway(t, b.dir, b.url)
			text, _ := os.ReadFile(filepath.Join(b.dir, cfg))
			withDown := strings.Replace(string(text), "drivers:\n", "drivers:\n  tpmjs: {type: tpmjs, url: \"http://127.0.0.1:1\"}\n", 1) +
				"tools:\n  fake.echo: {driver: tpmjs, package: \"" + tpmjstest.Package + "\", version: \"1.0.0\", export: " + tpmjstest.EchoTool + "}\n"
			if err := os.WriteFile(filepath.Join(b.dir, cfg), []byte(withDown), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startServerEnv(t, b.dir, b.env, "--config", cfg)
			if _, stderr, code := runToolEnv(t, b.dir, b.env, "call", "--addr", s.addr, "--request-id", "ran-nothing",
				"--tool", "fake.echo", "--args", `{"text":"hi"}`); code != exitError || !strings.Contains(stderr, "nothing was executed") {
				t.Fatalf("call with the executor down: exit %d\n%s", code, stderr)
			}
			go dial(t, s.addr).RunTool(context.Background(), shellRequest(t, "in-flight", "sleep 4"))
			eventually(t, 10*time.Second, "both honest states reported", func() error {
				out, code := b.audit(t, "kept.txt", "-v")
				if code != exitOK || !strings.Contains(out, "pending in-flight: in flight") || !strings.Contains(out, "not-dispatched ran-nothing") {
					return fmt.Errorf("exit %d:\n%s", code, out)
				}
				return nil
			})
		})
	}
}
