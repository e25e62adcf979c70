package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// The official MCP TypeScript SDK's client against the door, over a real
// loopback listener served by frontdoor.Serve as `toolgate serve` serves
// it, in front of a real gateway with a file evidence store.

// sdkDir holds the TypeScript SDK: package.json and package-lock.json pin
// it, drive.mjs runs it, and .ci/test.sh installs node_modules.
const sdkDir = "testdata/npm"

// sdkInstallCommand installs the client, for the failure message.
const sdkInstallCommand = "(cd gateway/frontdoor/mcp/testdata/npm && npm ci --ignore-scripts --no-audit --no-fund)"

// clientPolicy allows echo.say unless its text mentions a secret, holds
// echo.held for ops, and allows nothing else: echo.hidden is denied.
const clientPolicy = `
@id("echo_allowed") @reason("echoing is harmless")
permit (principal, action == Action::"RunTool", resource == Tool::"echo.say");

@id("no_secrets") @reason("secrets are not echoed")
forbid (principal, action == Action::"RunTool", resource == Tool::"echo.say")
when { context.args has text && context.args.text like "*secret*" };

@id("held_for_ops") @approval("ops") @reason("held calls need a reviewer")
permit (principal, action == Action::"RunTool", resource == Tool::"echo.held");

@id("ops_approve")
permit (principal, action == Action::"Approve", resource == Tool::"echo.held")
when { principal.groups.contains(context.group) };
`

// echoDriver answers a call with its "text" argument and counts the calls
// it ran, so that a test sees whether anything ran.
type echoDriver struct{ runs atomic.Int64 }

// Engine implements drivers.Driver.
func (d *echoDriver) Engine() string { return "echo" }

// Run implements drivers.Driver.
func (d *echoDriver) Run(_ context.Context, c drivers.Call) (drivers.Result, error) {
	d.runs.Add(1)
	text, _ := c.Args["text"].(string)
	return drivers.Result{Stdout: text + "\n", Data: map[string]any{"echoed": text, "target": c.Target}}, nil
}

// clientEnv is a gateway with the echo driver and the MCP door served on
// loopback.
type clientEnv struct {
	t           *testing.T
	gw          *gateway.Gateway
	driver      *echoDriver
	evidenceDir string
	url         string // the endpoint, http://127.0.0.1:PORT/mcp
}

// newClientEnv builds the gateway and serves the door as `toolgate serve`
// does: frontdoor.Serve, the plumbing with the gateway's keys, a port of
// its own.
func newClientEnv(t *testing.T) *clientEnv {
	t.Helper()
	e := &clientEnv{t: t, driver: &echoDriver{}}
	lg := newLiveGateway(t, clientPolicy, map[string]drivers.Driver{"echo": e.driver}, map[string]gateway.Tool{
		"echo.say":    {Driver: "echo", Target: "say", Description: "Echoes its text."},
		"echo.hidden": {Driver: "echo", Target: "hidden", Description: "Never allowed."},
		"echo.held":   {Driver: "echo", Target: "held", Description: "Runs once a reviewer approves."},
	})
	e.gw, e.evidenceDir = lg.gw, lg.evidenceDir
	cfg := newConfig()
	cfg.Listen = "127.0.0.1:0"
	must(t, cfg.Validate())
	servers, err := frontdoor.Serve(context.Background(), config.Config{}, e.gw, []frontdoor.Loaded{{Name: Name, Config: cfg}}, nil)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		must(t, servers.Shutdown(ctx))
	})
	e.url = "http://" + servers.Addr(cfg.Listen).String() + Path
	return e
}

// requestFolders lists the request ids in the evidence store.
func (e *clientEnv) requestFolders() []string {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.evidenceDir, "requests"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	must(e.t, err)
	var ids []string
	for _, en := range entries {
		if en.IsDir() && !strings.HasPrefix(en.Name(), ".") {
			ids = append(ids, en.Name())
		}
	}
	return ids
}

// artifact reads one JSON artifact of request id.
func (e *clientEnv) artifact(id, name string) map[string]any {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.evidenceDir, "requests", id, name))
	if err != nil {
		e.t.Fatalf("%s of %s: %v", name, id, err)
	}
	var m map[string]any
	must(e.t, json.Unmarshal(b, &m))
	return m
}

// requireSDK fails the test, never skips it, when node or the installed
// TypeScript SDK is missing.
func requireSDK(t *testing.T) {
	t.Helper()
	pkg := filepath.Join(sdkDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(pkg); errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the MCP TypeScript SDK is not installed (%s is missing); run, from the repository root:\n\t%s", pkg, sdkInstallCommand)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH; the MCP door's tests run the TypeScript SDK's client with it: %v", err)
	}
}

