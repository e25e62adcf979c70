package execbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

// Shorthands for the fake runner's steps.
var (
	started      = execboxtest.Started
	callTool     = execboxtest.CallTool
	awaitResult  = execboxtest.AwaitResult
	done         = execboxtest.Done
	fail         = execboxtest.Fail
	raw          = execboxtest.Raw
	logLine      = execboxtest.Log
	fromResult   = execboxtest.DoneFromResult
	hang         = execboxtest.Hang
	sleep        = execboxtest.Sleep
	ignoreCancel = execboxtest.IgnoreCancel
)

// deepJSON is an array nested n levels deep.
func deepJSON(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestRunOutcomes checks how every way a runner can end maps onto the
// Result, on both transports.
func TestRunOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     execboxtest.Script
		cfg        Config
		wantExit   int
		wantStdout string
		wantStderr string // exact unless wantPrefix
		wantPrefix bool
		wantData   any
		wantCounts map[string]any
	}{
		{
			name:       "success with logs",
			script:     execboxtest.Script{started(), logLine("first"), logLine("second line"), done(map[string]any{"n": 1, "s": "x"})},
			wantStdout: "first\nsecond line\n",
			wantData:   map[string]any{"n": json.Number("1"), "s": "x"},
			wantCounts: map[string]any{"started": 1, "done": 1},
		},
		{
			name:       "big integer keeps its digits",
			script:     execboxtest.Script{started(), raw(`{"type":"done","id":"req-1","ok":true,"logs":[],"result":12345678901234567890123}`)},
			wantData:   json.Number("12345678901234567890123"),
			wantCounts: map[string]any{"started": 1, "done": 1},
		},
		{
			name:       "undefined result",
			script:     execboxtest.Script{started(), execboxtest.DoneUndefined()},
			wantCounts: map[string]any{"started": 1, "done": 1},
		},
		{
			name:       "no started message",
			script:     execboxtest.Script{done("fine")},
			wantData:   "fine",
			wantCounts: map[string]any{"done": 1},
		},
		{
			name:       "second done ignored",
			script:     execboxtest.Script{started(), done("first"), done("second")},
			wantData:   "first",
			wantCounts: map[string]any{"started": 1, "done": 1},
		},
		{
			name: "messages for another execution ignored",
			script: execboxtest.Script{
				raw(`{"type":"started","id":"someone-else"}`),
				raw(`{"type":"done","id":"someone-else","ok":true,"logs":["forged"],"result":"forged"}`),
				raw(`{"type":"done","ok":true,"logs":[],"result":"no id"}`),
				raw(`{"type":"done","id":7,"ok":true,"logs":[],"result":"number id"}`),
				raw(`{"type":"tool_call","id":"someone-else","callId":"c9","providerName":"tools","safeToolName":"echo"}`),
				started(), done("real"),
			},
			wantData:   "real",
			wantCounts: map[string]any{"started": 1, "done": 1, "wrong_id": 5},
		},
		{
			name: "rejection of a second execute ignored",
			script: execboxtest.Script{started(),
				raw(`{"type":"done","id":"exec-2","ok":false,"durationMs":0,"logs":[],"error":{"code":"internal_error","message":"an execution is already active"}}`),
				done(true)},
			wantData:   true,
			wantCounts: map[string]any{"started": 1, "done": 1, "wrong_id": 1},
		},
		{
			name: "malformed and unknown messages ignored",
			script: execboxtest.Script{started(),
				raw(`not json at all`), raw(`[1,2,3]`), raw(`{"type":42}`), raw(`{"id":"req-1"}`),
				raw(`{"type":"tool_call","providerName":"tools","safeToolName":"echo"}`),
				raw(`{"type":"progress","id":"req-1","percent":50}`),
				raw(`{"type":"tool_result","callId":"x","ok":true,"result":1}`),
				done("survived")},
			wantData:   "survived",
			wantCounts: map[string]any{"started": 1, "done": 1, "malformed": 5, "unknown_type": 2},
		},
		{
			name:       "message of exactly the size limit accepted",
			cfg:        Config{MaxMessageBytes: 2048},
			script:     execboxtest.Script{started(), execboxtest.Oversized(2048), done(1)},
			wantData:   json.Number("1"),
			wantCounts: map[string]any{"started": 1, "done": 1, "unknown_type": 1},
		},
		{
			name:       "logs limited by the host too",
			cfg:        Config{MaxLogLines: 3, MaxLogChars: 8},
			script:     execboxtest.Script{started(), logLine("abc"), logLine("defg"), logLine("hijk"), logLine("never"), done(nil)},
			wantStdout: "abc\ndefg\nh\n",
			wantCounts: map[string]any{"started": 1, "done": 1},
		},
		{
			name:       "non-string log entries kept as JSON",
			script:     execboxtest.Script{raw(`{"type":"done","id":"req-1","ok":true,"logs":["a",{"b":1},null,3],"result":null}`)},
			wantStdout: "a\n{\"b\":1}\nnull\n3\n",
			wantCounts: map[string]any{"done": 1},
		},
		{name: "timeout", script: execboxtest.Script{started(), fail("timeout", "Execution timed out")},
			wantExit: 124, wantStderr: "timeout: Execution timed out"},
		{name: "memory limit", script: execboxtest.Script{started(), fail("memory_limit", "Memory limit exceeded")},
			wantExit: 137, wantStderr: "memory_limit: Memory limit exceeded"},
		{name: "out of memory stays a runtime error", script: execboxtest.Script{started(), fail("runtime_error", "out of memory")},
			wantExit: 1, wantStderr: "runtime_error: out of memory"},
		{name: "validation error", script: execboxtest.Script{started(), fail("validation_error", "Invalid input for tool echo")},
			wantExit: 2, wantStderr: "validation_error: Invalid input for tool echo"},
		{name: "tool error", script: execboxtest.Script{started(), fail("tool_error", "tool failed")},
			wantExit: 3, wantStderr: "tool_error: tool failed"},
		{name: "serialization error", script: execboxtest.Script{started(), fail("serialization_error", "BigInt")},
			wantExit: 4, wantStderr: "serialization_error: BigInt"},
		{name: "internal error", script: execboxtest.Script{started(), fail("internal_error", "boom")},
			wantExit: 5, wantStderr: "internal_error: boom"},
		{name: "forged error code", script: execboxtest.Script{started(), fail("admin_override", "trust me")},
			wantExit: 5, wantStderr: `internal_error: trust me (runner sent the unknown error code "admin_override")`},
		{name: "failure with logs", script: execboxtest.Script{started(), logLine("before"), fail("runtime_error", "ReferenceError: x is not defined")},
			wantExit: 1, wantStdout: "before\n", wantStderr: "runtime_error: ReferenceError: x is not defined"},
		{name: "control characters removed from messages", script: execboxtest.Script{fail("runtime_error", "bad\x1b[31m\x00 news\nline two")},
			wantExit: 1, wantStderr: "runtime_error: bad[31m news\nline two"},
		{name: "failure without error", script: execboxtest.Script{raw(`{"type":"done","id":"req-1","ok":false,"logs":[]}`)},
			wantExit: 5, wantStderr: "internal_error: runner reported a failure without an error"},
		{name: "done without ok", script: execboxtest.Script{raw(`{"type":"done","id":"req-1","logs":[],"result":1}`)},
			wantExit: 5, wantStderr: `internal_error: runner sent a done without a boolean "ok"`},
		{name: "result nested too deep", script: execboxtest.Script{raw(`{"type":"done","id":"req-1","ok":true,"logs":[],"result":` + deepJSON(65) + `}`)},
			wantExit: 4, wantStderr: "serialization_error: result of the execution is not a plain JSON value: nested deeper than 64 levels"},
		{name: "result at the depth limit", script: execboxtest.Script{raw(`{"type":"done","id":"req-1","ok":true,"logs":[],"result":[[[]]]}`)},
			wantData: []any{[]any{[]any{}}}},
		{name: "result with a non-finite number", script: execboxtest.Script{raw(`{"type":"done","id":"req-1","ok":true,"logs":[],"result":{"x":1e400}}`)},
			wantExit: 4, wantStderr: "serialization_error: result of the execution is not a plain JSON value: number 1e400 is not finite"},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				d, r := tr.start(t, tc.script, tc.cfg)
				res, err := d.Run(runCtx(t), newCall(newTools(), nil))
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.ExitCode != tc.wantExit || res.Stdout != tc.wantStdout || res.Stderr != tc.wantStderr {
					t.Errorf("Run = exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q",
						res.ExitCode, res.Stdout, res.Stderr, tc.wantExit, tc.wantStdout, tc.wantStderr)
				}
				if !reflect.DeepEqual(res.Data, tc.wantData) {
					t.Errorf("Data = %#v, want %#v", res.Data, tc.wantData)
				}
				if tc.wantCounts != nil && !reflect.DeepEqual(res.Evidence["runner_messages"], tc.wantCounts) {
					t.Errorf("evidence runner_messages = %v, want %v", res.Evidence["runner_messages"], tc.wantCounts)
				}
				if n := len(ofType(onlySession(t, r), "execute")); n != 1 {
					t.Errorf("runner received %d executes, want exactly 1", n)
				}
			})
		}
	}
}

