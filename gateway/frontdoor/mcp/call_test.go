package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

func TestForbiddenArgumentsAreAToolErrorWithEvidence(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", map[string]any{"text": "secret"}, mcp.Meta{MetaIdempotencyKey: "deny-1"})
	if !res.IsError || !strings.Contains(text(res), "Denied by policy rule no_secrets: never echo the word secret") {
		t.Fatalf("result: isError %v, text %q; want a tool error naming the rule", res.IsError, text(res))
	}
	if res.StructuredContent != nil {
		t.Errorf("a deny carries structuredContent %v", res.StructuredContent)
	}
	if d := e.policyDecision("deny-1"); d["decision"] != "deny" || d["rule_id"] != "no_secrets" {
		t.Errorf("policy_decision.json: %v", d)
	}
	dec, _ := res.Meta[MetaDecision].(map[string]any)
	if dec["decision"] != "deny" || dec["ruleId"] != "no_secrets" {
		t.Errorf("_meta decision = %v", res.Meta[MetaDecision])
	}
	if n := e.driver.runs.Load(); n != 0 {
		t.Errorf("the driver ran %d times for a denied call", n)
	}
}

func TestDeniedToolIsAToolErrorNotAProtocolError(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	// hidden is not listed to agent, but it is in the catalog: calling it
	// is decided and recorded like any call.
	res := call(t, cs, "hidden", nil, mcp.Meta{MetaIdempotencyKey: "hidden-1"})
	if !res.IsError || !strings.HasPrefix(text(res), "Denied by policy rule ") {
		t.Fatalf("result: isError %v, text %q", res.IsError, text(res))
	}
	if e.requestJSON("hidden-1") == nil {
		t.Error("the denied call left no request.json")
	}
}

func TestSameIdempotencyKeyRunsOnce(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	first := call(t, cs, "echo", map[string]any{"text": "once"}, mcp.Meta{MetaIdempotencyKey: "same-key"})
	again := call(t, e.connect(clientOptions{key: agentKey, legacy: true}), "echo", map[string]any{"text": "once"},
		mcp.Meta{MetaIdempotencyKey: "same-key"})
	if n := e.driver.runs.Load(); n != 1 {
		t.Fatalf("the driver ran %d times for one key, want 1", n)
	}
	if text(first) != "once" || text(again) != "once" || again.IsError {
		t.Errorf("first %q, again %q (isError %v): want the stored answer replayed", text(first), text(again), again.IsError)
	}
	// The same key for other arguments, or by another caller, is another
	// request under a taken id: refused, nothing runs.
	other := call(t, cs, "echo", map[string]any{"text": "twice"}, mcp.Meta{MetaIdempotencyKey: "same-key"})
	alice := call(t, e.connect(clientOptions{key: aliceKey}), "echo", map[string]any{"text": "once"}, mcp.Meta{MetaIdempotencyKey: "same-key"})
	for name, res := range map[string]*mcp.CallToolResult{"other arguments": other, "another caller": alice} {
		if !res.IsError || !strings.Contains(text(res), "idempotency key reused for a different call") {
			t.Errorf("%s: isError %v, text %q", name, res.IsError, text(res))
		}
	}
	if n := e.driver.runs.Load(); n != 1 {
		t.Errorf("the driver ran %d times, want 1", n)
	}
}

func TestBadIdempotencyKeyRecordsNothing(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	for name, key := range map[string]any{
		"a slash would leave the evidence prefix": "../escape",
		"a key must start with a letter or digit": "-x",
		"a key is at most 128 characters":         strings.Repeat("k", 129),
		"a key must be a string":                  42,
		"an empty key is refused":                 "",
	} {
		t.Run(name, func(t *testing.T) {
			res := call(t, cs, "echo", map[string]any{"text": "x"}, mcp.Meta{MetaIdempotencyKey: key})
			if !res.IsError || !strings.Contains(text(res), MetaIdempotencyKey) {
				t.Errorf("isError %v, text %q: want a tool error naming the key", res.IsError, text(res))
			}
		})
	}
	if n := e.requestFolders(); n != 0 {
		t.Errorf("%d requests recorded for refused keys", n)
	}
	if n := e.driver.runs.Load(); n != 0 {
		t.Errorf("the driver ran %d times", n)
	}
}

func TestNoKeyGivesAFreshRequestID(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	a := call(t, cs, "echo", map[string]any{"text": "x"}, nil)
	b := call(t, cs, "echo", map[string]any{"text": "x"}, nil)
	ida, _ := a.Meta[MetaRequestID].(string)
	idb, _ := b.Meta[MetaRequestID].(string)
	if !strings.HasPrefix(ida, "mcp-") || len(ida) != len("mcp-")+26 || ida == idb {
		t.Errorf("request ids %q and %q: want two fresh mcp-<26 base32> ids", ida, idb)
	}
	if n := e.driver.runs.Load(); n != 2 {
		t.Errorf("the driver ran %d times for two calls without a key, want 2", n)
	}
}

func TestNonZeroExitIsAToolErrorWithItsOutput(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", map[string]any{"text": "partial", "exit": 3}, nil)
	if !res.IsError {
		t.Error("exit 3 is not a tool error")
	}
	if len(res.Content) != 2 || text(res) != "partial"+"stderr:\nexit requested" {
		t.Errorf("content %q, want stdout then stderr", text(res))
	}
	if res.Meta[MetaExitCode] != float64(3) {
		t.Errorf("_meta exitCode = %v", res.Meta[MetaExitCode])
	}
}

