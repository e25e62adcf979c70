package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/doortest"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// Keys of the test callers: "agent", and "alice" of group ops, who may
// approve held calls.
const (
	agentKey = "agent-key-0123456789"
	aliceKey = "alice-key-0123456789"
)

// testPolicy allows echo unless its text is "secret", holds "held" for
// ops, allows reading the workspace and nothing else: "hidden" is denied
// by default.
const testPolicy = `
@id("allow_echo") @reason("echo is harmless")
permit (principal, action == Action::"RunTool", resource == Tool::"echo");

@id("no_secrets") @reason("never echo the word secret")
forbid (principal, action == Action::"RunTool", resource == Tool::"echo")
when { context.args has text && context.args.text == "secret" };

@id("held_needs_ops") @approval("ops") @reason("held for ops")
permit (principal, action == Action::"RunTool", resource == Tool::"held");

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"held")
when { principal.groups.contains(context.group) };

@id("ops_only") @reason("ops may")
permit (principal, action == Action::"RunTool", resource == Tool::"opsonly")
when { principal.groups.contains("ops") };

@id("allow_read") @reason("reading the workspace is fine")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

// countingDriver counts its runs and answers with the text argument as
// stdout, its length as data, and the exit argument as exit code.
type countingDriver struct{ runs atomic.Int64 }

func (d *countingDriver) Engine() string { return "counting" }

func (d *countingDriver) Run(_ context.Context, c drivers.Call) (drivers.Result, error) {
	d.runs.Add(1)
	text, _ := c.Args["text"].(string)
	res := drivers.Result{Stdout: text, Data: map[string]any{"length": len(text)}}
	if n, ok := c.Args["exit"].(json.Number); ok {
		code, _ := n.Int64()
		res.ExitCode = int(code)
		res.Stderr = "exit requested"
	}
	return res, nil
}

// testGateway is the real gateway, recording the calls the door hands
// it.
type testGateway struct {
	*gateway.Gateway
	mu    sync.Mutex
	calls []gateway.Call
}

// Run records each call the door hands over, then runs it.
func (g *testGateway) Run(ctx context.Context, caller string, c gateway.Call) (*toolgatev1.RunToolResponse, error) {
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	return g.Gateway.Run(ctx, caller, c)
}

// lastCall is the last call handed to Run.
func (g *testGateway) lastCall(t *testing.T) gateway.Call {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) == 0 {
		t.Fatal("no call reached the gateway")
	}
	return g.calls[len(g.calls)-1]
}

// reload reloads the policy folder, which must swap the sets.
func (g *testGateway) reload(t *testing.T) {
	t.Helper()
	if swapped, err := g.ReloadPolicies(); err != nil || !swapped {
		t.Fatalf("policy reload: swapped %v, err %v", swapped, err)
	}
}

// testEnv is a real gateway (file evidence store, real policy, a counting
// driver and the workspace) behind the door, behind the plumbing, on a
// loopback listener.
type testEnv struct {
	t           *testing.T
	gw          *testGateway
	driver      *countingDriver
	door        *Door
	url         string
	srv         *httptest.Server
	policyDir   string
	evidenceDir string
}

// liveGateway is a real gateway for the door's tests: a live policy
// folder holding policyText as the default set, a file evidence store, the
// keys of agent and alice (group ops), and the given drivers and tools.
type liveGateway struct {
	gw          *gateway.Gateway
	auth        *callerauth.Authenticator
	policyDir   string
	evidenceDir string
}

func newLiveGateway(t *testing.T, policyText string, drvs map[string]drivers.Driver, tools map[string]gateway.Tool) liveGateway {
	t.Helper()
	dir := t.TempDir()
	lg := liveGateway{policyDir: filepath.Join(dir, "policies"), evidenceDir: filepath.Join(dir, "evidence")}
	must(t, os.Mkdir(lg.policyDir, 0o700))
	must(t, os.WriteFile(filepath.Join(lg.policyDir, "policy.default.cedar"), []byte(policyText), 0o600))
	engine, err := policy.NewLive(lg.policyDir)
	must(t, err)
	store, err := evidence.NewFileStore(lg.evidenceDir)
	must(t, err)
	t.Cleanup(func() { store.Close() })
	lg.auth, err = callerauth.New([]config.KeyConfig{
		{Caller: "agent", SHA256: doortest.KeyDigest(agentKey)},
		{Caller: "alice", SHA256: doortest.KeyDigest(aliceKey), Groups: []string{"ops"}},
	}, func(string) string { return "" })
	must(t, err)
	red, err := redact.New(redact.Config{})
	must(t, err)
	lg.gw, err = gateway.New(gateway.Options{
		Decider: engine, Store: store, Redactor: red, Auth: lg.auth, Instance: "test-host",
		Drivers: drvs, Tools: tools,
	})
	must(t, err)
	return lg
}

func newTestEnv(t *testing.T, cfg *Config) *testEnv {
	t.Helper()
	e := &testEnv{t: t, driver: &countingDriver{}}
	ws, err := workspace.New(workspace.Config{Root: filepath.Join(t.TempDir(), "workspace")})
	must(t, err)
	t.Cleanup(func() { ws.Close() })
	tools := map[string]gateway.Tool{
		"echo":    {Driver: "counting", Target: "echo", Description: "Echoes its text. Harmless.", Tags: []string{"read-only"}},
		"held":    {Driver: "counting", Target: "echo", Description: "Echoes after an approval"},
		"hidden":  {Driver: "counting", Target: "echo", Description: "Nobody may run it"},
		"opsonly": {Driver: "counting", Target: "echo", Description: "For group ops"},
		"bad:id":  {Driver: "counting", Target: "echo", Description: "Not an MCP tool name"},
	}
	for _, op := range workspace.Operations() {
		tools["workspace."+op] = gateway.Tool{Driver: "workspace", Target: op}
	}
	lg := newLiveGateway(t, testPolicy, map[string]drivers.Driver{"counting": e.driver, "workspace": ws}, tools)
	e.gw, e.policyDir, e.evidenceDir = &testGateway{Gateway: lg.gw}, lg.policyDir, lg.evidenceDir
	auth := lg.auth
	if cfg == nil {
		cfg = newConfig()
	}
	must(t, cfg.Validate())
	e.door, err = New(e.gw, *cfg, nil)
	must(t, err)
	door := e.door
	t.Cleanup(func() { door.Close() })
	mux := http.NewServeMux()
	e.door.Routes(mux)
	srv := httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(auth), MaxBodyBytes: cfg.BodyLimit(),
		Verifiers: []frontdoor.BearerVerifier{tokenVerifier{}}}.Wrap(mux))
	t.Cleanup(srv.Close)
	e.srv, e.url = srv, srv.URL+Path
	return e
}

func (e *testEnv) writePolicy(text string) {
	e.t.Helper()
	must(e.t, os.WriteFile(filepath.Join(e.policyDir, "policy.default.cedar"), []byte(text), 0o600))
}

// carolToken is a bearer token tokenVerifier accepts: caller "carol",
// who is in group ops by her token alone (auth.keys does not know her).
const carolToken = "token-of-carol"

// tokenVerifier stands for an OAuth verifier.
type tokenVerifier struct{}

func (tokenVerifier) VerifyBearer(_ context.Context, token string) (frontdoor.Principal, error) {
	if token != carolToken {
		return frontdoor.Principal{}, errors.New("unknown token")
	}
	return frontdoor.Principal{Caller: "carol", Identity: &gateway.Identity{
		Method: "oauth", Issuer: "https://idp.example", Subject: "carol", Groups: []string{"ops"},
	}}, nil
}

// bearer sets a caller's key on every request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.key != "" {
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// legacyVersion is the older protocol the tests speak beside 2026-07-28.
const legacyVersion = "2025-06-18"

// clientOptions configure a Go SDK client session.
type clientOptions struct {
	key     string
	legacy  bool // speak 2025-06-18 instead of negotiating 2026-07-28
	elicit  func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)
	rawMRTR bool // hand input-required results to the test
	// listChanged, when set, opens a subscriptions/listen stream at
	// connect (2026-07-28) and receives its notifications.
	listChanged chan<- struct{}
	// urlOnly declares URL-mode elicitation only.
	urlOnly bool
}

// connect opens a Go SDK client session to the door.
func (e *testEnv) connect(o clientOptions) *mcp.ClientSession {
	e.t.Helper()
	cs, err := e.dial(o)
	must(e.t, err)
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// dial opens a Go SDK client session, or says why it could not.
func (e *testEnv) dial(o clientOptions) (*mcp.ClientSession, error) {
	opts := &mcp.ClientOptions{ElicitationHandler: o.elicit}
	if o.listChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case o.listChanged <- struct{}{}:
			default:
			}
		}
	}
	if o.urlOnly {
		opts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
	}
	if o.rawMRTR {
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	var sessOpts *mcp.ClientSessionOptions
	if o.legacy {
		sessOpts = &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "door-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: &http.Client{Transport: bearer{o.key}}}, sessOpts)
}

// requestJSON reads a request's request.json, or nil when it is absent.
func (e *testEnv) requestJSON(id string) map[string]any {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.evidenceDir, "requests", id, "request.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	must(e.t, err)
	var m map[string]any
	must(e.t, json.Unmarshal(b, &m))
	return m
}

// policyDecision reads a request's policy_decision.json.
func (e *testEnv) policyDecision(id string) map[string]any {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.evidenceDir, "requests", id, "policy_decision.json"))
	must(e.t, err)
	var m map[string]any
	must(e.t, json.Unmarshal(b, &m))
	return m
}

// requestFolders counts the request folders in the store.
func (e *testEnv) requestFolders() int {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.evidenceDir, "requests"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	must(e.t, err)
	n := 0
	for _, en := range entries {
		if en.IsDir() && en.Name()[0] != '.' {
			n++
		}
	}
	return n
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	must(t, err)
	return res
}

// text joins a result's text content.
func text(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text
		}
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func statMode(path string) (os.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