// TestRunExecuteMessage checks what the runner receives: the id, the code,
// the options (always present, or a real runner never answers) and one
// provider manifest per namespace.
func TestRunExecuteMessage(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			d, r := tr.start(t, execboxtest.Script{started(), done(nil)},
				Config{Timeout: 10 * time.Second, MemoryLimitBytes: 32 << 20, MaxLogLines: 50, MaxLogChars: 500})
			res, err := d.Run(runCtx(t), newCall(newTools(), map[string]any{"code": "return await github.issues_list({})", "timeoutMs": json.Number("2500")}))
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			exec := onlySession(t, r)[0]
			want := execboxtest.Message{
				"type": "execute",
				"id":   execID,
				"code": "return await github.issues_list({})",
				"options": map[string]any{
					"timeoutMs": json.Number("2500"), "memoryLimitBytes": json.Number("33554432"),
					"maxLogLines": json.Number("50"), "maxLogChars": json.Number("500"),
				},
				"providers": []any{
					map[string]any{
						"name": "github",
						"tools": map[string]any{"issues_list": map[string]any{
							"safeName": "issues_list", "originalName": "github.issues.list", "description": "List issues"}},
						"types": "declare namespace github {\n  /** github.issues.list: List issues */\n  function issues_list(input?: unknown): Promise<unknown>;\n}\n",
					},
					map[string]any{
						"name": "search",
						"tools": map[string]any{"web": map[string]any{
							"safeName": "web", "originalName": "search.web", "description": "Search the web"}},
						"types": "declare namespace search {\n  /** search.web: Search the web */\n  function web(input?: unknown): Promise<unknown>;\n}\n",
					},
					map[string]any{
						"name": "tools",
						"tools": map[string]any{"echo": map[string]any{
							"safeName": "echo", "originalName": "echo", "description": "Echo the input"}},
						"types": "declare namespace tools {\n  /** echo: Echo the input */\n  function echo(input?: unknown): Promise<unknown>;\n}\n",
					},
				},
			}
			if !reflect.DeepEqual(exec, want) {
				t.Errorf("execute =\n%v\nwant\n%v", exec, want)
			}
			wantTools := []any{
				map[string]any{"tool_id": "echo", "provider": "tools", "safe_name": "echo"},
				map[string]any{"tool_id": "github.issues.list", "provider": "github", "safe_name": "issues_list"},
				map[string]any{"tool_id": "search.web", "provider": "search", "safe_name": "web"},
			}
			if !reflect.DeepEqual(res.Evidence["tools"], wantTools) {
				t.Errorf("evidence tools = %v, want %v", res.Evidence["tools"], wantTools)
			}
			if res.Evidence["execution_id"] != execID || res.Evidence["transport"] != tr.name || res.Evidence["timeout_ms"] != int64(2500) {
				t.Errorf("evidence = %v", res.Evidence)
			}
		})
	}
}

