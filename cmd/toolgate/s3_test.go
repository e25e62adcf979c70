package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// s3Gateway writes a configuration for a gateway whose evidence is in the
// bucket, with its own spool folder, sharing dir's workspace and policies.
// evidenceKeys are more lines of the evidence block.
func s3Gateway(t *testing.T, dir, name, url string, evidenceKeys ...string) string {
	t.Helper()
	extra := ""
	for _, k := range evidenceKeys {
		extra += "  " + k + "\n"
	}
	cfg := fmt.Sprintf(`instance: %s
evidence:
  url: %q
  spool_dir: ./spool-%s
%sdrivers:
  workspace:
    type: workspace
    root: ./ws
`, name, url, name, extra)
	file := name + ".yaml"
	if err := os.WriteFile(filepath.Join(dir, file), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func dial(t *testing.T, addr string) toolgatev1.ToolGatewayClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return toolgatev1.NewToolGatewayClient(conn)
}

func shellRequest(t *testing.T, id, command string) *toolgatev1.RunToolRequest {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	return &toolgatev1.RunToolRequest{RequestId: id, ToolId: "workspace.shell", Args: args}
}

// lines counts the lines of a side-effect file; a missing file has none.
func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// openBucket opens the bucket from the test process.
func openBucket(t *testing.T, m *evidencetest.MinIO, url string) evidence.Store {
	t.Helper()
	var s evidence.StoreCloser
	var err error
	withProcessEnv(m.Env(), func() { s, err = storeurl.Open(context.Background(), url) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// processEnv is held while the test process's environment carries one
// MinIO's credentials.
var processEnv sync.Mutex

// withProcessEnv runs fn with env set in the process environment and puts
// the environment back as it was. The AWS SDK reads its credentials from
// the environment once, when a store is opened, so parallel tests each
// open a store with their own MinIO's credentials this way, one at a
// time, where t.Setenv would hold them for the whole test and forbid
// t.Parallel. Child processes get theirs explicitly (MinIO.Env), which
// overrides whatever they inherit.
func withProcessEnv(env []string, fn func()) {
	processEnv.Lock()
	defer processEnv.Unlock()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	fn()
}

func waitForKey(t *testing.T, s evidence.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := s.Get(context.Background(), key); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared in the store", key)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTwoGatewaysOneBucketRunOnce: two gateway processes share one MinIO
// bucket and one workspace. The same request_id sent to both at once runs
// the tool exactly once; the other caller gets the replay or ABORTED.
func TestTwoGatewaysOneBucketRunOnce(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "shared", false)
	url := m.URL("shared", "toolgate")
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	a := startServerEnv(t, dir, m.Env(), "--config", s3Gateway(t, dir, "gw-a", url))
	b := startServerEnv(t, dir, m.Env(), "--config", s3Gateway(t, dir, "gw-b", url))
	clients := []toolgatev1.ToolGatewayClient{dial(t, a.addr), dial(t, b.addr)}

	const rounds = 8
	for round := range rounds {
		id := fmt.Sprintf("both-%d", round)
		counter := filepath.Join(dir, "ws", id+".count")
		req := shellRequest(t, id, "echo ran >> "+id+".count; sleep 0.2; echo done")
		var wg sync.WaitGroup
		resps := make([]*toolgatev1.RunToolResponse, len(clients))
		errs := make([]error, len(clients))
		for i, c := range clients {
			wg.Go(func() { resps[i], errs[i] = c.RunTool(context.Background(), req) })
		}
		wg.Wait()
		if n := lines(t, counter); n != 1 {
			t.Fatalf("%s: the tool ran %d times across two gateways, want exactly once", id, n)
		}
		answered := 0
		for i := range clients {
			switch {
			case errs[i] == nil:
				answered++
				if resps[i].GetToolResult().GetStdout() != "done\n" {
					t.Errorf("%s: gateway %d answered %v", id, i, resps[i])
				}
			case status.Code(errs[i]) != codes.Aborted:
				t.Fatalf("%s: gateway %d: %v, want the answer or ABORTED", id, i, errs[i])
			}
		}
		if answered == 0 {
			t.Fatalf("%s: neither gateway answered", id)
		}
		// Afterwards both gateways replay the one stored answer.
		first, err := clients[0].RunTool(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		second, err := clients[1].RunTool(context.Background(), req)
		if err != nil || !proto.Equal(first, second) {
			t.Fatalf("%s: replays differ between gateways: %v / %v (%v)", id, first, second, err)
		}
		if n := lines(t, counter); n != 1 {
			t.Fatalf("%s: a replay ran the tool again", id)
		}
	}
}

// TestStoreOutages runs the three evidence faults against a real MinIO that
// the test stops and restarts: (a) the store is down before a call, (b) it
// goes down while a tool runs, (c) the gateway is killed mid-call.
func TestStoreOutages(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "audit", false)
	url := m.URL("audit", "")
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	// A short lease: the restart after the kill in (c) need not wait long
	// for the killed process's heartbeat to go stale.
	cfg := s3Gateway(t, dir, "gw", url, "lease_heartbeat: 500ms")
	bucket := openBucket(t, m, url)
	ws := filepath.Join(dir, "ws")
	ctx := context.Background()

	gw := startServerEnv(t, dir, m.Env(), "--config", cfg)
	client := dial(t, gw.addr)

	// (b) The store goes down while the tool runs: the caller still gets
	// its answer, and the artifacts wait in the spool.
	slow := shellRequest(t, "outage-b", "sleep 2; echo ran >> b.count; echo done")
	type result struct {
		resp *toolgatev1.RunToolResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := client.RunTool(ctx, slow)
		res <- result{resp, err}
	}()
	waitForKey(t, bucket, evidence.Key("outage-b", evidence.ArtifactDispatch))
	m.Stop(t)
	r := <-res
	if r.err != nil || r.resp.GetToolResult().GetStdout() != "done\n" || len(r.resp.GetEvidenceRefs()) != 6 {
		t.Fatalf("(b) call while the store went down = %v, %v; want the answer with all refs", r.resp, r.err)
	}
	spool, err := evidence.OpenSpool(filepath.Join(dir, "spool-gw"))
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	if keys, _ := spool.List(ctx, evidence.RequestPrefix("outage-b")); len(keys) != 3 {
		t.Fatalf("(b) spool holds %v, want tool_result, response and manifest", keys)
	}

	// (a) The store is down before a call: nothing runs.
	_, err = client.RunTool(ctx, shellRequest(t, "outage-a", "echo ran >> a.count"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("(a) call with the store down: %v, want UNAVAILABLE", err)
	}
	if n := lines(t, filepath.Join(ws, "a.count")); n != 0 {
		t.Fatal("(a) the tool ran although its evidence could not be written")
	}
	// An operator sees the outage on /metrics: the store's failed writes
	// (what ToolgateEvidenceStoreFailing fires on) and the spooled artifacts.
	text := scrape(t, gw)
	if v := sampleValue(text, "toolgate_evidence_store_errors_total", `op="put"`); v == "" || v == "0" {
		t.Errorf("store errors{op=put} = %q while the store refused writes", v)
	}
	if v := sampleValue(text, "toolgate_spool_artifacts"); v != "3" {
		t.Errorf("spool artifacts = %q, want 3", v)
	}

	// The gateway stops while the store is still down; the spool outlives
	// it, and the next gateway flushes it once the store is back.
	if err := gw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-gw.done; err != nil {
		t.Fatalf("gateway exit: %v", err)
	}
	m.Start(t)
	rep, err := evidence.Verify(ctx, bucket, "outage-b", evidence.VerifyOptions{Spool: spool})
	if err != nil || rep.Status != evidence.StatusPending {
		t.Fatalf("(b) verify before the flush = %+v, %v; want pending", rep, err)
	}
	gw = startServerEnv(t, dir, m.Env(), "--config", cfg)
	client = dial(t, gw.addr)
	waitForKey(t, bucket, evidence.Key("outage-b", evidence.ArtifactManifest))
	eventually(t, 10*time.Second, "the flush shows on /metrics", func() error {
		text := scrape(t, gw)
		spooled := sampleValue(text, "toolgate_spool_artifacts")
		retries, _ := strconv.ParseFloat(sampleValue(text, "toolgate_evidence_store_retries_total"), 64)
		if spooled != "0" || retries < 3 {
			return fmt.Errorf("spool artifacts %q, retries %v; want 0 and at least one per spooled artifact (3)", spooled, retries)
		}
		return nil
	})
	rep, err = evidence.Verify(ctx, bucket, "outage-b")
	if err != nil || rep.Status != evidence.StatusOK {
		t.Fatalf("(b) verify after the flush = %+v, %v; want ok", rep, err)
	}
	replay, err := client.RunTool(ctx, slow)
	if err != nil || !proto.Equal(replay, r.resp) {
		t.Fatalf("(b) retry after the flush = %v, %v; want the original answer", replay, err)
	}
	if n := lines(t, filepath.Join(ws, "b.count")); n != 1 {
		t.Fatalf("(b) the tool ran %d times, want once", n)
	}

	// (c) The gateway is killed mid-call: a retry is ABORTED, never run
	// again, and verification calls the request incomplete.
	killed := shellRequest(t, "outage-c", "sleep 2; echo ran >> c.count")
	go func() {
		_, err := client.RunTool(ctx, killed)
		res <- result{nil, err}
	}()
	// Killed once dispatched: killed between its decision and its dispatch
	// marker, the call provably ran nothing, and a retry runs it.
	waitForKey(t, bucket, evidence.Key("outage-c", evidence.ArtifactDispatch))
	if err := gw.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-gw.done
	<-res
	gw = startServerEnv(t, dir, m.Env(), "--config", cfg)
	_, err = dial(t, gw.addr).RunTool(ctx, killed)
	if status.Code(err) != codes.Aborted {
		t.Fatalf("(c) retry after the gateway was killed: %v, want ABORTED", err)
	}
	time.Sleep(3 * time.Second) // longer than the command would have run
	if n := lines(t, filepath.Join(ws, "c.count")); n != 0 {
		t.Fatalf("(c) the command went on after its gateway was killed (%d runs)", n)
	}
	rep, err = evidence.Verify(ctx, bucket, "outage-c")
	if err != nil || rep.Status != evidence.StatusIncomplete {
		t.Fatalf("(c) verify = %+v, %v; want incomplete", rep, err)
	}
}

// TestEvidenceCLIOnS3: the auditor's commands work on a bucket as they do on
// a folder, signed manifests included, and catch an object overwritten
// behind the gateway's back.
func TestEvidenceCLIOnS3(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "audit", false)
	url := m.URL("audit", "prod")
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "signing.pem"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	pub, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", "signing.pem")
	if code != exitOK {
		t.Fatalf("pubkey: %s", stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "toolgate.pub"), []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := s3Gateway(t, dir, "gw", url, "signing_key: {file: signing.pem}")
	gw := startServerEnv(t, dir, m.Env(), "--config", cfg)
	client := dial(t, gw.addr)
	for i := range 3 {
		if _, err := client.RunTool(context.Background(), shellRequest(t, fmt.Sprintf("cli-%d", i), "echo hi")); err != nil {
			t.Fatal(err)
		}
	}

	out, stderr, code := runToolEnv(t, dir, m.Env(), "evidence", "ls", "--evidence", url)
	if code != exitOK || strings.Count(out, "workspace.shell") != 3 {
		t.Fatalf("ls on s3: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runToolEnv(t, dir, m.Env(), "evidence", "verify", "--evidence", url, "--all",
		"--pubkey", "toolgate.pub", "--require-signature")
	if code != exitOK {
		t.Fatalf("verify on s3 of intact signed evidence: exit %d\n%s%s", code, out, stderr)
	}

	// Overwrite one response behind the gateway's back (the bucket has no
	// object lock, so the service allows it).
	_, err := m.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String("audit"), Key: aws.String("prod/requests/cli-1/response.json"),
		Body: strings.NewReader(`{"ok":true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runToolEnv(t, dir, m.Env(), "evidence", "verify", "--evidence", url, "--all", "--pubkey", "toolgate.pub")
	if code != exitFailure || !strings.Contains(out+stderr, "cli-1") {
		t.Fatalf("verify after tampering: exit %d, want 1 naming cli-1\n%s%s", code, out, stderr)
	}
}
