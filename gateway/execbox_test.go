package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// sandboxPolicy lets callers run code, and lets guest code read files but
// never reach the shell.
const sandboxPolicy = `
@id("run_code") @reason("callers may run sandboxed code")
permit (principal, action == Action::"RunTool", resource == Tool::"code.run");

@id("guest_reads") @reason("guest code may read workspace files")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.readFile")
when { context has parentRequestId };

@id("guest_writes") @reason("guest code may create workspace files")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.createFile")
when { context has parentRequestId };

@id("guest_may_wait") @reason("guest code may wait, and nothing else, in the shell")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.shell")
when { context.args has command && context.args.command == "sleep 30" };
`

type sandboxEnv struct {
	*env
	runner *execboxtest.Runner
}

// newSandboxEnv builds a gateway from configuration with an execbox
// driver in front of a scripted runner on the given transport.
func newSandboxEnv(t *testing.T, transport string, script execboxtest.Script) *sandboxEnv {
	t.Helper()
	return newSandboxEnvKeys(t, transport, script, "timeout: 2s")
}

// newSandboxEnvKeys is newSandboxEnv with the execbox driver's options
// given as YAML flow-mapping entries.
func newSandboxEnvKeys(t *testing.T, transport string, script execboxtest.Script, keys string) *sandboxEnv {
	t.Helper()
	dir := t.TempDir()
	var runner *execboxtest.Runner
	var driver string
	switch transport {
	case "ws":
		runner = execboxtest.NewWS(t, script)
		driver = "{type: execbox, url: \"" + runner.URL + "\", " + keys + "}"
	case "stdio":
		runner = execboxtest.NewStdio(t, script)
		driver = "{type: execbox, command: [" + quoteAll(runner.Command) + "], " + keys + "}"
	}
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(sandboxPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("for the guest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseConfig([]byte(`
instance: test-host
policies: {dir: ` + filepath.Join(dir, "policies") + `}
evidence: {url: "mem://", spool_dir: none, signing_key: {file: ` + filepath.Join(dir, "signing.key") + `, create: true}}
drivers:
  workspace: {type: workspace, root: ` + ws + `}
  sandbox: ` + driver + `
tools:
  code.run: {driver: sandbox, description: Run JavaScript in a sandbox}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	g, closer, err := Build(context.Background(), cfg, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })
	conn := serve(t, g)
	e := &env{t: t, store: g.store, gw: g, conn: conn, client: toolgatev1.NewToolGatewayClient(conn), workspace: ws}
	return &sandboxEnv{env: e, runner: runner}
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = `"` + strings.ReplaceAll(a, `"`, `\"`) + `"`
	}
	return strings.Join(q, ", ")
}

// toolResults returns the tool_result messages the runner received.
func (e *sandboxEnv) toolResults() map[string]execboxtest.Message {
	out := map[string]execboxtest.Message{}
	for _, session := range e.runner.Sessions() {
		for _, m := range session {
			if m.Type() == "tool_result" {
				out[m["callId"].(string)] = m
			}
		}
	}
	return out
}