// TestRunExecutionIDWithoutRequestID checks that a call without a usable
// request id still gets an execution id, a fresh one each time.
func TestRunExecutionIDWithoutRequestID(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ids []string
	url := execboxtest.ServeWS(t, func(s *execboxtest.Session) {
		id, _ := s.Execute()["id"].(string)
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		execboxtest.Script{done(id)}.Play(s)
	})
	d := newDriver(t, Config{URL: url})
	for _, requestID := range []string{"", strings.Repeat("r", maxExecutionID+1)} {
		call := newCall(nil, nil)
		call.RequestID = requestID
		res, err := d.Run(runCtx(t), call)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		if id, _ := res.Data.(string); !strings.HasPrefix(id, "exec-") || len(id) < 20 {
			t.Errorf("request id %.10q: execution id %q, want a random exec- id", requestID, id)
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("two calls got the same execution id %q", ids[0])
	}
}

// TestRunToolCalls checks nested calls on both transports: what the
// ToolCaller receives, what the guest is told and what is put on record.
func TestRunToolCalls(t *testing.T) {
	t.Parallel()
	deny := func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
		return drivers.NestedResult{RequestID: execID + ":" + callID, Code: "tool_error", Message: "tool " + toolID + " denied by policy"}
	}
	tests := []struct {
		name      string
		script    execboxtest.Script
		args      map[string]any
		handle    func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult
		wantExit  int
		wantData  any
		wantErr   string
		wantCalls []toolCall
		// wantResults are the tool_results the runner received, by callId.
		wantResults map[string]execboxtest.Message
		wantNested  []any
	}{
		{
			name:      "result flows back to the guest",
			script:    execboxtest.Script{started(), callTool("c1", "github", "issues_list", map[string]any{"q": 1}), fromResult("c1")},
			wantData:  map[string]any{"echo": map[string]any{"q": json.Number("1")}},
			wantCalls: []toolCall{{"c1", "github.issues.list", map[string]any{"q": json.Number("1")}}},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": true,
				"result": map[string]any{"echo": map[string]any{"q": json.Number("1")}}}},
			wantNested: []any{map[string]any{"call_id": "c1", "tool_id": "github.issues.list", "request_id": "req-1:c1",
				"provider": "github", "safe_name": "issues_list", "ok": true}},
		},
		{
			name:      "tool call without input",
			script:    execboxtest.Script{started(), execboxtest.CallToolWithoutInput("c1", "tools", "echo"), fromResult("c1")},
			wantData:  map[string]any{"echo": nil},
			wantCalls: []toolCall{{"c1", "echo", nil}},
		},
		{
			name:   "nil result is sent as null",
			script: execboxtest.Script{started(), callTool("c1", "tools", "echo", "x"), awaitResult("c1"), done("after")},
			handle: func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
				return drivers.NestedResult{RequestID: "n1", OK: true}
			},
			wantData:    "after",
			wantCalls:   []toolCall{{"c1", "echo", "x"}},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": true, "result": nil}},
		},
		{
			name:      "denied call caught by the guest",
			script:    execboxtest.Script{started(), callTool("c1", "search", "web", "q"), awaitResult("c1"), logLine("caught"), done("carried on")},
			handle:    deny,
			wantData:  "carried on",
			wantCalls: []toolCall{{"c1", "search.web", "q"}},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "tool_error", "message": "tool search.web denied by policy"}}},
			wantNested: []any{map[string]any{"call_id": "c1", "tool_id": "search.web", "request_id": "req-1:c1",
				"provider": "search", "safe_name": "web", "ok": false, "code": "tool_error"}},
		},
		{
			name:      "denied call not caught",
			script:    execboxtest.Script{started(), callTool("c1", "search", "web", "q"), fromResult("c1")},
			handle:    deny,
			wantExit:  3,
			wantErr:   "tool_error: tool search.web denied by policy",
			wantCalls: []toolCall{{"c1", "search.web", "q"}},
		},
		{
			name:   "unknown code from the tool caller",
			script: execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1"), done(nil)},
			handle: func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
				return drivers.NestedResult{Code: "quota_exceeded"}
			},
			wantCalls: []toolCall{{"c1", "echo", nil}},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "internal_error", "message": "tool call failed"}}},
		},
		{
			name:   "result that is not JSON",
			script: execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1"), done(nil)},
			handle: func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
				return drivers.NestedResult{OK: true, Result: map[string]any{"f": func() {}}}
			},
			wantCalls: []toolCall{{"c1", "echo", nil}},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "serialization_error", "message": "result of tool echo is not JSON: json: unsupported type: func()"}}},
		},
		{
			name:   "unknown tool",
			script: execboxtest.Script{started(), callTool("c1", "github", "delete_repo", nil), awaitResult("c1"), done(nil)},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "internal_error", "message": "unknown tool github.delete_repo"}}},
			wantNested: []any{map[string]any{"call_id": "c1", "tool_id": "", "request_id": "",
				"provider": "github", "safe_name": "delete_repo", "ok": false, "code": "internal_error"}},
		},
		{
			name:   "tool outside the requested providers",
			args:   map[string]any{"providers": []any{"github"}},
			script: execboxtest.Script{started(), callTool("c1", "search", "web", nil), awaitResult("c1"), done(nil)},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "internal_error", "message": "unknown tool search.web"}}},
		},
		{
			name: "input nested too deep",
			script: execboxtest.Script{started(),
				raw(`{"type":"tool_call","callId":"c1","providerName":"tools","safeToolName":"echo","input":` + deepJSON(70) + `}`),
				awaitResult("c1"), done(nil)},
			wantResults: map[string]execboxtest.Message{"c1": {"type": "tool_result", "callId": "c1", "ok": false,
				"error": map[string]any{"code": "serialization_error", "message": "input for tool echo is not a plain JSON value: nested deeper than 64 levels"}}},
		},
		{
			name: "duplicate callId served once",
			script: execboxtest.Script{started(), callTool("c1", "tools", "echo", "first"), callTool("c1", "tools", "echo", "again"),
				awaitResult("c1"), sleep(50 * time.Millisecond), fromResult("c1")},
			wantData:  map[string]any{"echo": "first"},
			wantCalls: []toolCall{{"c1", "echo", "first"}},
		},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				tools := newTools()
				tools.handle = tc.handle
				d, r := tr.start(t, tc.script, Config{})
				res, err := d.Run(runCtx(t), newCall(tools, tc.args))
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.ExitCode != tc.wantExit || res.Stderr != tc.wantErr || !reflect.DeepEqual(res.Data, tc.wantData) {
					t.Errorf("Run = exit %d, stderr %q, data %#v; want exit %d, stderr %q, data %#v",
						res.ExitCode, res.Stderr, res.Data, tc.wantExit, tc.wantErr, tc.wantData)
				}
				if got := tools.Calls(); !reflect.DeepEqual(got, tc.wantCalls) {
					t.Errorf("tool caller got %v, want %v", got, tc.wantCalls)
				}
				results := ofType(onlySession(t, r), "tool_result")
				byID := map[string]execboxtest.Message{}
				for _, m := range results {
					id := m["callId"].(string)
					if _, dup := byID[id]; dup {
						t.Errorf("runner received two tool_results for %s", id)
					}
					byID[id] = m
				}
				for id, want := range tc.wantResults {
					if !reflect.DeepEqual(byID[id], want) {
						t.Errorf("tool_result %s = %v, want %v", id, byID[id], want)
					}
				}
				if tc.wantNested != nil && !reflect.DeepEqual(res.Evidence["nested_calls"], tc.wantNested) {
					t.Errorf("evidence nested_calls = %v, want %v", res.Evidence["nested_calls"], tc.wantNested)
				}
			})
		}
	}
}

