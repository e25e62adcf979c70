package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

const readOnlyPolicy = `
@id("workspace_read_only")
@reason("reading changes nothing")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

func TestDeniedCallRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": readOnlyPolicy}})
	marker := filepath.Join(e.workspace, "ran")
	resp := e.mustCall("deny-1", "workspace.shell", map[string]any{"command": "touch " + marker})

	if resp.GetOk() || resp.GetToolResult() != nil {
		t.Fatalf("deny must be ok=false without tool_result, got %v", resp)
	}
	pc := resp.GetPolicyCheck()
	if pc.GetDecision() != "deny" || pc.GetRuleId() != "default_deny" || pc.GetReason() == "" {
		t.Errorf("policy_check = %v, want deny/default_deny with a reason", pc)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the denied shell command ran (stat %s: %v)", marker, err)
	}
	wantRefs := []string{
		"requests/deny-1/request.json", "requests/deny-1/policy_decision.json",
		"requests/deny-1/response.json", "requests/deny-1/manifest.json",
	}
	if !slices.Equal(resp.GetEvidenceRefs(), wantRefs) {
		t.Errorf("evidence_refs = %v, want %v", resp.GetEvidenceRefs(), wantRefs)
	}
	if got := e.artifactNames("deny-1"); !slices.Equal(got, []string{"manifest.json", "policy_decision.json", "request.json", "response.json"}) {
		t.Errorf("stored artifacts = %v", got)
	}
	if resp.GetEngineRef() != "toolgate/"+Version+"@test-host/workspace" {
		t.Errorf("engine_ref = %q", resp.GetEngineRef())
	}
	e.checkReplyIsStored("deny-1", resp)
}

func TestAllowedCallRunsAndRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": readOnlyPolicy}})
	if err := os.WriteFile(filepath.Join(e.workspace, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := e.client.RunTool(ctx, &toolgatev1.RunToolRequest{
		RequestId: "allow-1", ToolId: "workspace.readFile",
		Args: mustStruct(t, map[string]any{"path": "notes.txt"}),
		Ctx:  &toolgatev1.RunContext{RunId: "run-7", StepId: "step-3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetOk() || resp.GetToolResult().GetStdout() != "hello\n" || resp.GetToolResult().GetExitCode() != 0 {
		t.Fatalf("unexpected response %v", resp)
	}
	if resp.GetPolicyCheck().GetRuleId() != "workspace_read_only" || resp.GetPolicyCheck().GetReason() != "reading changes nothing" {
		t.Errorf("policy_check = %v", resp.GetPolicyCheck())
	}
	if resp.GetRunId() != "run-7" || resp.GetStepId() != "step-3" {
		t.Errorf("run_id/step_id not echoed: %v", resp)
	}
	if got := resp.GetToolResult().GetData().GetStructValue().GetFields()["size"].GetNumberValue(); got != 6 {
		t.Errorf("data.size = %v, want 6", got)
	}
	if got := e.artifactNames("allow-1"); len(got) != 6 {
		t.Errorf("stored artifacts = %v, want all six (request, decision, dispatch marker, result, response, manifest)", got)
	}
	e.checkReplyIsStored("allow-1", resp)

	dec := decodeJSON(t, e.artifact("allow-1", evidence.ArtifactPolicyDecision))
	if dec["decision"] != "allow" || dec["policy_ref"] != "policy.default" || !strings.HasPrefix(dec["policy_set_digest"].(string), "sha256:") {
		t.Errorf("policy_decision.json = %v", dec)
	}
	req := decodeJSON(t, e.artifact("allow-1", evidence.ArtifactRequest))
	if req["caller"] != AnonymousCaller || !strings.HasPrefix(req["canonical_request_hash"].(string), "sha256:") {
		t.Errorf("request.json = %v", req)
	}
}

func TestToolFailureIsNotOK(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	resp := e.mustCall("fail-1", "workspace.shell", map[string]any{"command": "echo oops >&2; exit 3"})
	if resp.GetOk() || resp.GetToolResult().GetExitCode() != 3 || resp.GetToolResult().GetStderr() != "oops\n" {
		t.Fatalf("response = %v, want ok=false exit 3 with stderr", resp)
	}
	e.checkReplyIsStored("fail-1", resp)
}

func TestUnknownToolIsDeniedWhateverThePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{
		"policy.default.cedar": `@id("everything") permit (principal, action, resource);`,
	}})
	resp := e.mustCall("unk-1", "nosuch.tool", nil)
	if resp.GetOk() || resp.GetPolicyCheck().GetRuleId() != RuleUnknownTool || resp.GetToolResult() != nil {
		t.Fatalf("response = %v, want deny %s", resp, RuleUnknownTool)
	}
	if !strings.HasPrefix(resp.GetEngineRef(), "toolgate/") {
		t.Errorf("engine_ref missing: %q", resp.GetEngineRef())
	}
	e.checkReplyIsStored("unk-1", resp)
}

func TestPolicyDecisions(t *testing.T) {
	t.Parallel()
	policies := map[string]string{
		"policy.default.cedar": permitWorkspace + `