// sdkStep is one step of a drive.mjs script.
type sdkStep struct {
	Op        string         `json:"op"`
	Name      string         `json:"name,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

// sdkOutcome is what drive.mjs printed.
type sdkOutcome struct {
	ProtocolVersion string    `json:"protocolVersion"`
	ConnectError    *sdkError `json:"connectError"`
	Steps           []struct {
		Result *sdkResult `json:"result"`
		Error  *sdkError  `json:"error"`
	} `json:"steps"`
}

type sdkError struct {
	Code    any    `json:"code"`
	Message string `json:"message"`
}

// sdkResult is a tools/list or tools/call result as the client handed it
// to the application.
type sdkResult struct {
	Tools []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Meta              map[string]any `json:"_meta"`
}

// text joins the result's text content.
func (r *sdkResult) text() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// runSDK runs the unmodified TypeScript SDK client once against url with
// key and the steps, and returns what it handed back.
func runSDK(t *testing.T, url, key string, steps ...sdkStep) sdkOutcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script, err := json.Marshal(map[string]any{"steps": steps})
	must(t, err)
	cmd := exec.CommandContext(ctx, "node", "drive.mjs")
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "TOOLGATE_URL="+url, "TOOLGATE_KEY="+key)
	cmd.Stdin = bytes.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node drive.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out sdkOutcome
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		t.Fatalf("the client printed no JSON object: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if out.ConnectError != nil {
		t.Fatalf("the client could not connect: %+v", *out.ConnectError)
	}
	if len(out.Steps) != len(steps) {
		t.Fatalf("the client ran %d steps of %d: %s", len(out.Steps), len(steps), stdout.String())
	}
	return out
}

// callResult is the result of step i, failing when the client threw.
func (o sdkOutcome) callResult(t *testing.T, i int) *sdkResult {
	t.Helper()
	s := o.Steps[i]
	if s.Error != nil || s.Result == nil {
		t.Fatalf("step %d threw %+v", i, s.Error)
	}
	return s.Result
}

// sdkCall is a call step of tool name with args and, unless key is empty,
// key as its idempotency key.
func sdkCall(name string, args map[string]any, key string) sdkStep {
	s := sdkStep{Op: "call", Name: name, Arguments: args}
	if key != "" {
		s.Meta = map[string]any{MetaIdempotencyKey: key}
	}
	return s
}

// TestTypeScriptSDKClient runs @modelcontextprotocol/sdk 1.32.2's Client
// and StreamableHTTPClientTransport, unmodified, with a bearer key.
func TestTypeScriptSDKClient(t *testing.T) {
	requireSDK(t)
	e := newClientEnv(t)

	t.Run("it negotiates 2025-11-25 and lists only the tools policy allows", func(t *testing.T) {
		out := runSDK(t, e.url, agentKey, sdkStep{Op: "list"})
		if out.ProtocolVersion != "2025-11-25" {
			t.Errorf("negotiated %q", out.ProtocolVersion)
		}
		var names []string
		for _, tool := range out.callResult(t, 0).Tools {
			names = append(names, tool.Name)
			var schema map[string]any
			if json.Unmarshal(tool.InputSchema, &schema) != nil || schema["type"] != "object" {
				t.Errorf("%s: input schema %s", tool.Name, tool.InputSchema)
			}
		}
		if !slices.Equal(names, []string{"echo.held", "echo.say"}) {
			t.Fatalf("tools = %v, want echo.held and echo.say (echo.hidden is denied)", names)
		}
	})

	t.Run("an allowed call returns the output and its evidence", func(t *testing.T) {
		before := e.driver.runs.Load()
		res := runSDK(t, e.url, agentKey, sdkCall("echo.say", map[string]any{"text": "hello"}, "ts-allow-1")).callResult(t, 0)
		if res.IsError || res.text() != "hello\n" || res.StructuredContent["echoed"] != "hello" {
			t.Fatalf("result %+v", res)
		}
		if e.driver.runs.Load() != before+1 {
			t.Fatal("the driver did not run the call once")
		}
		if res.Meta[MetaRequestID] != "ts-allow-1" {
			t.Fatalf("_meta = %v", res.Meta)
		}
		req := e.artifact("ts-allow-1", "request.json")
		if req["front_door"] != Name || req["caller"] != "agent" || req["tool_id"] != "echo.say" {
			t.Fatalf("request.json = %v", req)
		}
		manifest := e.artifact("ts-allow-1", "manifest.json")
		if manifest["outcome"] != evidence.OutcomeCompleted || manifest["request_id"] != "ts-allow-1" {
			t.Fatalf("manifest.json = %v", manifest)
		}
		refs, _ := res.Meta[MetaEvidenceRefs].([]any)
		for _, want := range []string{"requests/ts-allow-1/request.json", "requests/ts-allow-1/manifest.json"} {
			if !slices.Contains(refs, any(want)) {
				t.Errorf("evidence refs %v lack %s", refs, want)
			}
		}
	})

	t.Run("arguments a rule forbids are a tool error with deny evidence, and nothing runs", func(t *testing.T) {
		before := e.driver.runs.Load()
		res := runSDK(t, e.url, agentKey, sdkCall("echo.say", map[string]any{"text": "my secret"}, "ts-deny-1")).callResult(t, 0)
		if !res.IsError || !strings.Contains(res.text(), "no_secrets") || !strings.Contains(res.text(), "secrets are not echoed") {
			t.Fatalf("result %+v", res)
		}
		if e.driver.runs.Load() != before {
			t.Fatal("the driver ran a denied call")
		}
		decision := e.artifact("ts-deny-1", "policy_decision.json")
		if decision["decision"] != "deny" || decision["rule_id"] != "no_secrets" {
			t.Fatalf("policy_decision.json = %v", decision)
		}
	})

	t.Run("the same idempotency key twice runs once", func(t *testing.T) {
		before, folders := e.driver.runs.Load(), len(e.requestFolders())
		step := sdkCall("echo.say", map[string]any{"text": "once"}, "ts-idem-1")
		out := runSDK(t, e.url, agentKey, step, step)
		first, second := out.callResult(t, 0), out.callResult(t, 1)
		if first.IsError || first.text() != "once\n" || second.text() != first.text() {
			t.Fatalf("first %+v\nsecond %+v", first, second)
		}
		if e.driver.runs.Load() != before+1 || len(e.requestFolders()) != folders+1 {
			t.Fatalf("driver runs +%d, request folders +%d; want +1 and +1", e.driver.runs.Load()-before, len(e.requestFolders())-folders)
		}
	})

	t.Run("a held call is a tool error carrying the approval id, and runs once approved", func(t *testing.T) {
		before := e.driver.runs.Load()
		step := sdkCall("echo.held", map[string]any{"text": "after review"}, "ts-held-1")
		res := runSDK(t, e.url, agentKey, step).callResult(t, 0)
		approval, _ := res.Meta[MetaApproval].(map[string]any)
		id, _ := approval["approvalId"].(string)
		if !res.IsError || id == "" || !strings.Contains(res.text(), id) || !strings.Contains(res.text(), "ts-held-1") {
			t.Fatalf("result %+v", res)
		}
		if e.driver.runs.Load() != before {
			t.Fatal("the held call ran before anyone approved it")
		}
		if _, err := e.gw.DecideApprovalAs(context.Background(), "alice", nil, id, "approve", "looks fine"); err != nil {
			t.Fatalf("alice approving %s: %v", id, err)
		}
		out := runSDK(t, e.url, agentKey, step, step)
		for i := range 2 {
			if res := out.callResult(t, i); res.IsError || res.text() != "after review\n" {
				t.Fatalf("retry %d after the approval: %+v", i, res)
			}
		}
		if e.driver.runs.Load() != before+1 {
			t.Fatalf("the approved call ran %d times, want once", e.driver.runs.Load()-before)
		}
	})

	t.Run("an unknown tool is a JSON-RPC error and a wrong key cannot connect", func(t *testing.T) {
		out := runSDK(t, e.url, agentKey, sdkCall("echo.nope", nil, ""))
		if out.Steps[0].Error == nil || out.Steps[0].Error.Code != float64(-32602) {
			t.Fatalf("unknown tool: %+v", out.Steps[0])
		}
		folders := len(e.requestFolders())
		cmd := exec.Command("node", "drive.mjs")
		cmd.Dir = sdkDir
		cmd.Env = append(os.Environ(), "TOOLGATE_URL="+e.url, "TOOLGATE_KEY=not-a-key-0123456789")
		cmd.Stdin = strings.NewReader(`{"steps":[{"op":"list"}]}`)
		raw, err := cmd.Output()
		must(t, err)
		var bad sdkOutcome
		must(t, json.Unmarshal(raw, &bad))
		if bad.ConnectError == nil || !strings.Contains(bad.ConnectError.Message, "401") && !strings.Contains(bad.ConnectError.Message, "nauthorized") {
			t.Fatalf("a wrong key: %s", raw)
		}
		if len(e.requestFolders()) != folders {
			t.Fatal("a call with a wrong key was recorded")
		}
	})
}