func TestSandboxGuestCallsAreGated(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"ws", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			// The guest reads a file, is denied the shell, catches that
			// and carries on, and finishes with the file's content.
			e := newSandboxEnv(t, transport, execboxtest.Script{
				execboxtest.Started(),
				execboxtest.CallTool("c1", "workspace", "readFile", map[string]any{"path": "notes.txt"}),
				execboxtest.CallTool("c2", "workspace", "shell", map[string]any{"command": "touch pwned"}),
				execboxtest.AwaitResult("c1"),
				execboxtest.AwaitResult("c2"),
				execboxtest.Log("shell was denied, carrying on"),
				execboxtest.DoneFromResult("c1"),
			})
			resp := e.mustCall("sb-1", "code.run", map[string]any{"code": "const f = await workspace.readFile({path: 'notes.txt'}); f"})
			if !resp.GetOk() || resp.GetToolResult().GetStdout() != "shell was denied, carrying on\n" {
				t.Fatalf("sandbox call: %v", resp)
			}
			got := resp.GetToolResult().GetData().GetStructValue().GetFields()["stdout"].GetStringValue()
			if got != "for the guest\n" {
				t.Errorf("the guest's result carries %q, want the file", got)
			}
			executes := 0
			for _, session := range e.runner.Sessions() {
				for _, m := range session {
					if m.Type() == "execute" {
						executes++
					}
				}
			}
			if executes != 1 {
				t.Errorf("the runner received %d executes, want exactly one per session", executes)
			}
			results := e.toolResults()
			if results["c1"]["ok"] != true {
				t.Errorf("allowed nested read answered %v", results["c1"])
			}
			denied, _ := results["c2"]["error"].(map[string]any)
			if results["c2"]["ok"] != false || denied["code"] != "tool_error" || !strings.Contains(denied["message"].(string), "default_deny") {
				t.Errorf("denied nested shell answered %v", results["c2"])
			}
			if _, err := os.Stat(filepath.Join(e.workspace, "pwned")); err == nil {
				t.Fatal("guest code reached a tool the policy denies")
			}

			// The evidence tree: the parent, and each nested call under
			// its own derived id, decided as CallTool.
			for _, id := range []string{"sb-1", "sb-1:c1", "sb-1:c2"} {
				if got := e.artifactNames(id); !slices.Contains(got, "manifest.json") {
					t.Errorf("%s evidence = %v", id, got)
				}
			}
			if dec := decodeJSON(t, e.artifact("sb-1:c2", evidence.ArtifactPolicyDecision)); dec["action"] != "CallTool" || dec["decision"] != "deny" {
				t.Errorf("nested decision = %v", dec)
			}
			parent := decodeJSON(t, e.artifact("sb-1", evidence.ArtifactToolResult))
			ev, _ := parent["evidence"].(map[string]any)
			if nested, _ := ev["nested_calls"].([]any); len(nested) != 2 {
				t.Errorf("the parent's evidence lists %v, want both nested calls", ev["nested_calls"])
			}
			e.checkReplyIsStored("sb-1", resp)
		})
	}
}

func TestSandboxFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     execboxtest.Script
		wantCode   codes.Code
		wantExit   int32
		wantStderr string
	}{
		{"runner never answers", execboxtest.Script{execboxtest.Started(), execboxtest.Hang()}, codes.OK, 124, "timeout"},
		{"runner ignores cancel", execboxtest.Script{execboxtest.Started(), execboxtest.IgnoreCancel(20 * time.Second)}, codes.OK, 124, "timeout"},
		{"forged error code", execboxtest.Script{execboxtest.Started(), execboxtest.Fail("root_access_granted", "trust me")}, codes.OK, 5, "internal_error"},
		{"guest runtime error", execboxtest.Script{execboxtest.Started(), execboxtest.Fail("runtime_error", "out of memory")}, codes.OK, 1, "runtime_error: out of memory"},
		{"malformed messages are ignored", execboxtest.Script{execboxtest.Started(), execboxtest.Raw("{not json"), execboxtest.Done(7.0)}, codes.OK, 0, ""},
		{"crash mid-run", execboxtest.Script{execboxtest.Started(), execboxtest.Crash()}, codes.Unavailable, 0, ""},
		{"oversized message", execboxtest.Script{execboxtest.Started(), execboxtest.Oversized(8 << 20)}, codes.OK, 4, "serialization_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSandboxEnvKeys(t, "ws", tc.script, "timeout: 10s")
			// The timer cases want the host's timer to fire; the others must
			// not race it, however slowly a loaded machine moves 8 MiB.
			timeoutMs := 10000.0
			if tc.wantExit == 124 {
				timeoutMs = 500
			}
			start := time.Now()
			resp, err := e.call(context.Background(), "sbf-1", "code.run", map[string]any{"code": "1", "timeoutMs": timeoutMs})
			if time.Since(start) > 15*time.Second {
				t.Errorf("the call took %v; the host's own timer must end it", time.Since(start))
			}
			if tc.wantCode != codes.OK {
				wantCode(t, err, tc.wantCode, "driver sandbox")
				m, err := evidence.ParseManifest(e.artifact("sbf-1", evidence.ArtifactManifest))
				if err != nil || m.Outcome != evidence.OutcomeFailed {
					t.Errorf("manifest %+v, %v; want outcome failed", m, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tr := resp.GetToolResult()
			if tr.GetExitCode() != tc.wantExit || !strings.HasPrefix(tr.GetStderr(), tc.wantStderr) {
				t.Fatalf("exit %d stderr %q, want %d %q", tr.GetExitCode(), tr.GetStderr(), tc.wantExit, tc.wantStderr)
			}
			e.checkReplyIsStored("sbf-1", resp)
		})
	}
}

func TestSandboxArgsCannotRaiseLimits(t *testing.T) {
	t.Parallel()
	e := newSandboxEnv(t, "ws", execboxtest.Script{execboxtest.Started(), execboxtest.Done(nil)})
	resp := e.mustCall("sba-1", "code.run", map[string]any{"code": "1", "timeoutMs": 3600000.0})
	if resp.GetToolResult().GetExitCode() != 2 {
		t.Fatalf("a timeout above the configured one: %v, want exit 2", resp.GetToolResult())
	}
	if len(e.runner.Sessions()) != 0 {
		t.Error("the runner was contacted for invalid arguments")
	}
}

func TestSandboxCancelAndInputlessCalls(t *testing.T) {
	t.Parallel()
	t.Run("cancel while waiting on a tool", func(t *testing.T) {
		t.Parallel()
		e := newSandboxEnv(t, "ws", execboxtest.Script{
			execboxtest.Started(),
			execboxtest.CallTool("c1", "workspace", "shell", map[string]any{"command": "sleep 30"}),
			execboxtest.AwaitResult("c1"),
			execboxtest.Done("never reached"),
		})
		// The bound is two thirds of the nested command's 30 s, so that a
		// loaded machine's slow sandbox start does not count as waiting.
		start := time.Now()
		resp := e.mustCall("sbc-1", "code.run", map[string]any{"code": "await workspace.shell({command: 'sleep 30'})", "timeoutMs": 500.0})
		if tr := resp.GetToolResult(); tr.GetExitCode() != 124 || time.Since(start) > 20*time.Second {
			t.Fatalf("exit %d after %v (%s), want 124 well before the nested command ends", tr.GetExitCode(), time.Since(start), tr.GetStderr())
		}
		cancelled := false
		for _, session := range e.runner.Sessions() {
			for _, m := range session {
				cancelled = cancelled || m.Type() == "cancel"
			}
		}
		if !cancelled {
			t.Error("the runner was not sent cancel")
		}
		// The nested call still has its complete evidence.
		waitFor(t, func() bool {
			_, err := e.store.Get(context.Background(), evidence.Key("sbc-1:c1", evidence.ArtifactManifest))
			return err == nil
		})
	})
	t.Run("tool call without input", func(t *testing.T) {
		t.Parallel()
		e := newSandboxEnv(t, "stdio", execboxtest.Script{
			execboxtest.Started(),
			execboxtest.CallToolWithoutInput("c1", "workspace", "readFile"),
			execboxtest.AwaitResult("c1"),
			execboxtest.Done("carried on"),
		})
		resp := e.mustCall("sbi-1", "code.run", map[string]any{"code": "await workspace.readFile()"})
		if !resp.GetOk() || resp.GetToolResult().GetData().GetStringValue() != "carried on" {
			t.Fatalf("%v", resp)
		}
		failed, _ := e.toolResults()["c1"]["error"].(map[string]any)
		if failed["code"] != "validation_error" || !strings.Contains(failed["message"].(string), "exit code 2") {
			t.Errorf("a readFile without arguments answered %v", e.toolResults()["c1"])
		}
		if got := e.artifactNames("sbi-1:c1"); len(got) != 6 {
			t.Errorf("the input-less call went through the gate with evidence %v", got)
		}
	})
}

// TestSandboxNestedFailuresReachTheGuest: a nested call the gateway refuses
// as INVALID_ARGUMENT and a tool refusing its input both reach the guest as
// validation_error, and a tool that ran and failed hands the guest its exit
// code, stdout, stderr and data, as a successful one does.
func TestSandboxNestedFailuresReachTheGuest(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"ws", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			e := newSandboxEnv(t, transport, execboxtest.Script{
				execboxtest.Started(),
				execboxtest.CallTool("bad-path", "workspace", "readFile", map[string]any{"path": "conf/../etc/passwd"}),
				execboxtest.CallTool("no-path", "workspace", "readFile", map[string]any{}),
				execboxtest.CallTool("missing", "workspace", "readFile", map[string]any{"path": "missing.txt"}),
				execboxtest.AwaitResult("bad-path"),
				execboxtest.AwaitResult("no-path"),
				execboxtest.AwaitResult("missing"),
				execboxtest.Done("carried on"),
			})
			resp := e.mustCall("sbn-1", "code.run", map[string]any{"code": "..."})
			if !resp.GetOk() {
				t.Fatalf("sandbox call: %v", resp)
			}
			results := e.toolResults()
			errorOf := func(callID string) map[string]any {
				m := results[callID]
				failure, _ := m["error"].(map[string]any)
				if m["ok"] != false || failure == nil {
					t.Fatalf("%s answered %v, want a failure", callID, m)
				}
				return failure
			}
			if f := errorOf("bad-path"); f["code"] != "validation_error" || !strings.Contains(f["message"].(string), "args.path") {
				t.Errorf("a path the gateway refuses answered %v, want validation_error naming args.path", f)
			}
			for _, tc := range []struct {
				callID, code string
				exit         string
			}{
				{"no-path", "validation_error", "2"},
				{"missing", "tool_error", "1"},
			} {
				f := errorOf(tc.callID)
				result, _ := f["result"].(map[string]any)
				if f["code"] != tc.code || result == nil {
					t.Errorf("%s answered %v, want %s with the tool's result", tc.callID, f, tc.code)
					continue
				}
				data, _ := result["data"].(map[string]any)
				if fmt.Sprint(result["exit_code"]) != tc.exit || result["stderr"] == "" || data["success"] != false {
					t.Errorf("%s: the guest got the result %v, want exit_code %s, stderr and data", tc.callID, result, tc.exit)
				}
				if _, ok := result["stdout"]; !ok {
					t.Errorf("%s: the guest's result has no stdout: %v", tc.callID, result)
				}
				if !strings.Contains(f["message"].(string), "tool result: {") {
					t.Errorf("%s: the message %q does not carry the result for runners that pass on only the message", tc.callID, f["message"])
				}
			}
		})
	}
}