// TestRunParallelToolCalls checks that tool calls are served concurrently:
// each call waits until both are in flight, which never happens if the
// host serves one at a time.
func TestRunParallelToolCalls(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			var mu sync.Mutex
			inFlight := 0
			both := make(chan struct{})
			tools := newTools()
			tools.handle = func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
				mu.Lock()
				inFlight++
				if inFlight == 2 {
					close(both)
				}
				mu.Unlock()
				select {
				case <-both:
					return drivers.NestedResult{OK: true, Result: callID}
				case <-time.After(5 * time.Second):
					return drivers.NestedResult{Code: "tool_error", Message: "calls were not concurrent"}
				}
			}
			d, _ := tr.start(t, execboxtest.Script{started(),
				callTool("a", "tools", "echo", 1), callTool("b", "search", "web", 2),
				awaitResult("b"), awaitResult("a"), fromResult("a")}, Config{})
			res, err := d.Run(runCtx(t), newCall(tools, nil))
			if err != nil || res.ExitCode != 0 || res.Data != "a" {
				t.Fatalf("Run = %+v, %v; want data \"a\"", res, err)
			}
			if n := len(tools.Calls()); n != 2 {
				t.Errorf("tool caller got %d calls, want 2", n)
			}
		})
	}
}

// TestRunTimeouts checks the host's own time limit: cancel at timeoutMs
// plus a grace, then cut the runner off after CancelGrace.
func TestRunTimeouts(t *testing.T) {
	t.Parallel()
	// The grace is long enough for a stdio runner on a loaded machine to
	// read the cancel and answer it, and short against the 3 s bound below.
	const grace = 500 * time.Millisecond
	blockUntilCancelled := func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
		<-ctx.Done()
		return drivers.NestedResult{Code: "internal_error", Message: ctx.Err().Error()}
	}
	tests := []struct {
		name       string
		script     execboxtest.Script
		handle     func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult
		wantStderr string
		wantCalls  int
	}{
		{
			name:       "cancel while waiting on a tool",
			script:     execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1"), done("unreachable")},
			handle:     blockUntilCancelled,
			wantStderr: "timeout: Execution timed out",
			wantCalls:  1,
		},
		{
			name:       "runner that never answers",
			script:     execboxtest.Script{started(), hang()},
			wantStderr: "timeout: execution exceeded its time limit of 200 ms; the runner did not stop within 500ms of cancel and was cut off",
		},
		{
			name:       "runner that ignores cancel",
			script:     execboxtest.Script{started(), ignoreCancel(10 * time.Second), done("too late")},
			wantStderr: "timeout: execution exceeded its time limit of 200 ms; the runner did not stop within 500ms of cancel and was cut off",
		},
		{
			name:       "runner that reports its own timeout",
			script:     execboxtest.Script{started(), sleep(10 * time.Second), done("too late")},
			wantStderr: "timeout: Execution timed out",
		},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				tools := newTools()
				tools.handle = tc.handle
				d, r := tr.start(t, tc.script, Config{CancelGrace: grace})
				begin := time.Now()
				res, err := d.Run(runCtx(t), newCall(tools, map[string]any{"timeoutMs": 200}))
				elapsed := time.Since(begin)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.ExitCode != 124 || res.Stderr != tc.wantStderr {
					t.Errorf("Run = exit %d, stderr %q; want 124, %q", res.ExitCode, res.Stderr, tc.wantStderr)
				}
				// The scripts hold out for 10 s.
				if elapsed < 300*time.Millisecond || elapsed > 7*time.Second {
					t.Errorf("Run took %v, want the time limit, the host's grace and at most the cancel grace", elapsed)
				}
				if res.Evidence["cancelled"] != "timeout" {
					t.Errorf("evidence cancelled = %v, want timeout", res.Evidence["cancelled"])
				}
				msgs := onlySession(t, r)
				cancels := ofType(msgs, "cancel")
				if len(cancels) != 1 || cancels[0]["id"] != execID {
					t.Errorf("runner received cancels %v, want one for %s", cancels, execID)
				}
				if got := len(tools.Calls()); got != tc.wantCalls {
					t.Errorf("tool caller got %d calls, want %d", got, tc.wantCalls)
				}
			})
		}
	}
}