@id("no_evil_urls")
@reason("evil")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path > 3 };
`,
		"strict.cedar": `@id("nothing") forbid (principal, action, resource);`,
	}
	e := newEnv(t, envOptions{policies: policies})
	tests := []struct {
		name, id, tool, policyRef, wantRule string
	}{
		// The forbid compares a string argument as a number: Cedar skips
		// it, and the permit alone would allow. The gateway must deny.
		{"erroring forbid denies", "pd-1", "workspace.readFile", "", "policy_error"},
		{"unknown policy_ref denies", "pd-2", "workspace.readFile", "no.such.set", "unknown_policy_ref"},
		{"named policy set is used", "pd-3", "workspace.createFile", "strict", "nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
				RequestId: tc.id, ToolId: tc.tool,
				Args: mustStruct(t, map[string]any{"path": "x.txt", "content": "x"}),
				Ctx:  &toolgatev1.RunContext{PolicyRef: tc.policyRef},
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOk() || resp.GetPolicyCheck().GetDecision() != "deny" || resp.GetPolicyCheck().GetRuleId() != tc.wantRule {
				t.Fatalf("policy_check = %v, want deny %s", resp.GetPolicyCheck(), tc.wantRule)
			}
			if _, err := os.Stat(filepath.Join(e.workspace, "x.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("denied createFile wrote its file")
			}
		})
	}
}

// TestArgsReachPolicy sends floats, nulls and huge integers through gRPC and
// checks the Cedar mapping the README documents, end to end.
func TestArgsReachPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": `
@id("typed_args")
permit (principal, action, resource == Tool::"workspace.readFile")
when {
  context.args has n && context.args.n == 3 &&
  context.args has f && context.args.f == decimal("1.5") &&
  context.args has big && context.args.big == "12345678901234567000" &&
  context.args has tags && context.args.tags.contains("b") &&
  context.args has nested && context.args.nested has deep && context.args.nested.deep == true &&
  !(context.args has gone)
};`}})
	args := map[string]any{
		"path": "missing.txt", "n": 3.0, "f": 1.5, "big": 12345678901234567890.0,
		"tags": []any{"a", "b", nil}, "nested": map[string]any{"deep": true}, "gone": nil,
	}
	resp := e.mustCall("args-1", "workspace.readFile", args)
	if resp.GetPolicyCheck().GetRuleId() != "typed_args" {
		t.Fatalf("policy_check = %v, want the typed_args permit to match", resp.GetPolicyCheck())
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	deep := map[string]any{"leaf": 1.0}
	for i := 0; i < 100; i++ {
		deep = map[string]any{"d": deep}
	}
	deepList := any("x")
	for i := 0; i < 40; i++ {
		deepList = []any{deepList}
	}
	tests := []struct {
		name      string
		req       *toolgatev1.RunToolRequest
		wantField string
	}{
		{"path traversal id", &toolgatev1.RunToolRequest{RequestId: "../../etc/passwd", ToolId: "workspace.readFile"}, "request_id"},
		{"slash id", &toolgatev1.RunToolRequest{RequestId: "a/b", ToolId: "workspace.readFile"}, "request_id"},
		{"empty id", &toolgatev1.RunToolRequest{ToolId: "workspace.readFile"}, "request_id"},
		{"dot id", &toolgatev1.RunToolRequest{RequestId: ".hidden", ToolId: "workspace.readFile"}, "request_id"},
		{"long id", &toolgatev1.RunToolRequest{RequestId: strings.Repeat("a", 129), ToolId: "workspace.readFile"}, "request_id"},
		{"empty tool", &toolgatev1.RunToolRequest{RequestId: "v-1"}, "tool_id"},
		{"tool with space", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace readFile"}, "tool_id"},
		{"tool with control", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "tool\x07"}, "tool_id"},
		{"long tool", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: strings.Repeat("t", 257)}, "tool_id"},
		{"2 MiB args", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace.readFile",
			Args: mustStruct(t, map[string]any{"blob": strings.Repeat("x", 2<<20)})}, "args"},
		{"100-deep args", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace.readFile",
			Args: mustStruct(t, deep)}, "args"},
		{"40-deep list", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace.readFile",
			Args: mustStruct(t, map[string]any{"l": deepList})}, "args"},
		{"NaN in args", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace.readFile",
			Args: structWithNaN()}, "args.x"},
		{"long run_id", &toolgatev1.RunToolRequest{RequestId: "v-1", ToolId: "workspace.readFile",
			Ctx: &toolgatev1.RunContext{RunId: strings.Repeat("r", 300)}}, "ctx.run_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.RunTool(context.Background(), tc.req)
			wantCode(t, err, codes.InvalidArgument, tc.wantField)
		})
	}
	if keys, _ := e.store.List(context.Background(), ""); len(keys) != 0 {
		t.Errorf("rejected requests left evidence: %v", keys)
	}
	if entries, _ := os.ReadDir(filepath.Dir(e.evidenceDir)); len(entries) != 3 {
		t.Errorf("something was written beside the evidence folder: %v", entries)
	}
}

func TestIdempotencyUnderConcurrentRetries(t *testing.T) {
	t.Parallel()
	d := &countingDriver{delay: 50 * time.Millisecond, out: drivers.Result{Stdout: "done"}}
	e := newEnv(t, envOptions{
		extra:    map[string]drivers.Driver{"count": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	const n = 64
	var wg sync.WaitGroup
	resps := make([]*toolgatev1.RunToolResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = e.call(context.Background(), "same-1", "count.run", map[string]any{"k": "v"})
		}()
	}
	wg.Wait()
	if got := d.runs.Load(); got != 1 {
		t.Fatalf("driver ran %d times, want exactly once", got)
	}
	var first *toolgatev1.RunToolResponse
	answered, aborted := 0, 0
	for i := range n {
		if errs[i] != nil {
			wantCode(t, errs[i], codes.Aborted, "in flight")
			aborted++
			continue
		}
		answered++
		if first == nil {
			first = resps[i]
		} else if !proto.Equal(first, resps[i]) {
			t.Fatalf("two different answers for one request_id:\n%v\n%v", first, resps[i])
		}
	}
	if answered == 0 {
		t.Fatal("no caller got the answer")
	}
	t.Logf("%d answered, %d aborted while in flight", answered, aborted)
	// Once finished, every retry is a replay of the same answer.
	replay, err := e.call(context.Background(), "same-1", "count.run", map[string]any{"k": "v"})
	if err != nil || !proto.Equal(replay, first) {
		t.Fatalf("replay = %v, %v; want the stored answer", replay, err)
	}
	if d.runs.Load() != 1 {
		t.Fatal("a replay ran the driver")
	}
	e.checkReplyIsStored("same-1", first)
}

func TestRequestIDReuse(t *testing.T) {
	t.Parallel()
	d := &countingDriver{out: drivers.Result{Stdout: "x"}}
	e := newEnv(t, envOptions{
		extra:    map[string]drivers.Driver{"count": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	e.mustCall("reuse-1", "count.run", map[string]any{"a": 1.0})
	_, err := e.call(context.Background(), "reuse-1", "count.run", map[string]any{"a": 2.0})
	wantCode(t, err, codes.AlreadyExists, "different request")
	_, err = e.call(context.Background(), "reuse-1", "workspace.readFile", map[string]any{"a": 1.0})
	wantCode(t, err, codes.AlreadyExists, "reuse-1")
	if d.runs.Load() != 1 {
		t.Errorf("driver ran %d times", d.runs.Load())
	}
}

func TestExecutorFailureIsUnavailableAndNeverRetried(t *testing.T) {
	t.Parallel()
	d := &countingDriver{err: errors.New("connection refused")}
	e := newEnv(t, envOptions{
		extra:    map[string]drivers.Driver{"down": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	_, err := e.call(context.Background(), "down-1", "down.run", nil)
	wantCode(t, err, codes.Unavailable, "connection refused")
	st := status.Convert(err)
	var refs []string
	for _, det := range st.Details() {
		if f, ok := det.(*toolgatev1.RunToolFailure); ok {
			refs = f.GetEvidenceRefs()
		}
	}
	if !slices.Contains(refs, "requests/down-1/policy_decision.json") {
		t.Errorf("status details carry refs %v, want the ones written", refs)
	}
	m, err := evidence.ParseManifest(e.artifact("down-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeFailed {
		t.Errorf("manifest = %+v, %v; want outcome failed", m, err)
	}
	_, err = e.call(context.Background(), "down-1", "down.run", nil)
	wantCode(t, err, codes.Aborted, "already failed")
	if d.runs.Load() != 1 {
		t.Errorf("driver ran %d times, want once", d.runs.Load())
	}
}

func TestReadOnlyEvidenceRunsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	makeReadOnly(t, e.evidenceDir)
	marker := filepath.Join(e.workspace, "ran")
	_, err := e.call(context.Background(), "ro-1", "workspace.shell", map[string]any{"command": "touch " + marker})
	wantCode(t, err, codes.Unavailable, "nothing was executed")
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tool ran although its evidence could not be written")
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	const key = "tg_live_5ecretKeyForTests"
	keys := []config.KeyConfig{
		{Caller: "alice", SHA256: sha256Hex(key)},
		{Caller: "ci", Env: "CI_KEY"},
	}
	e := newEnv(t, envOptions{keys: keys, getenv: func(name string) string {
		if name == "CI_KEY" {
			return "ci-key-from-env"
		}
		return ""
	}})
	tests := []struct {
		name, header, wantCaller string
		wantCode                 codes.Code
	}{
		{"no key", "", "", codes.Unauthenticated},
		{"wrong key", "Bearer nope", "", codes.Unauthenticated},
		{"not bearer", "Basic " + key, "", codes.Unauthenticated},
		{"digest key", "Bearer " + key, "alice", codes.OK},
		{"env key", "bearer ci-key-from-env", "ci", codes.OK},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.header != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.header)
			}
			id := "auth-" + string(rune('a'+i))
			_, err := e.call(ctx, id, "workspace.readFile", map[string]any{"path": "x"})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tc.wantCode)
			}
			if tc.wantCode != codes.OK {
				return
			}
			if got := decodeJSON(t, e.artifact(id, evidence.ArtifactRequest))["caller"]; got != tc.wantCaller {
				t.Errorf("caller = %v, want %s", got, tc.wantCaller)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(e.evidenceDir, "requests", "auth-d", "request.json")); err != nil || strings.Contains(string(b), key) {
		t.Errorf("the API key leaked into evidence (%v)", err)
	}
}

func TestRedactionInEveryArtifact(t *testing.T) {
	t.Parallel()
	const ghToken = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	const known = "known-secret-value-42"
	e := newEnv(t, envOptions{secrets: []string{known}})
	content := "token=" + ghToken + "\nalso " + known + "\n"
	if err := os.WriteFile(filepath.Join(e.workspace, "leak.txt"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := e.mustCall("red-1", "workspace.shell", map[string]any{
		"command": "cat leak.txt",
		"env":     map[string]any{"API_TOKEN": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"},
	})
	for _, name := range e.artifactNames("red-1") {
		b := string(e.artifact("red-1", name))
		for _, secret := range []string{ghToken, known, "sk-ant-api03"} {
			if strings.Contains(b, secret) {
				t.Errorf("%s contains a secret", name)
			}
		}
	}
	if out := resp.GetToolResult().GetStdout(); strings.Contains(out, ghToken) || !strings.Contains(out, "[REDACTED:") {
		t.Errorf("reply stdout not redacted: %q", out)
	}
	e.checkReplyIsStored("red-1", resp)
	m, err := evidence.ParseManifest(e.artifact("red-1", evidence.ArtifactManifest))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, r := range m.Redactions {
		found[r.Artifact+" "+r.Rule] = true
	}
	for _, want := range []string{
		"request.json caller-secret", "tool_result.json github-pat",
		"tool_result.json known-secret", "response.json github-pat",
	} {
		if !found[want] {
			t.Errorf("manifest redactions lack %q: %v", want, m.Redactions)
		}
	}
}

func TestWorkspaceFaultsThroughGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.workspace, "escape")); err != nil {
		t.Fatal(err)
	}
	t.Run("symlink out of the workspace", func(t *testing.T) {
		resp := e.mustCall("ws-1", "workspace.readFile", map[string]any{"path": "escape/secret.txt"})
		if resp.GetOk() || strings.Contains(resp.GetToolResult().GetStdout(), "outside") {
			t.Fatalf("read through an escaping symlink: %v", resp)
		}
	})
	t.Run("shell past its timeout", func(t *testing.T) {
		start := time.Now()
		resp := e.mustCall("ws-2", "workspace.shell", map[string]any{"command": "sleep 30", "timeout": 1000.0})
		if resp.GetToolResult().GetExitCode() != 124 {
			t.Fatalf("exit_code = %d, want 124", resp.GetToolResult().GetExitCode())
		}
		if !resp.GetToolResult().GetData().GetStructValue().GetFields()["timedOut"].GetBoolValue() {
			t.Errorf("data.timedOut not set: %v", resp.GetToolResult().GetData())
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("the timeout did not stop the command")
		}
	})
	t.Run("shell printing 50 MiB", func(t *testing.T) {
		resp := e.mustCall("ws-3", "workspace.shell", map[string]any{"command": "head -c 52428800 /dev/zero | tr '\\0' a"})
		out := resp.GetToolResult().GetStdout()
		if len(out) > 1<<20+200 || !strings.Contains(out, "truncated") {
			t.Fatalf("stdout is %d bytes; want it capped at 1 MiB with a truncation mark", len(out))
		}
		e.checkReplyIsStored("ws-3", resp)
	})
}

func TestEngineRef(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	resp := e.mustCall("eng-1", "workspace.readFile", map[string]any{"path": "none"})
	if want := "toolgate/" + Version + "@test-host/workspace"; resp.GetEngineRef() != want {
		t.Errorf("engine_ref = %q, want %q", resp.GetEngineRef(), want)
	}
}

// TestCallerGroupsReachPolicy: groups and roles from the auth
// configuration are principal attributes, so role-based rules work.
func TestCallerGroupsReachPolicy(t *testing.T) {
	t.Parallel()
	keys := []config.KeyConfig{
		{Caller: "alice", Env: "ALICE_KEY", Groups: []string{"ops"}},
		{Caller: "alice", Env: "ALICE_KEY2", Roles: []string{"oncall"}},
		{Caller: "bob", Env: "BOB_KEY", Groups: []string{"dev"}},
	}
	env := map[string]string{"ALICE_KEY": "alice-key-1", "ALICE_KEY2": "alice-key-2", "BOB_KEY": "bob-key-1"}
	e := newEnv(t, envOptions{keys: keys, getenv: func(n string) string { return env[n] }, policies: map[string]string{
		"policy.default.cedar": `@id("ops_shell") permit (principal, action, resource == Tool::"workspace.shell")