// TestSandboxBrokenRunKeepsItsNestedCalls: the runner crashes after guest
// code made three nested calls, one of which created a file. The caller is
// told UNAVAILABLE, and the parent's record still names every nested call:
// tool_result.json lists them with their outcomes, the failure manifest
// covers it, and the status points to each nested call's evidence.
func TestSandboxBrokenRunKeepsItsNestedCalls(t *testing.T) {
	t.Parallel()
	// Call ids as real runners make them: UUIDs.
	const (
		create = "0f8e3c52-6a1b-4c7e-9d2a-5b4f1e7a9c01"
		read   = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
		shell  = "9c8b7a6d-5e4f-4321-8fed-cba987654321"
	)
	for _, transport := range []string{"ws", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			e := newSandboxEnv(t, transport, execboxtest.Script{
				execboxtest.Started(),
				execboxtest.CallTool(create, "workspace", "createFile", map[string]any{"path": "made-by-guest.txt", "content": "side effect\n"}),
				execboxtest.CallTool(read, "workspace", "readFile", map[string]any{"path": "notes.txt"}),
				execboxtest.CallTool(shell, "workspace", "shell", map[string]any{"command": "id"}),
				execboxtest.AwaitResult(create),
				execboxtest.AwaitResult(read),
				execboxtest.AwaitResult(shell),
				execboxtest.Crash(),
			})
			_, callErr := e.call(context.Background(), "sbx-1", "code.run", map[string]any{"code": "..."})
			wantCode(t, callErr, codes.Unavailable, "ended before done")
			if _, statErr := os.Stat(filepath.Join(e.workspace, "made-by-guest.txt")); statErr != nil {
				t.Fatalf("the nested createFile did not run: %v", statErr)
			}

			want := map[string]struct {
				ok   bool
				code string
			}{
				"sbx-1:" + create: {true, ""},
				"sbx-1:" + read:   {true, ""},
				"sbx-1:" + shell:  {false, "tool_error"},
			}
			parent := decodeJSON(t, e.artifact("sbx-1", evidence.ArtifactToolResult))
			if _, hasExit := parent["exit_code"]; hasExit || !strings.Contains(fmt.Sprint(parent["error"]), "ended before done") {
				t.Errorf("tool_result.json of the broken run = %v, want no exit code and the break named", parent)
			}
			ev, _ := parent["evidence"].(map[string]any)
			if ev["execution_id"] != "sbx-1" || ev["ended_without_done"] != true {
				t.Errorf("the driver's evidence of the broken session = %v", parent["evidence"])
			}
			if driverListed, _ := ev["nested_calls"].([]any); len(driverListed) != 3 {
				t.Errorf("the driver's evidence lists %v, want the 3 nested calls", ev["nested_calls"])
			}
			listed, _ := parent["nested_calls"].([]any)
			if len(listed) != len(want) {
				t.Fatalf("the parent's record lists %v, want the 3 nested calls", parent["nested_calls"])
			}
			for _, l := range listed {
				n, _ := l.(map[string]any)
				id, _ := n["request_id"].(string)
				w, ok := want[id]
				if !ok || n["ok"] != w.ok || (n["code"] != nil) != (w.code != "") || w.code != "" && n["code"] != w.code || n["recorded"] != true {
					t.Errorf("nested call on record %v, want one of %v", n, want)
				}
			}
			m, err := evidence.ParseManifest(e.artifact("sbx-1", evidence.ArtifactManifest))
			if err != nil || m.Outcome != evidence.OutcomeFailed {
				t.Fatalf("manifest %+v, %v; want outcome failed", m, err)
			}
			covered := false
			for _, a := range m.Artifacts {
				covered = covered || a.Key == evidence.Key("sbx-1", evidence.ArtifactToolResult)
			}
			if !covered {
				t.Errorf("the failure manifest does not cover tool_result.json: %v", m.Artifacts)
			}
			rep, err := evidence.Verify(context.Background(), e.store, "sbx-1")
			if err != nil || len(rep.Problems) > 0 {
				t.Errorf("verify of the broken run: %s %v (%v)", rep.Status, rep.Problems, err)
			}
			var refs []string
			for _, d := range status.Convert(callErr).Details() {
				if f, ok := d.(*toolgatev1.RunToolFailure); ok {
					refs = f.GetEvidenceRefs()
				}
			}
			for id := range want {
				if !slices.Contains(refs, evidence.Key(id, evidence.ArtifactManifest)) {
					t.Errorf("the failure's evidence refs %v do not point to nested call %s", refs, id)
				}
			}
		})
	}
}