// TestRunToolCallAfterCancel checks that once the host cancelled, a tool
// call is answered with a timeout without reaching the ToolCaller, and that
// a runner finishing within the grace still ends in a timeout.
func TestRunToolCallAfterCancel(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			tools := newTools()
			d, r := tr.start(t, execboxtest.Script{started(), logLine("working"),
				ignoreCancel(600 * time.Millisecond), callTool("late", "tools", "echo", nil),
				ignoreCancel(50 * time.Millisecond), done("finished anyway")}, Config{CancelGrace: 2 * time.Second})
			res, err := d.Run(runCtx(t), newCall(tools, map[string]any{"timeoutMs": 100}))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := "timeout: execution exceeded its time limit of 100 ms; the runner finished after cancel"
			if res.ExitCode != 124 || res.Stderr != want || res.Stdout != "working\n" || res.Data != nil {
				t.Errorf("Run = %+v; want exit 124, stderr %q and the runner's logs", res, want)
			}
			if calls := tools.Calls(); len(calls) != 0 {
				t.Errorf("tool caller got %v after cancel, want nothing", calls)
			}
			results := ofType(onlySession(t, r), "tool_result")
			wantResult := execboxtest.Message{"type": "tool_result", "callId": "late", "ok": false,
				"error": map[string]any{"code": "timeout", "message": "execution cancelled"}}
			if len(results) != 1 || !reflect.DeepEqual(results[0], wantResult) {
				t.Errorf("tool_results = %v, want %v", results, wantResult)
			}
		})
	}
}

// TestRunWithoutStarted checks that a runner that never acknowledges
// execute is still bounded: by the time limit plus the start allowance.
func TestRunWithoutStarted(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewWS(t, execboxtest.Script{hang()})
	d := newDriver(t, Config{URL: r.URL, CancelGrace: 50 * time.Millisecond})
	d.startAllowance = 200 * time.Millisecond
	begin := time.Now()
	res, err := d.Run(runCtx(t), newCall(nil, map[string]any{"timeoutMs": 100}))
	if err != nil || res.ExitCode != 124 {
		t.Fatalf("Run = %+v, %v; want exit 124", res, err)
	}
	if elapsed := time.Since(begin); elapsed < 400*time.Millisecond {
		t.Errorf("Run took %v, want the time limit, the grace and the start allowance (400ms)", elapsed)
	}
}