when { principal.groups.contains("ops") && principal.roles.contains("oncall") };`,
	}})
	tests := []struct{ name, key, wantRule string }{
		{"ops and oncall (from two keys)", "alice-key-1", "ops_shell"},
		{"same caller, other key", "alice-key-2", "ops_shell"},
		{"dev", "bob-key-1", "default_deny"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tc.key)
			resp, err := e.call(ctx, fmt.Sprintf("grp-%d", i), "workspace.shell", map[string]any{"command": "true"})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetPolicyCheck().GetRuleId() != tc.wantRule {
				t.Fatalf("rule = %s, want %s", resp.GetPolicyCheck().GetRuleId(), tc.wantRule)
			}
		})
	}
}

// missedResponseStore answers the next Get of response.json with "not
// found" although it is stored: what a retry sees when it looks for the
// response a moment before the request's writer stores it.
type missedResponseStore struct {
	evidence.Store
	miss atomic.Bool
}

func (s *missedResponseStore) Get(ctx context.Context, key string) ([]byte, error) {
	if strings.HasSuffix(key, "/"+evidence.ArtifactResponse) && s.miss.CompareAndSwap(true, false) {
		return nil, evidence.ErrNotExist
	}
	return s.Store.Get(ctx, key)
}

// A retry that misses response.json and then finds the manifest, which is
// written after it, gets the stored answer, not "already completed".
func TestRetryBetweenResponseAndManifestGetsTheAnswer(t *testing.T) {
	t.Parallel()
	store := &missedResponseStore{Store: evidence.NewMemoryStore()}
	d := &countingDriver{out: drivers.Result{Stdout: "done"}}
	e := newEnv(t, envOptions{store: store, extra: map[string]drivers.Driver{"count": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`}})
	first, err := e.call(context.Background(), "race-1", "count.run", map[string]any{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	store.miss.Store(true)
	again, err := e.call(context.Background(), "race-1", "count.run", map[string]any{"k": "v"})
	if err != nil || !proto.Equal(again, first) {
		t.Fatalf("retry = %v, %v; want the stored answer", again, err)
	}
	if store.miss.Load() {
		t.Fatal("the retry never looked for response.json")
	}
	if d.runs.Load() != 1 {
		t.Fatalf("driver ran %d times, want once", d.runs.Load())
	}
}
