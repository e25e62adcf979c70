package chart

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

const (
	replicaCount = 3
	// settleWithin bounds every wait of the test for the replicas to do
	// something: start, sequence their logs, finish a killed replica's
	// requests.
	settleWithin = 90 * time.Second
	poll         = 100 * time.Millisecond
)

// replica is one pod's `toolgate serve` process.
type replica struct {
	pod    *pod
	cmd    *exec.Cmd
	addr   string
	log    *strings.Builder
	mu     *sync.Mutex
	done   chan error
	client toolgatev1.ToolGatewayClient
}

// start runs the pod's command (the image's entrypoint with the rendered
// arguments) in its working folder with its environment, and the image's,
// alone. Only the listen addresses are added: three pods on one host
// cannot all listen on the chart's ports.
func start(t *testing.T, p *pod, apiKey string) *replica {
	t.Helper()
	args := append(append([]string(nil), p.args...), "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0")
	cmd := exec.Command(toolgateBin, args...)
	cmd.Dir = p.workDir
	cmd.Env = append([]string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "GORACE=atexit_sleep_ms=0"}, p.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{pod: p, cmd: cmd, log: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.log.WriteString(line + "\n")
			r.mu.Unlock()
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "toolgate serving" {
				addr <- rec.Addr
			}
		}
		r.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, r.logText())
		}
	})
	select {
	case r.addr = <-addr:
	case err := <-r.done:
		t.Fatalf("%s exited at start (%v):\n%s", p.name, err, r.logText())
	case <-time.After(settleWithin):
		t.Fatalf("%s did not start:\n%s", p.name, r.logText())
	}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.client = authClient{toolgatev1.NewToolGatewayClient(conn), apiKey}
	return r
}

func (r *replica) logText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// authClient sends the caller's API key with every call.
type authClient struct {
	toolgatev1.ToolGatewayClient
	key string
}

func (a authClient) RunTool(ctx context.Context, req *toolgatev1.RunToolRequest, opts ...grpc.CallOption) (*toolgatev1.RunToolResponse, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.key)
	return a.ToolGatewayClient.RunTool(ctx, req, opts...)
}

// countRequest is a workspace.shell call that appends a line to <id>.count
// in the replica's workspace, then sleeps a little: the file's lines are
// how many times the tool started there.
func countRequest(t *testing.T, id string) *toolgatev1.RunToolRequest {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"command": "echo ran >> " + id + ".count; sleep 0.3; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	return &toolgatev1.RunToolRequest{RequestId: id, ToolId: "workspace.shell", Args: args}
}

// runs is how many times the tool of countRequest(id) started, on every
// replica together.
func runs(t *testing.T, pods []*pod, id string) int {
	t.Helper()
	n := 0
	for _, p := range pods {
		data, err := os.ReadFile(filepath.Join(p.root, "var/lib/toolgate/workspace", id+".count"))
		if err == nil {
			n += strings.Count(string(data), "\n")
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return n
}

func call(c toolgatev1.ToolGatewayClient, req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.RunTool(ctx, req)
}

func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (still so after %v): %v", what, settleWithin, err)
		}
		time.Sleep(poll)
	}
}

// replicaValues are the values of the test's release: three replicas on
// one MinIO bucket, the shell in its sandbox, and timings short enough
// for a test (lease heartbeat, sweep, call timeout, interrupted_after).
func replicaValues(keys replicaKeys, url string) map[string]any {
	return with(baseValues(keys), map[string]any{
		"replicaCount": replicaCount,
		"evidence":     map[string]any{"url": url},
		"workspace":    map[string]any{"enabled": true, "sandbox": "namespaces"},
		"policies":     map[string]any{"policy.default.cedar": "@id(\"everything\")\npermit (principal, action, resource);\n"},
		"config": map[string]any{
			"evidence": map[string]any{"lease_heartbeat": "200ms", "sweep_interval": "1s", "interrupted_after": "8s", "op_timeout": "5s"},
			"drivers":  map[string]any{"workspace": map[string]any{"default_timeout": "5s"}},
		},
	})
}