// TestRunContext checks the gateway's context: its deadline is a timeout
// (exit 124), its cancellation a Go error; the runner is told to stop
// either way.
func TestRunContext(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name+"/deadline", func(t *testing.T) {
			t.Parallel()
			// A stdio runner is a process, which a loaded machine may not
			// start within a short deadline: then nothing reached it and
			// the case is tried again with a longer one.
			for _, deadline := range []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second} {
				d, r := tr.start(t, execboxtest.Script{started(), hang()}, Config{CancelGrace: 50 * time.Millisecond})
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				res, err := d.Run(ctx, newCall(nil, nil))
				cancel()
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				sessions := r.Sessions()
				if len(sessions) == 0 && deadline < 5*time.Second {
					continue
				}
				want := "timeout: execution exceeded the gateway's deadline for the call; the runner did not stop within 50ms of cancel and was cut off"
				if res.ExitCode != 124 || res.Stderr != want {
					t.Errorf("Run = exit %d, stderr %q; want 124, %q", res.ExitCode, res.Stderr, want)
				}
				if n := len(ofType(onlySession(t, r), "cancel")); n != 1 {
					t.Errorf("runner received %d cancels, want 1", n)
				}
				return
			}
		})
		t.Run(tr.name+"/cancelled", func(t *testing.T) {
			t.Parallel()
			tools := newTools()
			entered := make(chan struct{})
			tools.handle = func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
				close(entered)
				<-ctx.Done()
				return drivers.NestedResult{Code: "internal_error", Message: "cancelled"}
			}
			d, r := tr.start(t, execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1")}, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-entered
				cancel()
			}()
			_, err := d.Run(ctx, newCall(tools, nil))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run error = %v, want context.Canceled", err)
			}
			if n := len(ofType(onlySession(t, r), "cancel")); n != 1 {
				t.Errorf("runner received %d cancels, want 1", n)
			}
		})
	}
}

// TestRunBrokenTransport checks that a session that breaks before done is
// a Go error, which the gateway reports as UNAVAILABLE.
func TestRunBrokenTransport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		script     execboxtest.Script
		cfg        Config
		wantErr    string
		wantIs     error
		wantNested int
	}{
		{name: "crash before anything", script: execboxtest.Script{execboxtest.Crash()}, wantErr: "ended before done"},
		{name: "crash mid-run", script: execboxtest.Script{started(), logLine("x"), execboxtest.Crash()}, wantErr: "ended before done"},
		{name: "crash while a tool call is pending",
			script:  execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), execboxtest.Crash()},
			wantErr: "ended before done", wantNested: 1},
		{name: "crash after answered tool calls",
			script: execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), callTool("c2", "tools", "echo", nil),
				awaitResult("c1"), awaitResult("c2"), execboxtest.Crash()},
			wantErr: "ended before done", wantNested: 2},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				d, _ := tr.start(t, tc.script, tc.cfg)
				res, err := d.Run(runCtx(t), newCall(newTools(), nil))
				if err == nil {
					t.Fatalf("Run = %+v, want an error", res)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("Run error = %v, want %v", err, tc.wantIs)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "execbox execbox: ") {
					t.Errorf("Run error = %q, want it to name the driver and contain %q", err, tc.wantErr)
				}
				// What the session knew stays on record with the error,
				// the guest's tool calls first.
				ev := drivers.ErrorEvidence(err)
				nested, _ := ev["nested_calls"].([]any)
				if ev["ended_without_done"] != true || len(nested) != tc.wantNested {
					t.Errorf("the error carries evidence %v, want %d nested calls", ev, tc.wantNested)
				}
			})
		}
	}
}

// TestRunOversizedMessageIsAToolFailure checks that a runner message over
// the size limit (a guest returning or logging 5 MiB) is a tool failure
// naming the limit, not an outage: a Result with exit 4, no Go error.
func TestRunOversizedMessageIsAToolFailure(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 5<<20)
	tests := []struct {
		name   string
		script execboxtest.Script
	}{
		{"a guest returning 5 MiB", execboxtest.Script{started(), done(big)}},
		{"a guest logging 5 MiB", execboxtest.Script{started(), logLine(big), done(1)}},
		{"a runner sending a 5 MiB message of any kind", execboxtest.Script{started(), execboxtest.Oversized(5 << 20), done(1)}},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				d, _ := tr.start(t, tc.script, Config{})
				res, err := d.Run(runCtx(t), newCall(newTools(), nil))
				if err != nil {
					t.Fatalf("Run error = %v, want a Result: an oversized result is the guest's failure, not an outage", err)
				}
				if res.ExitCode != exitSerialization || res.Data != nil {
					t.Fatalf("exit %d data %v, want exit %d and no data", res.ExitCode, res.Data, exitSerialization)
				}
				if !strings.HasPrefix(res.Stderr, "serialization_error: ") || !strings.Contains(res.Stderr, "4194304 bytes") {
					t.Errorf("stderr %q, want serialization_error naming the limit of 4194304 bytes", res.Stderr)
				}
				if counts, _ := res.Evidence["runner_messages"].(map[string]any); counts["too_large"] != 1 {
					t.Errorf("evidence counts %v, want one too_large message", res.Evidence["runner_messages"])
				}
			})
		}
	}
}