// TestSandboxOversizedResultIsAToolFailure: a guest returning 5 MiB, over
// the runner message limit, is the tool failing (exit 4, the limit named),
// with its tool_result on record, not an outage.
func TestSandboxOversizedResultIsAToolFailure(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"ws", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			e := newSandboxEnvKeys(t, transport, execboxtest.Script{
				execboxtest.Started(), execboxtest.Done(strings.Repeat("x", 5<<20)),
			}, "timeout: 10s")
			resp, err := e.call(context.Background(), "sbo-1", "code.run", map[string]any{"code": "'x'.repeat(5 << 20)"})
			if err != nil {
				t.Fatalf("an oversized guest result answered %v, want a tool failure", err)
			}
			tr := resp.GetToolResult()
			if resp.GetOk() || tr.GetExitCode() != 4 || !strings.HasPrefix(tr.GetStderr(), "serialization_error: ") || !strings.Contains(tr.GetStderr(), "4194304 bytes") {
				t.Fatalf("exit %d stderr %q, want 4 and serialization_error naming the limit", tr.GetExitCode(), tr.GetStderr())
			}
			if stored := decodeJSON(t, e.artifact("sbo-1", evidence.ArtifactToolResult)); stored["exit_code"] != float64(4) {
				t.Errorf("tool_result.json = %v, want exit_code 4", stored)
			}
			e.checkReplyIsStored("sbo-1", resp)
		})
	}
}