func TestArgumentsThatAreNoObjectAreAToolError(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", []any{"text", "x"}, mcp.Meta{MetaIdempotencyKey: "array-args"})
	if !res.IsError || !strings.Contains(text(res), "arguments: want a JSON object") {
		t.Errorf("isError %v, text %q", res.IsError, text(res))
	}
	if e.requestJSON("array-args") != nil || e.driver.runs.Load() != 0 {
		t.Error("arguments that are no object were recorded or run")
	}
}

func TestUnknownToolIsTheSDKsInvalidParams(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	for _, name := range []string{"nope", "bad:id", "@tpmjs/hello::helloWorldTool"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
		cancel()
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("%s: err %v, want -32602", name, err)
		}
	}
	if n := e.requestFolders(); n != 0 {
		t.Errorf("%d requests recorded for tools the door does not serve", n)
	}
}

func TestRunContextComesFromMeta(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", map[string]any{"text": "x"}, mcp.Meta{
		MetaIdempotencyKey: "ctx-1", MetaRunID: "run-7", MetaStepID: "step-2", MetaPolicyRef: "policy.default",
	})
	if res.IsError {
		t.Fatalf("isError: %s", text(res))
	}
	ctx, _ := e.requestJSON("ctx-1")["ctx"].(map[string]any)
	if ctx["run_id"] != "run-7" || ctx["step_id"] != "step-2" || ctx["policy_ref"] != "policy.default" {
		t.Errorf("request.json ctx = %v", ctx)
	}
	if res.Meta[MetaRunID] != "run-7" || res.Meta[MetaStepID] != "step-2" {
		t.Errorf("_meta echoes run %v step %v", res.Meta[MetaRunID], res.Meta[MetaStepID])
	}
	bad := call(t, cs, "echo", map[string]any{"text": "x"}, mcp.Meta{MetaRunID: 7})
	if !bad.IsError || !strings.Contains(text(bad), MetaRunID) {
		t.Errorf("a runId that is no string: isError %v, text %q", bad.IsError, text(bad))
	}
}

func TestTraceparentIsKept(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, sent, kept string
	}{
		{"a well-formed traceparent reaches the gateway", tp, tp},
		{"an upper-case one is malformed and dropped", strings.ToUpper(tp), ""},
		{"an all-zero trace id is invalid and dropped", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"an all-zero span id is invalid and dropped", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"another version is dropped", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, "echo", map[string]any{"text": "x"}, mcp.Meta{MetaTraceParent: tc.sent})
			if res.IsError {
				t.Fatalf("a traceparent made the call fail: %s", text(res))
			}
			if got := e.gw.lastCall(t).TraceParent; got != tc.kept {
				t.Errorf("gateway.Call.TraceParent = %q, want %q", got, tc.kept)
			}
		})
	}
	// Never part of the request: a retry under another trace is the same
	// call.
	call(t, cs, "echo", map[string]any{"text": "y"}, mcp.Meta{MetaIdempotencyKey: "traced", MetaTraceParent: tp})
	if got := e.requestJSON("traced")["trace_id"]; got != tp[3:35] {
		t.Errorf("request.json trace_id = %v, want %s", got, tp[3:35])
	}
	res := call(t, cs, "echo", map[string]any{"text": "y"}, mcp.Meta{MetaIdempotencyKey: "traced"})
	if res.IsError {
		t.Errorf("a retry without the traceparent is another request: %s", text(res))
	}
}

func TestRunErrorsMapToToolErrorsOrRetryableProtocolErrors(t *testing.T) {
	d := &Door{log: discardLogger()}
	failure, err := status.New(codes.Unavailable, "the driver is down").
		WithDetails(&toolgatev1.RunToolFailure{EvidenceRefs: []string{"requests/r/request.json"}})
	must(t, err)
	for _, tc := range []struct {
		name      string
		err       error
		toolError string // "" for a JSON-RPC error
		retryable bool
		refs      int
	}{
		{"invalid arguments are the model's to fix", status.Error(codes.InvalidArgument, "args.x: bad"), "args.x: bad", false, 0},
		{"a reused key is a tool error", status.Error(codes.AlreadyExists, "hash differs"), "idempotency key reused for a different call", false, 0},
		{"a call still running is a tool error", status.Error(codes.Aborted, "in flight"), "still running; retry later", false, 0},
		{"an unavailable driver is retryable, with evidence", failure.Err(), "", true, 1},
		{"a full gateway is retryable", status.Error(codes.ResourceExhausted, "busy"), "", true, 0},
		{"a deadline is retryable", status.Error(codes.DeadlineExceeded, "slow"), "", true, 0},
		{"an internal error is retryable", status.Error(codes.Internal, "oops"), "", true, 0},
		{"a permission error is not", status.Error(codes.PermissionDenied, "no"), "", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.runError("r", tc.err)
			if tc.toolError != "" {
				if err != nil || !res.IsError || !strings.Contains(text(res), tc.toolError) {
					t.Fatalf("got %v / %v, want a tool error %q", res, err, tc.toolError)
				}
				return
			}
			var rpc *jsonrpc.Error
			if !errors.As(err, &rpc) || rpc.Code != codeGatewayUnavailable {
				t.Fatalf("err %v, want JSON-RPC %d", err, codeGatewayUnavailable)
			}
			var data struct {
				RequestID    string   `json:"requestId"`
				Retryable    bool     `json:"retryable"`
				EvidenceRefs []string `json:"evidenceRefs"`
			}
			must(t, json.Unmarshal(rpc.Data, &data))
			if data.RequestID != "r" || data.Retryable != tc.retryable || len(data.EvidenceRefs) != tc.refs {
				t.Errorf("data %+v", data)
			}
		})
	}
}