// TestRunCrashReportsExitStatus checks that a stdio runner's exit status is
// part of the error.
func TestRunCrashReportsExitStatus(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewStdio(t, execboxtest.Script{started(), execboxtest.Crash()})
	d := newDriver(t, Config{Command: r.Command})
	_, err := d.Run(runCtx(t), newCall(nil, nil))
	if err == nil || !strings.Contains(err.Error(), "runner process exited with status 3") {
		t.Fatalf("Run error = %v, want the exit status 3", err)
	}
}

// TestRunUnreachable checks runners that cannot be reached at all: an
// error, which the gateway reports as UNAVAILABLE.
func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		d := newDriver(t, Config{URL: "ws://" + addr})
		if _, err := d.Run(runCtx(t), newCall(nil, nil)); err == nil || !strings.Contains(err.Error(), "refused the connection; nothing was sent") {
			t.Errorf("Run error = %v, want the refused connection", err)
		}
	})
	t.Run("not a websocket endpoint", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		d := newDriver(t, Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http")})
		_, err := d.Run(runCtx(t), newCall(nil, nil))
		if err == nil || !strings.Contains(err.Error(), "refused the WebSocket session; nothing was sent: websocket handshake refused (HTTP 404)") {
			t.Errorf("Run error = %v, want the refused handshake", err)
		}
	})
	t.Run("redirect not followed", func(t *testing.T) {
		target := execboxtest.NewWS(t, execboxtest.Script{done(nil)})
		srv := httptest.NewServer(http.RedirectHandler("http"+strings.TrimPrefix(target.URL, "ws"), http.StatusTemporaryRedirect))
		t.Cleanup(srv.Close)
		d := newDriver(t, Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http")})
		_, err := d.Run(runCtx(t), newCall(nil, nil))
		if err == nil || !strings.Contains(err.Error(), "HTTP 307") || target.Starts() != 0 {
			t.Errorf("Run error = %v, runner contacted %d times; want the redirect refused", err, target.Starts())
		}
	})
	t.Run("process that cannot start", func(t *testing.T) {
		d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", "exit 0"}})
		d.cmd.path = t.TempDir() // a directory cannot be executed
		if _, err := d.Run(runCtx(t), newCall(nil, nil)); err == nil || !strings.Contains(err.Error(), "could not be started; nothing was sent") {
			t.Errorf("Run error = %v, want the runner not started", err)
		}
	})
}

// TestRunArgs checks argument validation: a refused call is a Result with
// exit code 2, and the runner is never contacted.
func TestRunArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    map[string]any
		wantErr string
	}{
		{"missing code", map[string]any{"code": nil}, "validation_error: args.code is required"},
		{"code not a string", map[string]any{"code": json.Number("1")}, "validation_error: args.code must be a string, got a number"},
		{"empty code", map[string]any{"code": ""}, "validation_error: args.code must not be empty"},
		{"code too long", map[string]any{"code": strings.Repeat("x", maxCodeBytes+1)}, "validation_error: args.code is 1048577 bytes, more than the limit of 1048576"},
		{"unknown argument", map[string]any{"code": "1", "timeout": 5}, `validation_error: unknown argument "timeout": the arguments are code, providers and timeoutMs`},
		{"timeout zero", map[string]any{"timeoutMs": json.Number("0")}, "validation_error: args.timeoutMs must be a whole number of milliseconds between 1 and 1000, got 0"},
		{"timeout above the limit", map[string]any{"timeoutMs": json.Number("1001")}, "validation_error: args.timeoutMs must be a whole number of milliseconds between 1 and 1000, got 1001"},
		{"timeout fractional", map[string]any{"timeoutMs": json.Number("10.5")}, "validation_error: args.timeoutMs must be a whole number of milliseconds between 1 and 1000, got 10.5"},
		{"timeout a string", map[string]any{"timeoutMs": "100"}, "validation_error: args.timeoutMs must be a whole number of milliseconds between 1 and 1000, got a string"},
		{"providers not a list", map[string]any{"providers": "github"}, "validation_error: args.providers must be a list of provider names, got a string"},
		{"provider not a string", map[string]any{"providers": []any{"github", json.Number("2")}}, "validation_error: args.providers[1] must be a string, got a number"},
		{"unknown provider", map[string]any{"providers": []any{"gitlab"}}, `validation_error: args.providers: unknown provider "gitlab" (offered: tools, github, search)`},
	}
	r := execboxtest.NewWS(t, execboxtest.Script{done(nil)})
	d := newDriver(t, Config{URL: r.URL, Timeout: time.Second})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.Run(runCtx(t), newCall(newTools(), tc.args))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.ExitCode != 2 || res.Stderr != tc.wantErr || res.Stdout != "" || res.Data != nil {
				t.Errorf("Run = %+v; want exit 2, stderr %q", res, tc.wantErr)
			}
		})
	}
	if n := r.Starts(); n != 0 {
		t.Errorf("runner was contacted %d times for refused calls", n)
	}
}

// TestRunWithoutTools checks a call that offers no tools: no providers, and
// a guest tool call is an unknown tool.
func TestRunWithoutTools(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewWS(t, execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), fromResult("c1")})
	d := newDriver(t, Config{URL: r.URL})
	res, err := d.Run(runCtx(t), newCall(nil, nil))
	if err != nil || res.ExitCode != 5 || res.Stderr != "internal_error: unknown tool tools.echo" {
		t.Fatalf("Run = %+v, %v; want exit 5 for an unknown tool", res, err)
	}
	exec := onlySession(t, r)[0]
	if p, ok := exec["providers"].([]any); !ok || len(p) != 0 {
		t.Errorf("execute providers = %#v, want an empty list", exec["providers"])
	}
}

