package tpmjsdoor

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/doortest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/redact"
)

// testKey is the key of caller "agent" in every test gateway; otherKey is
// caller "alice" (group ops), who may approve held calls.
const (
	testKey  = "agent-key-0123456789"
	otherKey = "alice-key-0123456789"
)

// testPolicy allows the TPMJS tools but "denied", holds "held" for the ops
// group, and allows the workspace's readFile.
const testPolicy = `
@id("allow_tpmjs") @reason("tests may use TPMJS tools")
permit (principal, action == Action::"RunTool", resource in Driver::"tpmjs")
unless { resource == Tool::"held" };

@id("no_shouting") @reason("no shouting")
forbid (principal, action == Action::"RunTool", resource == Tool::"hello")
when { context.args has greeting && context.args.greeting == "HELLO" };

@id("no_denied") @reason("this tool is off limits") @suggestion("use echoTool instead")
forbid (principal, action == Action::"RunTool", resource == Tool::"denied");

@id("held_needs_ops") @approval("ops") @reason("held for ops")
permit (principal, action == Action::"RunTool", resource == Tool::"held");

@id("ops_may_approve")
permit (principal, action == Action::"Approve", resource == Tool::"held")
when { principal.groups.contains(context.group) };

@id("allow_read") @reason("reading the workspace is fine")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

// testTools is the catalog: TPMJS tools of the fake executor's built-in
// package, and the workspace's operations.
func testTools() map[string]gateway.Tool {
	pkg := tpmjstest.Package
	tools := map[string]gateway.Tool{
		"hello":  {Driver: "tpmjs", Target: tpmjstest.EchoTool, Package: pkg, Version: "1.2.3", Description: "echoes its params", Tags: []string{"demo"}, CallerEnv: []string{"API_KEY"}},
		"denied": {Driver: "tpmjs", Target: tpmjstest.FailTool, Package: pkg, Version: "1.2.3", Description: "never allowed"},
		"held":   {Driver: "tpmjs", Target: tpmjstest.NullTool, Package: pkg, Version: "1.2.3", Description: "needs approval"},
		"caught": {Driver: "tpmjs", Target: tpmjstest.CaughtErrorTool, Package: pkg, Version: "1.2.3"},
		"fails":  {Driver: "tpmjs", Target: "throwTool", Package: pkg, Version: "1.2.3"},
	}
	for _, op := range workspace.Operations() {
		tools["workspace."+op] = gateway.Tool{Driver: "workspace", Target: op}
	}
	return tools
}

// testEnv is a gateway with a tpmjs driver in front of a fake executor and
// a workspace driver, real policy and a file evidence store.
type testEnv struct {
	t           *testing.T
	exec        *tpmjstest.Executor
	gw          *gateway.Gateway
	auth        *callerauth.Authenticator
	evidenceDir string
}

type envOptions struct {
	registry bool // serve registry ids through the tpmjs driver
}

func newTestEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	dir := t.TempDir()
	e := &testEnv{t: t, exec: tpmjstest.New(t, tpmjstest.NodeV10), evidenceDir: filepath.Join(dir, "evidence")}
	e.exec.RegisterTool(tpmjstest.Package, "throwTool", func(map[string]any, map[string]string) (any, error) {
		return nil, errString("boom in the tool")
	})
	polDir := filepath.Join(dir, "policies")
	must(t, os.Mkdir(polDir, 0o700))
	must(t, os.WriteFile(filepath.Join(polDir, "policy.default.cedar"), []byte(testPolicy), 0o600))
	engine, err := policy.Load(polDir)
	must(t, err)
	store, err := evidence.NewFileStore(e.evidenceDir)
	must(t, err)
	t.Cleanup(func() { store.Close() })
	td, err := tpmjs.New(tpmjs.Config{URL: e.exec.URL})
	must(t, err)
	t.Cleanup(func() { td.Close() })
	ws, err := workspace.New(workspace.Config{Root: filepath.Join(dir, "workspace")})
	must(t, err)
	t.Cleanup(func() { ws.Close() })
	e.auth, err = callerauth.New([]config.KeyConfig{
		{Caller: "agent", SHA256: doortest.KeyDigest(testKey)},
		{Caller: "alice", SHA256: doortest.KeyDigest(otherKey), Groups: []string{"ops"}},
	}, func(string) string { return "" })
	must(t, err)
	red, err := redact.New(redact.Config{})
	must(t, err)
	opts := gateway.Options{
		Decider: engine, Store: store, Redactor: red, Auth: e.auth, Instance: "test-host",
		Drivers: map[string]drivers.Driver{"tpmjs": td, "workspace": ws}, Tools: testTools(),
	}
	if o.registry {
		opts.Registry = &gateway.Registry{Driver: "tpmjs", Bind: (&tpmjs.DriverConfig{}).BindTool}
	}
	e.gw, err = gateway.New(opts)
	must(t, err)
	return e
}

// serve serves a door configured by cfg (newConfig's defaults when nil)
// behind the front-door plumbing, as `toolgate serve` does, and returns
// its base URL.
func (e *testEnv) serve(cfg *Config) string {
	e.t.Helper()
	if cfg == nil {
		cfg = newConfig()
	}
	must(e.t, cfg.Validate())
	return e.serveGateway(e.gw, cfg)
}

// serveGateway serves a door in front of gw, which may be a fake.
func (e *testEnv) serveGateway(gw Gateway, cfg *Config) string {
	e.t.Helper()
	mux := http.NewServeMux()
	newDoor(gw, *cfg, frontdoor.PrincipalFrom, nil).Routes(mux)
	srv := httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(e.auth), MaxBodyBytes: cfg.BodyLimit()}.Wrap(mux))
	e.t.Cleanup(srv.Close)
	return srv.URL
}

// executions counts the /execute-tool requests the fake executor got.
func (e *testEnv) executions() int {
	n := 0
	for _, r := range e.exec.Requests() {
		if strings.HasSuffix(r.Path, "/execute-tool") {
			n++
		}
	}
	return n
}

// requestFolders lists the request folders in the evidence store.
func (e *testEnv) requestFolders() []string {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.evidenceDir, "requests"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		if en.IsDir() && !strings.HasPrefix(en.Name(), ".") {
			names = append(names, en.Name())
		}
	}
	return names
}

// requestJSON reads a request's request.json.
func (e *testEnv) requestJSON(id string) map[string]any {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.evidenceDir, "requests", id, "request.json"))
	if err != nil {
		e.t.Fatalf("request.json of %s: %v", id, err)
	}
	var m map[string]any
	must(e.t, json.Unmarshal(b, &m))
	return m
}

// answer is an HTTP answer, decoded.
type answer struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// do sends a request and decodes the JSON answer.
func do(t *testing.T, method, url, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	must(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	must(t, err)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 && method != http.MethodHead {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, url, err, raw)
		}
	}
	return a
}

// errCode returns the answer's error.code, or "".
func (a answer) errCode() string {
	e, _ := a.body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// ext returns the answer's toolgate extension.
func (a answer) ext() map[string]any {
	m, _ := a.body["toolgate"].(map[string]any)
	return m
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