// TestReplicasShareOneBucket is the chart's deployment run for real, as
// far as one host can: three gateway processes configured exactly as the
// chart renders its pods (the ConfigMap's file, the Secrets' keys mounted
// as the StatefulSet mounts them, the same arguments and environment)
// against one MinIO bucket. One replica is SIGKILLed in the middle of a
// burst of calls and started again under its pod name. No request runs
// twice, every request the killed replica had claimed is finished by it
// (signed with its key) after the restart, retries on any replica get
// what the evidence says, and `toolgate evidence verify --all` with the
// three public keys finds every request ok.
func TestReplicasShareOneBucket(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	url := m.URL("evidence", "prod")
	keys := newReplicaKeys(t, podPrefix, replicaCount)
	c := testCluster(t, keys)
	for _, kv := range m.Env() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY" {
			c.secrets["toolgate-s3"][k] = []byte(v)
		}
	}
	_, objs := render(t, Release{Name: release, Namespace: "toolgate", Values: replicaValues(keys, url)})
	apiKey := string(c.secrets["toolgate-api-keys"]["orchestrator"])
	root := t.TempDir()
	pods := make([]*pod, replicaCount)
	reps := make([]*replica, replicaCount)
	for i := range replicaCount {
		pods[i] = c.materialise(t, objs, i, filepath.Join(root, fmt.Sprintf("%s-%d", podPrefix, i)))
		if err := os.MkdirAll(pods[i].workDir, 0o770); err != nil {
			t.Fatal(err)
		}
		reps[i] = start(t, pods[i], apiKey)
	}

	const perReplica = 16
	const victim = 1
	reqs, owner := burst(t, perReplica)
	killMidBurst(t, reps, pods, reqs, owner, victim)
	bucket := openBucket(t, m, url)
	unfinished := unfinishedOf(t, bucket, reqs, owner, victim)
	if len(unfinished) == 0 {
		t.Fatal("the kill landed after every call of the killed replica had finished; the test proved nothing")
	}
	t.Logf("the kill left %d of %s's %d requests without a manifest", len(unfinished), pods[victim].name, perReplica)

	reps[victim] = start(t, pods[victim], apiKey)
	checkFinishedByOwner(t, bucket, unfinished, keys, victim)
	for i, req := range reqs {
		before := runs(t, pods, req.RequestId)
		if before > 1 {
			t.Errorf("%s ran %d times", req.RequestId, before)
		}
		// A retry on another replica than the first caller's.
		other := reps[(owner[i]+1)%replicaCount]
		resp, err := call(other.client, req)
		after := runs(t, pods, req.RequestId)
		switch {
		case after > 1:
			t.Errorf("%s: a retry on %s ran it again (%d runs)", req.RequestId, other.pod.name, after)
		case err != nil && status.Code(err) != codes.Aborted:
			t.Errorf("%s: a retry on %s: %v, want the stored response or ABORTED (interrupted)", req.RequestId, other.pod.name, err)
		case err == nil && resp.GetPolicyCheck().GetDecision() != "allow":
			// A stored answer may report a tool failure (a shell a loaded
			// machine started too late for its timeout): it ran once, and
			// the retry replays it. Anything but the allow it was is wrong.
			t.Errorf("%s: a retry on %s: %v", req.RequestId, other.pod.name, resp)
		}
	}
	verifyAll(t, m, url, keys, len(reqs))
}

// burst makes perReplica requests for each replica; owner[i] is the
// replica request i is sent to.
func burst(t *testing.T, perReplica int) ([]*toolgatev1.RunToolRequest, []int) {
	t.Helper()
	var reqs []*toolgatev1.RunToolRequest
	var owner []int
	for i := range perReplica * replicaCount {
		reqs = append(reqs, countRequest(t, fmt.Sprintf("burst-%02d", i)))
		owner = append(owner, i%replicaCount)
	}
	return reqs, owner
}

// killMidBurst sends the burst, two callers per request, spread out so
// that the kill finds the victim's calls at every stage, and SIGKILLs the
// victim once a quarter of its tools have started.
func killMidBurst(t *testing.T, reps []*replica, pods []*pod, reqs []*toolgatev1.RunToolRequest, owner []int, victim int) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, req := range reqs {
			for range 2 {
				wg.Go(func() { call(reps[owner[i]].client, req) })
			}
			time.Sleep(40 * time.Millisecond)
		}
	})
	eventually(t, "the burst never got going on the victim", func() error {
		started := 0
		for i, req := range reqs {
			if owner[i] == victim && runs(t, pods, req.RequestId) > 0 {
				started++
			}
		}
		if started < len(reqs)/replicaCount/4 {
			return fmt.Errorf("%d of the victim's tools started", started)
		}
		return nil
	})
	if err := reps[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-reps[victim].done
	wg.Wait()
}

