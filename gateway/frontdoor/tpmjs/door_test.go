package tpmjsdoor

import (
	"context"
	"fmt"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/gateway"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// bearer is the header of caller "agent".
var bearer = map[string]string{"Authorization": "Bearer " + testKey}

// execBody is an /execute-tool body for a tool of the fake's package.
func execBody(name, params string) string {
	return fmt.Sprintf(`{"packageName":%q,"name":%q,"version":"1.2.3","params":%s,"env":{}}`, tpmjstest.Package, name, params)
}

// TestProtocolRoutes: the Level 1 and 2 routes answer as the protocol
// says, with its headers on every answer.
func TestProtocolRoutes(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code                     string // error.code, or "" for none
	}{
		{"health is open without a key", "GET", "/health", "", nil, 200, ""},
		{"health is served under /api too", "GET", "/api/health", "", nil, 200, ""},
		{"info needs no key either", "GET", "/info", "", nil, 200, ""},
		{"a CORS pre-flight is 200 without a body", "OPTIONS", "/execute-tool", "", map[string]string{"Origin": "https://app.example.com"}, 200, ""},
		{"execute without a key is the protocol's 401", "POST", "/execute-tool", execBody("echoTool", "{}"), nil, 401, "UNAUTHORIZED"},
		{"execute with a wrong key is 401", "POST", "/execute-tool", execBody("echoTool", "{}"), map[string]string{"Authorization": "Bearer nope"}, 401, "UNAUTHORIZED"},
		{"search without a key is 401", "GET", "/api/tools/search?q=echo", "", nil, 401, "UNAUTHORIZED"},
		{"a body that is not JSON is 400", "POST", "/execute-tool", "{nope", bearer, 400, "INVALID_REQUEST"},
		{"a body with trailing data is 400", "POST", "/execute-tool", execBody("echoTool", "{}") + " {}", bearer, 400, "INVALID_REQUEST"},
		{"a body without name is 400", "POST", "/execute-tool", `{"packageName":"x"}`, bearer, 400, "INVALID_REQUEST"},
		{"params that are not an object are 400", "POST", "/execute-tool", execBody("echoTool", "[1]"), bearer, 400, "INVALID_REQUEST"},
		{"env values that are not strings are 400", "POST", "/execute-tool", `{"packageName":"p","name":"n","env":{"A":1}}`, bearer, 400, "INVALID_REQUEST"},
		{"name and exportName that differ are 400", "POST", "/execute-tool", `{"packageName":"p","name":"a","exportName":"b"}`, bearer, 400, "INVALID_REQUEST"},
		{"a bad Idempotency-Key is 400", "POST", "/execute-tool", execBody("echoTool", "{}"), map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": "../etc"}, 400, "INVALID_REQUEST"},
		{"an unknown route is 404 in the protocol's shape", "GET", "/nope", "", nil, 404, "NOT_FOUND"},
		{"a GET of execute-tool is 405", "GET", "/execute-tool", "", bearer, 405, "METHOD_NOT_ALLOWED"},
		{"a POST of health is 405", "POST", "/health", "{}", nil, 405, "METHOD_NOT_ALLOWED"},
		{"a non-number limit is 400", "GET", "/api/tools/search?q=x&limit=ten", "", bearer, 400, "INVALID_REQUEST"},
		{"a query over 256 bytes is 400", "GET", "/api/tools/search?q=" + strings.Repeat("a", 257), "", bearer, 400, "INVALID_REQUEST"},
		{"a query with a control character is 400", "GET", "/api/tools/search?q=a%07b", "", bearer, 400, "INVALID_REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, tc.method, url+tc.path, tc.body, tc.header)
			if a.status != tc.status || a.errCode() != tc.code {
				t.Fatalf("got %d %q, want %d %q: %s", a.status, a.errCode(), tc.status, tc.code, a.raw)
			}
			if got := a.header.Get("X-TPMJS-Protocol-Version"); got != "1.0" {
				t.Errorf("X-TPMJS-Protocol-Version = %q", got)
			}
			if !strings.Contains(a.header.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
				a.header.Get("Access-Control-Allow-Methods") != "GET, POST, OPTIONS" {
				t.Errorf("CORS headers missing: %v", a.header)
			}
			if tc.status == 401 && strings.TrimSpace(a.raw) != unauthorizedBody {
				t.Errorf("401 body = %s, want the protocol's exactly", a.raw)
			}
			if tc.code != "" && tc.status != 401 {
				if _, ok := a.body["executionTimeMs"]; !ok {
					t.Errorf("no executionTimeMs: %s", a.raw)
				}
			}
		})
	}
	if e.executions() != 0 {
		t.Errorf("the executor got %d calls from refused requests", e.executions())
	}
	if got := e.requestFolders(); len(got) != 0 {
		t.Errorf("refused requests were recorded: %v", got)
	}
}

// TestHealthAnswersAtOnceWhileTheExecutorIsBlocked: /health reads cached
// state, and shows the drivers only to an authenticated caller.
func TestHealthAnswersAtOnceWhileTheExecutorIsBlocked(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.exec.SetHealthDelay(5 * time.Second)
	url := e.serve(nil)
	start := time.Now()
	open := do(t, "GET", url+"/health", "", nil)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("/health took %v with a blocked executor", took)
	}
	for k, want := range map[string]any{"status": "ok", "protocolVersion": "1.0", "implementationVersion": gateway.Version, "runtime": "toolgate"} {
		if open.body[k] != want {
			t.Errorf("%s = %v, want %v", k, open.body[k], want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(open.body["timestamp"])); err != nil {
		t.Errorf("timestamp: %v", err)
	}
	if _, shown := open.ext()["drivers"]; shown {
		t.Errorf("drivers shown without a key: %s", open.raw)
	}
	authed := do(t, "GET", url+"/health", "", bearer)
	drv, _ := authed.ext()["drivers"].(map[string]any)
	if _, ok := drv["tpmjs"]; !ok {
		t.Errorf("no tpmjs driver health for an authenticated caller: %s", authed.raw)
	}
}

// TestInfoAdvertisesCapabilities: /info has the protocol's fields.
func TestInfoAdvertisesCapabilities(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := do(t, "GET", e.serve(nil)+"/info", "", nil)
	caps, _ := a.body["capabilities"].(map[string]any)
	if a.body["protocolVersion"] != "1.0" || a.body["name"] != "Toolgate" || caps["isolation"] != "process" ||
		caps["maxRequestBodyBytes"] != float64(frontdoor.DefaultMaxBodyBytes) || caps["maxExecutionTimeMs"] != float64(120000) ||
		caps["supportsStreaming"] != false {
		t.Fatalf("info = %s", a.raw)
	}
}

// TestExecuteMapsCatalogRegistryAndCatalogPackage: each form of
// {packageName, name} reaches the tool id the package documentation names.
func TestExecuteMapsCatalogRegistryAndCatalogPackage(t *testing.T) {
	e := newTestEnv(t, envOptions{registry: true})
	plain := e.serve(nil)
	cfg := newConfig()
	cfg.CatalogPackage = "_catalog"
	withCatalog := e.serve(cfg)
	for i, tc := range []struct {
		name, url, body, wantTool string
		success                   bool
	}{
		{"a catalog TPMJS tool by package and export", plain, execBody("echoTool", `{"a":1}`), "hello", true},
		{"a registry id for a package the catalog does not have", plain,
			`{"packageName":"@toolgate/fake-tools","name":"sleepTool","params":{"ms":1}}`, "@toolgate/fake-tools::sleepTool", true},
		{"a catalog tool by id under catalog_package", withCatalog,
			`{"packageName":"_catalog","name":"workspace.readFile","params":{"path":"missing.txt"}}`, "workspace.readFile", false},
		{"catalog_package off: _catalog is just a registry id", plain,
			`{"packageName":"_catalog","name":"workspace.readFile","params":{}}`, "_catalog::workspace.readFile", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("map-%d", i)
			a := do(t, "POST", tc.url+"/execute-tool", tc.body, map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": id})
			if a.status != 200 || a.body["success"] != tc.success {
				t.Fatalf("got %d success=%v: %s", a.status, a.body["success"], a.raw)
			}
			req := e.requestJSON(id)
			if req["tool_id"] != tc.wantTool || req["front_door"] != "tpmjs" {
				t.Fatalf("request.json tool_id=%v front_door=%v, want %s and tpmjs", req["tool_id"], req["front_door"], tc.wantTool)
			}
		})
	}
}

// TestEmptyEnvIsOmittedAndEnvBecomesArgsEnv: the client's empty env adds
// nothing to the arguments; a given env is args._env, allowed only for the
// tool's caller_env, and kept out of the evidence.
func TestEmptyEnvIsOmittedAndEnvBecomesArgsEnv(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	h := func(id string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": id}
	}
	a := do(t, "POST", url+"/execute-tool", execBody("echoTool", `{"x":1}`), h("env-empty"))
	if a.body["success"] != true || strings.Contains(fmt.Sprint(e.requestJSON("env-empty")["args"]), "_env") {
		t.Fatalf("empty env: %s / args %v", a.raw, e.requestJSON("env-empty")["args"])
	}
	secret := "sk-live-abcdefghijklmnop0123"
	body := fmt.Sprintf(`{"packageName":%q,"name":"echoTool","params":{"x":1},"env":{"API_KEY":%q}}`, tpmjstest.Package, secret)
	a = do(t, "POST", url+"/execute-tool", body, h("env-given"))
	if a.body["success"] != true {
		t.Fatalf("env given: %s", a.raw)
	}
	reqs := e.exec.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, secret) {
		t.Fatalf("the executor did not get the caller's env: %s", last)
	}
	if raw := fmt.Sprint(e.requestJSON("env-given")); strings.Contains(raw, secret) {
		t.Fatalf("the caller's env value is in request.json: %s", raw)
	}
	body = fmt.Sprintf(`{"packageName":%q,"name":"echoTool","params":{},"env":{"OTHER":"v"}}`, tpmjstest.Package)
	a = do(t, "POST", url+"/execute-tool", body, h("env-other"))
	if a.status != 400 || a.errCode() != "INVALID_REQUEST" {
		t.Fatalf("an env variable outside caller_env: got %d %s", a.status, a.raw)
	}
}

// TestDenyIsPolicyDenied: a forbidden call is 200, success false,
// POLICY_DENIED naming the rule; the executor gets nothing.
func TestDenyIsPolicyDenied(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := do(t, "POST", e.serve(nil)+"/execute-tool", execBody("failTool", "{}"), bearer)
	msg, _ := a.body["error"].(map[string]any)["message"].(string)
	if a.status != 200 || a.body["success"] != false || a.errCode() != "POLICY_DENIED" || !strings.Contains(msg, "no_denied") {
		t.Fatalf("got %d %s", a.status, a.raw)
	}
	ext := a.ext()
	if ext["decision"] != "deny" || ext["rule_id"] != "no_denied" || ext["suggestion"] != "use echoTool instead" ||
		len(ext["evidence_refs"].([]any)) == 0 {
		t.Fatalf("extension = %v", ext)
	}
	if e.executions() != 0 {
		t.Fatalf("the executor got %d calls", e.executions())
	}
}

// TestUnknownToolIsToolNotFoundAndRecorded: without registry ids an
// unknown tool is decided unknown_tool and recorded, as over gRPC.
func TestUnknownToolIsToolNotFoundAndRecorded(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := do(t, "POST", e.serve(nil)+"/execute-tool", `{"packageName":"left-pad","name":"pad"}`,
		map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": "unknown-1"})
	if a.status != 200 || a.errCode() != "TOOL_NOT_FOUND" || a.ext()["rule_id"] != gateway.RuleUnknownTool {
		t.Fatalf("got %d %s", a.status, a.raw)
	}
	if e.requestJSON("unknown-1")["tool_id"] != "left-pad::pad" {
		t.Fatal("the unknown tool's request was not recorded")
	}
}

// TestPendingApprovalIsApprovalRequired: a call held for approval says so
// with the approval's id and nothing runs; once approved, the same request
// sent again with its Idempotency-Key runs.
func TestPendingApprovalIsApprovalRequired(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	h := map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": "held-1"}
	a := do(t, "POST", url+"/execute-tool", execBody("nullTool", "{}"), h)
	pa, _ := a.ext()["pending_approval"].(map[string]any)
	id, _ := pa["approval_id"].(string)
	if a.status != 200 || a.errCode() != "APPROVAL_REQUIRED" || !regexp.MustCompile(`^apr_`).MatchString(id) || pa["rule_id"] != "held_needs_ops" {
		t.Fatalf("got %d %s", a.status, a.raw)
	}
	if e.executions() != 0 {
		t.Fatal("a held call reached the executor")
	}
	if _, err := e.gw.DecideApprovalAs(context.Background(), "alice", nil, id, "approve", "looks fine"); err != nil {
		t.Fatal(err)
	}
	a = do(t, "POST", url+"/execute-tool", execBody("nullTool", "{}"), h)
	if a.status != 200 || a.body["success"] != true || e.executions() != 1 {
		t.Fatalf("after approval: %d %s, executions %d", a.status, a.raw, e.executions())
	}
}

// TestIdempotencyKeyReplays: the same key and body twice is one call, one
// request folder, the same output.
func TestIdempotencyKeyReplays(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	h := map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": "retry-1"}
	first := do(t, "POST", url+"/execute-tool", execBody("echoTool", `{"n":1}`), h)
	second := do(t, "POST", url+"/execute-tool", execBody("echoTool", `{"n":1}`), h)
	if first.body["success"] != true || fmt.Sprint(first.body["output"]) != fmt.Sprint(second.body["output"]) {
		t.Fatalf("first %s\nsecond %s", first.raw, second.raw)
	}
	if e.executions() != 1 || len(e.requestFolders()) != 1 {
		t.Fatalf("executions %d, folders %v; want 1 and 1", e.executions(), e.requestFolders())
	}
	if second.header.Get("Idempotency-Key") != "retry-1" {
		t.Fatalf("Idempotency-Key header = %q", second.header.Get("Idempotency-Key"))
	}
}

// TestFreshIDInHeader: without a key the door picks a fresh request id
// and returns it, so the client can retry with it.
func TestFreshIDInHeader(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	a := do(t, "POST", url+"/execute-tool", execBody("echoTool", "{}"), bearer)
	b := do(t, "POST", url+"/execute-tool", execBody("echoTool", "{}"), bearer)
	id := a.header.Get("Idempotency-Key")
	if !regexp.MustCompile(`^tpmjs-[a-z2-7]{26}$`).MatchString(id) || id == b.header.Get("Idempotency-Key") {
		t.Fatalf("ids %q and %q", id, b.header.Get("Idempotency-Key"))
	}
	if a.ext()["request_id"] != id || e.requestJSON(id)["request_id"] != id {
		t.Fatalf("the header's id is not the recorded one: %s", a.raw)
	}
}

// TestKeyReuseIs409: one key for two different calls is refused.
func TestKeyReuseIs409(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	h := map[string]string{"Authorization": "Bearer " + testKey, "Idempotency-Key": "reuse-1"}
	do(t, "POST", url+"/execute-tool", execBody("echoTool", `{"n":1}`), h)
	a := do(t, "POST", url+"/execute-tool", execBody("echoTool", `{"n":2}`), h)
	if a.status != 409 || a.errCode() != "IDEMPOTENCY_KEY_REUSED" || e.executions() != 1 {
		t.Fatalf("got %d %s, executions %d", a.status, a.raw, e.executions())
	}
}

// TestCaughtToolErrorStaysSuccess: a tool that caught its own failure is a
// success carrying its output, as the real executor answers; a tool that
// throws is TOOL_EXECUTION_ERROR with the tool's message.
func TestCaughtToolErrorStaysSuccess(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	a := do(t, "POST", url+"/execute-tool", execBody("caughtErrorTool", `{"message":"quota"}`), bearer)
	out, _ := a.body["output"].(map[string]any)
	if a.body["success"] != true || out["error"] != true || out["message"] != "quota" || a.ext()["downstream_code"] != "TOOL_ERROR" {
		t.Fatalf("caught error: %s", a.raw)
	}
	a = do(t, "POST", url+"/execute-tool", execBody("throwTool", `{}`), bearer)
	msg, _ := a.body["error"].(map[string]any)["message"].(string)
	if a.status != 200 || a.body["success"] != false || a.errCode() != "TOOL_EXECUTION_ERROR" || !strings.Contains(msg, "boom in the tool") {
		t.Fatalf("thrown error: %s", a.raw)
	}
}

// TestVersionMismatchIs400: a version the catalog does not serve is
// refused before anything is recorded.
func TestVersionMismatchIs400(t *testing.T) {
	e := newTestEnv(t, envOptions{registry: true})
	url := e.serve(nil)
	for _, tc := range []struct{ name, body string }{
		{"a catalog tool at another version", strings.Replace(execBody("echoTool", "{}"), "1.2.3", "9.9.9", 1)},
		{"a registry id at a pinned version", `{"packageName":"left-pad","name":"pad","version":"1.0.0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", url+"/execute-tool", tc.body, bearer)
			if a.status != 400 || a.errCode() != "INVALID_REQUEST" {
				t.Fatalf("got %d %s", a.status, a.raw)
			}
		})
	}
	for _, v := range []string{"", "latest", "1.2.3"} {
		a := do(t, "POST", url+"/execute-tool", strings.Replace(execBody("echoTool", "{}"), `"1.2.3"`, fmt.Sprintf("%q", v), 1), bearer)
		if a.body["success"] != true {
			t.Fatalf("version %q: %s", v, a.raw)
		}
	}
	if len(e.requestFolders()) != 3 {
		t.Fatalf("folders %v, want only the three good calls", e.requestFolders())
	}
}

// fakeRun is a gateway whose Run fails with a given error.
type fakeRun struct {
	Gateway
	err error
}

func (f fakeRun) Run(context.Context, string, gateway.Call) (*toolgatev1.RunToolResponse, error) {
	return nil, f.err
}

// TestStatusMapping: each RunTool error becomes its HTTP status and code,
// with the evidence refs a failure carries.
func TestStatusMapping(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	withRefs := func(c codes.Code) error {
		st := status.New(c, "store down")
		d, err := anypb.New(&toolgatev1.RunToolFailure{EvidenceRefs: []string{"requests/x/request.json"}})
		must(t, err)
		p := st.Proto()
		p.Details = append(p.Details, d)
		return status.FromProto(p).Err()
	}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"invalid argument is 400", status.Error(codes.InvalidArgument, "args: bad"), 400, "INVALID_REQUEST"},
		{"a reused request id is 409", status.Error(codes.AlreadyExists, "other call"), 409, "IDEMPOTENCY_KEY_REUSED"},
		{"a call in flight is 409", status.Error(codes.Aborted, "in flight"), 409, "REQUEST_IN_FLIGHT"},
		{"too many calls is 429", status.Error(codes.ResourceExhausted, "busy"), 429, "EXECUTOR_BUSY"},
		{"an unavailable store is 503 with its refs", withRefs(codes.Unavailable), 503, "EXECUTOR_UNAVAILABLE"},
		{"a deadline is 504", status.Error(codes.DeadlineExceeded, "late"), 504, "EXECUTION_TIMEOUT"},
		{"anything else is 500", status.Error(codes.Internal, "bug"), 500, "INTERNAL_ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := e.serveGateway(fakeRun{Gateway: e.gw, err: tc.err}, newConfig())
			a := do(t, "POST", url+"/execute-tool", execBody("echoTool", "{}"), bearer)
			if a.status != tc.status || a.errCode() != tc.code {
				t.Fatalf("got %d %s", a.status, a.raw)
			}
			if tc.status == 429 && a.header.Get("Retry-After") != "1" {
				t.Error("no Retry-After on 429")
			}
			if tc.status == 503 && fmt.Sprint(a.ext()["evidence_refs"]) != "[requests/x/request.json]" {
				t.Errorf("refs = %v", a.ext()["evidence_refs"])
			}
		})
	}
}

// TestSearchIsPolicyFiltered: the search lists the TPMJS tools policy
// could allow, in the registry's shape, never a forbidden one, and the
// workspace's only under catalog_package.
func TestSearchIsPolicyFiltered(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := do(t, "GET", e.serve(nil)+"/api/tools/search?q=&limit=50", "", bearer)
	names := searchNames(t, a)
	for _, want := range []string{"echoTool", "caughtErrorTool", "nullTool"} {
		if !strings.Contains(names, want) {
			t.Errorf("%s not listed: %s", want, names)
		}
	}
	for _, never := range []string{"failTool", "workspace."} {
		if strings.Contains(names, never) {
			t.Errorf("%s listed: %s", never, names)
		}
	}
	tool := a.body["results"].(map[string]any)["tools"].([]any)[0].(map[string]any)
	pkg := tool["package"].(map[string]any)
	if pkg["npmPackageName"] != tpmjstest.Package || pkg["npmVersion"] != "1.2.3" {
		t.Errorf("package = %v", pkg)
	}
	cfg := newConfig()
	cfg.CatalogPackage = "_catalog"
	names = searchNames(t, do(t, "GET", e.serve(cfg)+"/api/tools/search?q=workspace&limit=50", "", bearer))
	if names != "workspace.readFile" {
		t.Errorf("with catalog_package, the workspace tools listed are %q, want only the allowed readFile", names)
	}
	hello := do(t, "GET", e.serve(nil)+"/api/tools/search?q=echoTool", "", bearer)
	env := hello.body["results"].(map[string]any)["tools"].([]any)[0].(map[string]any)["package"].(map[string]any)["env"]
	if fmt.Sprint(env) != "[map[name:API_KEY required:false]]" {
		t.Errorf("env = %v, want the caller_env names only", env)
	}
}

// searchNames returns the listed tools' names, joined by commas.
func searchNames(t *testing.T, a answer) string {
	t.Helper()
	if a.status != 200 || a.body["success"] != true {
		t.Fatalf("search: %d %s", a.status, a.raw)
	}
	var names []string
	for _, raw := range a.body["results"].(map[string]any)["tools"].([]any) {
		names = append(names, raw.(map[string]any)["name"].(string))
	}
	return strings.Join(names, ",")
}

// manyTools is a gateway whose catalog has twelve packaged tools that all
// match "toolX", the one named exactly so with the last id, and whose
// policy allows them all.
type manyTools struct{ recordingGateway }

func (manyTools) Catalog() []gateway.CatalogEntry {
	var out []gateway.CatalogEntry
	for i := range 11 {
		out = append(out, gateway.CatalogEntry{ID: fmt.Sprintf("a%02d", i), Driver: "tpmjs", Target: fmt.Sprintf("toolX%02d", i), Package: "@p/many", Version: "1.0.0"})
	}
	return append(out, gateway.CatalogEntry{ID: "z", Driver: "tpmjs", Target: "toolX", Package: "@p/many", Version: "1.0.0"})
}

func (m manyTools) ListToolsAs(context.Context, string, *gateway.Identity, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	resp := &toolgatev1.ListToolsResponse{}
	for _, e := range m.Catalog() {
		resp.Tools = append(resp.Tools, &toolgatev1.ToolInfo{ToolId: e.ID, Driver: e.Driver})
	}
	return resp, nil
}

// TestExactNameFirstAmongTwelve: with twelve matches, the tool named
// exactly as the query comes first, inside the 10 the published client
// asks for, though its id sorts last.
func TestExactNameFirstAmongTwelve(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := do(t, "GET", e.serveGateway(&manyTools{}, newConfig())+"/api/tools/search?q=toolX&limit=10", "", bearer)
	names := strings.Split(searchNames(t, a), ",")
	if len(names) != 10 || names[0] != "toolX" || names[1] != "toolX00" {
		t.Fatalf("names %v", names)
	}
}

// TestBodyOverTheCapIs413: a body over max_body_bytes is refused and
// nothing runs.
func TestBodyOverTheCapIs413(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	cfg := newConfig()
	cfg.MaxBodyBytes = 1024
	body := execBody("echoTool", fmt.Sprintf(`{"s":%q}`, strings.Repeat("a", 2000)))
	a := do(t, "POST", e.serve(cfg)+"/execute-tool", body, bearer)
	if a.status != http.StatusRequestEntityTooLarge || e.executions() != 0 {
		t.Fatalf("got %d %s", a.status, a.raw)
	}
}

// TestConfigValidation: the door's keys are checked with their names.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"a catalog package npm could publish", func(c *Config) { c.CatalogPackage = "catalog" }, "catalog_package"},
		{"a catalog package with a slash", func(c *Config) { c.CatalogPackage = "_a/b" }, "catalog_package"},
		{"a listen address without a port", func(c *Config) { c.Listen = "localhost" }, "listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConfig()
			tc.edit(c)
			err := c.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one starting with %q", err, tc.want)
			}
		})
	}
	if err := newConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