// TestRunProviderFilter checks that providers restricts what the runner is
// offered, by guest name or by namespace.
func TestRunProviderFilter(t *testing.T) {
	t.Parallel()
	tools := newTools()
	tools.tools = append(tools.tools, drivers.ToolInfo{ID: "my-files.read"})
	r := execboxtest.NewWS(t, execboxtest.Script{done(nil)})
	d := newDriver(t, Config{URL: r.URL})
	res, err := d.Run(runCtx(t), newCall(tools, map[string]any{"providers": []any{"my-files", "tools"}}))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	var names []string
	for _, p := range onlySession(t, r)[0]["providers"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	if want := []string{"my_files", "tools"}; !reflect.DeepEqual(names, want) {
		t.Errorf("providers offered = %v, want %v", names, want)
	}
}

// TestNew checks the configuration rules.
func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"no transport", Config{}, "execbox execbox: one of Config.URL and Config.Command is required"},
		{"both transports", Config{URL: "ws://h", Command: []string{"sh"}}, "Config.URL and Config.Command are exclusive"},
		{"http url", Config{URL: "http://h/x"}, `Config.URL: scheme must be ws or wss, got "http"`},
		{"url without host", Config{URL: "ws:///x"}, "Config.URL: has no host"},
		{"url with credentials", Config{URL: "wss://u:p@h/x"}, "Config.URL: must not contain credentials"},
		{"url with fragment", Config{URL: "wss://h/x#f"}, "Config.URL: must not have a fragment"},
		{"pool with url", Config{URL: "ws://h", Pool: 1}, "Config.Pool applies to Config.Command only"},
		{"pool too large", Config{Command: []string{"sh"}, Pool: 65}, "Config.Pool must be between 0 and 64, got 65"},
		{"negative pool", Config{Command: []string{"sh"}, Pool: -1}, "Config.Pool must be between 0 and 64, got -1"},
		{"empty command", Config{Command: []string{""}}, "Config.Command[0] is empty"},
		{"missing command", Config{Command: []string{"no-such-runner-binary"}}, "Config.Command: exec: \"no-such-runner-binary\""},
		{"negative timeout", Config{URL: "ws://h", Timeout: -1}, "Config.Timeout must not be negative"},
		{"sub-millisecond timeout", Config{URL: "ws://h", Timeout: time.Microsecond}, "Config.Timeout must be at least 1ms"},
		{"negative grace", Config{URL: "ws://h", CancelGrace: -time.Second}, "Config.CancelGrace must not be negative"},
		{"negative log lines", Config{URL: "ws://h", MaxLogLines: -1}, "Config.MaxLogLines must not be negative"},
		{"negative memory", Config{URL: "ws://h", MemoryLimitBytes: -1}, "Config.MemoryLimitBytes must not be negative"},
		{"tiny message limit", Config{URL: "ws://h", MaxMessageBytes: 100}, "Config.MaxMessageBytes must be at least 1024, got 100"},
		{"named driver", Config{Name: "sandbox"}, "execbox sandbox: one of"},
		{"negative nested calls", Config{URL: "ws://h", MaxNestedCalls: -1}, "Config.MaxNestedCalls must not be negative"},
		{"too many nested calls", Config{URL: "ws://h", MaxNestedCalls: 10001}, "Config.MaxNestedCalls must be at most 10000, got 10001"},
		{"too many nested calls in flight", Config{URL: "ws://h", MaxNestedInFlight: 65}, "Config.MaxNestedInFlight must be at most 64, got 65"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.cfg)
			if err == nil {
				d.Close()
				t.Fatalf("New succeeded, want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New error = %q, want it to contain %q", err, tc.wantErr)
			}
		})
	}

	t.Run("defaults", func(t *testing.T) {
		d := newDriver(t, Config{URL: "wss://runner.example/exec?tenant=a"})
		got := fmt.Sprintf("%s %v %d %d %d %d %v %d %d", d.name, d.timeout, d.memory, d.maxLogLines, d.maxLogChars, d.maxMessage, d.cancelGrace, d.maxNested, d.maxInFlight)
		if want := "execbox 30s 67108864 1000 64000 4194304 250ms 256 8"; got != want {
			t.Errorf("defaults = %s, want %s", got, want)
		}
	})
}

// TestEngine checks the engine names.
func TestEngine(t *testing.T) {
	t.Parallel()
	ws := newDriver(t, Config{URL: "ws://127.0.0.1:1"})
	stdio := newDriver(t, Config{Command: []string{"sh"}})
	if ws.Engine() != "execbox-ws" || stdio.Engine() != "execbox-stdio" {
		t.Errorf("Engine = %q, %q; want execbox-ws, execbox-stdio", ws.Engine(), stdio.Engine())
	}
}

// TestRunAfterClose checks that a closed driver refuses calls.
func TestRunAfterClose(t *testing.T) {
	t.Parallel()
	d := newDriver(t, Config{URL: "ws://127.0.0.1:1"})
	d.Close()
	if _, err := d.Run(runCtx(t), newCall(nil, nil)); !errors.Is(err, errClosed) {
		t.Errorf("Run after Close = %v, want errClosed", err)
	}
}
