package agentspaces

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/redact"
)

// Keys of the test callers: agent runs batches, alice (group ops) and
// bob (no group) send approvals.
const (
	agentKey = "agent-key-0123456789abcdef"
	aliceKey = "alice-key-0123456789abcdef"
	bobKey   = "bob-key-0123456789abcdef01"
)

// countingDriver is the workspace driver, counting the operations it
// runs per target.
type countingDriver struct {
	*workspace.Driver
	calls map[string]*atomic.Int64
}

func (c *countingDriver) Run(ctx context.Context, call drivers.Call) (drivers.Result, error) {
	if n, ok := c.calls[call.Target]; ok {
		n.Add(1)
	}
	return c.Driver.Run(ctx, call)
}

// testEnv is a gateway with a real policy, an evidence store and the
// workspace driver (its shell able to "bun run" through a stand-in), with
// the door behind the real front-door plumbing on a loopback server.
type testEnv struct {
	t     *testing.T
	ws    string
	store *evidence.MemoryStore
	gw    *gateway.Gateway
	door  *Door
	srv   *httptest.Server
	drv   *countingDriver
	// grpcAddr is the gRPC listener's address, once grpcClient opened it.
	grpcAddr string
}

type envOptions struct {
	policy string // default testdata/policy.cedar
	door   Options
}

func newTestEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	dir := t.TempDir()
	e := &testEnv{t: t, ws: filepath.Join(dir, "workspace"), store: evidence.NewMemoryStore()}
	polDir := filepath.Join(dir, "policies")
	if err := os.Mkdir(polDir, 0o700); err != nil {
		t.Fatal(err)
	}
	text := o.policy
	if text == "" {
		b, err := os.ReadFile("testdata/policy.cedar")
		if err != nil {
			t.Fatal(err)
		}
		text = string(b)
	}
	if err := os.WriteFile(filepath.Join(polDir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	engine, err := policy.Load(polDir)
	if err != nil {
		t.Fatalf("load policy: %v", err)
	}
	shell, err := filepath.Abs("testdata/bunstub/bunshell")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(workspace.Config{Root: e.ws, Shell: shell, Sandbox: workspace.SandboxNone, Network: workspace.NetworkHost})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	e.drv = &countingDriver{Driver: ws, calls: map[string]*atomic.Int64{}}
	tools := map[string]gateway.Tool{}
	for _, op := range workspace.Operations() {
		tools["workspace."+op] = gateway.Tool{Driver: "workspace", Target: op}
		e.drv.calls[op] = &atomic.Int64{}
	}
	keys := map[string]string{"AGENT_KEY": agentKey, "ALICE_KEY": aliceKey, "BOB_KEY": bobKey}
	auth, err := callerauth.New([]config.KeyConfig{
		{Caller: "agent", Env: "AGENT_KEY"},
		{Caller: "alice", Env: "ALICE_KEY", Groups: []string{"ops"}},
		{Caller: "bob", Env: "BOB_KEY"},
	}, func(k string) string { return keys[k] })
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.gw, err = gateway.New(gateway.Options{
		Decider: engine, Store: e.store, Redactor: red, Auth: auth,
		Drivers: map[string]drivers.Driver{"workspace": e.drv}, Tools: tools, Instance: "test-host",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.door.GRPCCaller == nil {
		o.door.GRPCCaller = e.gw.Caller
	}
	e.door, err = New(e.gw, o.door)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	e.door.Routes(mux)
	e.srv = httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(auth), MaxBodyBytes: DefaultMaxBodyBytes}.Wrap(mux))
	t.Cleanup(e.srv.Close)
	return e
}

// answer is a reply as the client sees it.
type answer struct {
	code  int
	turn  string // the Idempotency-Key header
	reply Reply
	raw   map[string]any
}

// post sends body to the run's operations endpoint as the holder of key;
// turn, if set, is the Idempotency-Key.
func (e *testEnv) post(key, runID, turn, body string) answer {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/runs/"+runID+"/operations", strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if turn != "" {
		req.Header.Set("Idempotency-Key", turn)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	a := answer{code: resp.StatusCode, turn: resp.Header.Get("Idempotency-Key")}
	if err := json.Unmarshal(data, &a.reply); err != nil {
		e.t.Fatalf("reply %s: %v", data, err)
	}
	if err := json.Unmarshal(data, &a.raw); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// example reads a spec example from testdata/examples.
func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/examples", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// seed writes a file into the workspace.
func (e *testEnv) seed(path, content string) {
	e.t.Helper()
	p := filepath.Join(e.ws, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// read returns a workspace file's content, or "<absent>".
func (e *testEnv) read(path string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.ws, path))
	if os.IsNotExist(err) {
		return "<absent>"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// calls is how many operations of target the driver ran.
func (e *testEnv) calls(target string) int64 { return e.drv.calls[target].Load() }

// requests lists the request ids with evidence in the store.
func (e *testEnv) requests() []string {
	e.t.Helper()
	keys, err := e.store.List(context.Background(), "requests/")
	if err != nil {
		e.t.Fatal(err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, k := range keys {
		id, _, _ := strings.Cut(strings.TrimPrefix(k, "requests/"), "/")
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// artifact returns one stored artifact of a request, decoded.
func (e *testEnv) artifact(requestID, name string) map[string]any {
	e.t.Helper()
	b, err := e.store.Get(context.Background(), "requests/"+requestID+"/"+name)
	if err != nil {
		e.t.Fatalf("artifact %s of %s: %v", name, requestID, err)
	}
	var m map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(b), &m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// checkTimestamp asserts an event's timestamp is RFC 3339 UTC.
func checkTimestamp(t *testing.T, ev Event) {
	t.Helper()
	if _, err := time.Parse(time.RFC3339, ev.Timestamp); err != nil || !strings.HasSuffix(ev.Timestamp, "Z") {
		t.Errorf("event %s: timestamp %q is not RFC 3339 UTC", ev.Type, ev.Timestamp)
	}
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(x, y any) bool {
	a, _ := json.Marshal(x)
	b, _ := json.Marshal(y)
	return string(a) == string(b)
}

// types lists the events' types.
func types(evs []Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}