func openBucket(t *testing.T, m *evidencetest.MinIO, url string) evidence.Store {
	t.Helper()
	m.SetEnv(t)
	s, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// manifestOf returns request id's manifest, or nil while it has none.
func manifestOf(t *testing.T, s evidence.Store, id string) *evidence.Manifest {
	t.Helper()
	data, err := s.Get(context.Background(), evidence.RequestPrefix(id)+evidence.ArtifactManifest)
	if err != nil {
		return nil
	}
	var man evidence.Manifest
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatalf("%s: manifest is not JSON: %v", id, err)
	}
	return &man
}

// unfinishedOf lists the victim's requests that were claimed but have no
// manifest.
func unfinishedOf(t *testing.T, s evidence.Store, reqs []*toolgatev1.RunToolRequest, owner []int, victim int) []string {
	t.Helper()
	var ids []string
	for i, req := range reqs {
		if owner[i] != victim {
			continue
		}
		keys, err := s.List(context.Background(), evidence.RequestPrefix(req.RequestId))
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 && manifestOf(t, s, req.RequestId) == nil {
			ids = append(ids, req.RequestId)
		}
	}
	return ids
}

// checkFinishedByOwner waits until the restarted victim has finished
// every request the kill left unfinished, and checks that it was the one
// that did: a request dispatched before the kill gets a manifest signed
// with the victim's key and naming its instance (completed from a stored
// response, or interrupted: never run again); one that never was has its
// attempt closed as not dispatched, so that a retry runs it once.
func checkFinishedByOwner(t *testing.T, s evidence.Store, ids []string, keys replicaKeys, victim int) {
	t.Helper()
	wantKey := evidence.KeyID(keys.pubs[victim])
	wantEngine := regexp.MustCompile(fmt.Sprintf(`@%s-%d(#[0-9]+)?(/|$)`, podPrefix, victim))
	states := map[string]int{}
	eventually(t, "the restarted replica finishes the requests it left", func() error {
		clear(states)
		for _, id := range ids {
			if man := manifestOf(t, s, id); man != nil {
				if man.Signature == nil || man.Signature.KeyID != wantKey {
					t.Fatalf("%s was finished by key %v, not by its owner's %s", id, man.Signature, wantKey)
				}
				if !wantEngine.MatchString(man.EngineRef) {
					t.Fatalf("%s: engine_ref %s does not name its owner", id, man.EngineRef)
				}
				states[man.Outcome]++
				continue
			}
			stored, err := s.List(context.Background(), evidence.RequestPrefix(id))
			if err != nil {
				return err
			}
			attempts, err := evidence.ReadAttempts(context.Background(), s, id, stored)
			if err != nil {
				return fmt.Errorf("%s: attempts: %w", id, err)
			}
			if !evidence.NeverDispatched(attempts) {
				return fmt.Errorf("%s is not finished yet: %d attempts, none closed", id, len(attempts))
			}
			states["not dispatched"]++
		}
		return nil
	})
	t.Logf("the restarted replica finished the %d requests it left: %v", len(ids), states)
}

// verifyAll waits until `toolgate evidence verify --all`, trusting the
// three replicas' public keys, reports all n requests ok.
func verifyAll(t *testing.T, m *evidencetest.MinIO, url string, keys replicaKeys, n int) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"evidence", "verify", "--all", "--evidence", url, "--spool", "none", "--require-signature"}
	for i, pub := range keys.public {
		f := filepath.Join(dir, fmt.Sprintf("replica-%d.pub", i))
		if err := os.WriteFile(f, []byte(pub.(string)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--pubkey", f)
	}
	want := fmt.Sprintf("verified %d requests: %d ok", n, n)
	eventually(t, "verify --all with the three public keys", func() error {
		out, stderr, code := runTool(t, dir, m.Env(), args...)
		if code != 0 || !strings.Contains(out, want) {
			return fmt.Errorf("exit %d, want %q:\n%s%s", code, want, out, stderr)
		}
		return nil
	})
}
