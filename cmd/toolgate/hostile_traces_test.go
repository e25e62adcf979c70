package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// traceMarker and traceSecret stand for what a caller sends: no exported
// span may carry them, in a name, an attribute, an event or a status.
const (
	traceMarker = "ZZ-TRACE-MARKER-7c1d"
	traceSecret = "sk-live-trace-secret-91b2"
)

// TestHostileTraceSecrets: arguments, caller and gateway environment
// values, outputs, API keys and ids that fail validation never reach a
// span, whichever way the call comes in and however it ends.
func TestHostileTraceSecrets(t *testing.T) {
	t.Parallel()
	g := startTraceGateway(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+traceKey)
	run := func(id, tool string, args map[string]any) {
		s, err := structpb.NewStruct(args)
		mcpMust(t, err)
		_, _ = g.client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
	}
	secretArgs := map[string]any{"message": traceMarker + " " + traceSecret, "_env": map[string]any{"API_KEY": traceSecret + traceMarker}}

	t.Run("an allowed call's arguments, caller env and output", func(t *testing.T) {
		run("hostile-echo", "fake.echo", secretArgs)
		g.col.waitSpan(t, "execute_tool fake.echo", "toolgate.request_id", "hostile-echo")
	})
	t.Run("a denied call's arguments", func(t *testing.T) {
		run("hostile-deny", "workspace.shell", map[string]any{"command": "echo " + traceMarker + traceSecret})
		g.col.waitSpan(t, "execute_tool workspace.shell", "toolgate.request_id", "hostile-deny")
	})
	t.Run("a tool id the catalog does not know is named other", func(t *testing.T) {
		run("hostile-unknown", "x."+traceMarker, map[string]any{})
		g.col.waitSpan(t, "execute_tool other", "toolgate.request_id", "hostile-unknown")
	})
	t.Run("a request id that fails validation is left out", func(t *testing.T) {
		run("bad id "+traceMarker+traceSecret, "workspace.readFile", map[string]any{"path": "notes.txt"})
		g.col.waitSpan(t, "execute_tool workspace.readFile", "error.type", "InvalidArgument")
	})
	t.Run("an MCP call's arguments", func(t *testing.T) {
		a := mcpCall(t, g.mcp, traceKey, "fake.echo", secretArgs, map[string]any{mcpIdemKey: "hostile-mcp"})
		if a.status != http.StatusOK {
			t.Fatalf("tools/call: %d %s", a.status, a.raw)
		}
		g.col.waitSpan(t, "execute_tool fake.echo", "toolgate.request_id", "hostile-mcp")
	})

	dump := g.col.dump()
	for _, hidden := range []string{traceMarker, traceSecret, traceToolSecret, traceKey} {
		if strings.Contains(dump, hidden) {
			t.Errorf("an exported span carries %q:\n%s", hidden, dump)
		}
	}
}

// TestHostileTraceContext: trace context a caller sends is advice. A
// malformed or oversized one never stops a call and never reaches a span,
// the evidence, the executor or the log; request.json's trace_id is the
// call span's trace all the same.
func TestHostileTraceContext(t *testing.T) {
	t.Parallel()
	g := startTraceGateway(t)
	huge := strings.Repeat("a", 8<<10)
	bigState := "rojo=00f067aa0ba902b7" + strings.Repeat(",k"+strings.Repeat("x", 20)+"=v", 25) // valid, but over 512 bytes
	for i, tc := range []struct {
		name  string
		md    []string
		trace string // the trace id the span must have; "" for a fresh one
		state string // the tracestate the span must keep
	}{
		{name: "a malformed traceparent", md: []string{"traceparent", "00-" + traceMarker + "-01"}},
		{name: "uppercase hex is no valid traceparent", md: []string{"traceparent", strings.ToUpper(callerParent)}},
		{name: "an all-zero trace id", md: []string{"traceparent", "00-00000000000000000000000000000000-" + callerSpan + "-01"}},
		{name: "a traceparent of 8 KiB", md: []string{"traceparent", callerParent + huge}},
		{name: "two traceparents", md: []string{"traceparent", callerParent, "traceparent", callerParent}},
		{name: "a tracestate over 512 bytes is dropped, the traceparent kept",
			md: []string{"traceparent", callerParent, "tracestate", bigState}, trace: callerTrace},
		{name: "a malformed tracestate is dropped, the traceparent kept",
			md: []string{"traceparent", callerParent, "tracestate", traceMarker + "==,=="}, trace: callerTrace},
		{name: "a caller's unsampled flag does not keep the call out of the traces",
			md: []string{"traceparent", "00-" + callerTrace + "-" + callerSpan + "-00"}, trace: callerTrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("hostile-tc-%d", i)
			resp := g.call(t, id, "fake.echo", map[string]any{"message": "hi"}, tc.md...)
			if !resp.GetOk() {
				t.Fatalf("the call did not run: %v", resp)
			}
			s := g.col.waitSpan(t, "execute_tool fake.echo", "toolgate.request_id", id)
			if tc.trace != "" && s.traceID() != tc.trace {
				t.Errorf("trace %s, want the caller's %s", s.traceID(), tc.trace)
			}
			if tc.trace == "" && (s.traceID() == callerTrace || len(s.ParentSpanId) != 0) {
				t.Errorf("the span continued a trace it should have ignored: trace %s parent %s", s.traceID(), s.parentID())
			}
			if s.TraceState != tc.state {
				t.Errorf("tracestate %q kept", s.TraceState)
			}
			if got := g.requestTraceID(t, id); got != s.traceID() {
				t.Errorf("request.json trace_id %q, span's trace %s", got, s.traceID())
			}
			for _, r := range g.executor.Requests() {
				if h := r.Header.Get("tracestate") + r.Header.Get("traceparent"); strings.Contains(h, traceMarker) || len(h) > 600 {
					t.Errorf("the executor received trace context %q", h[:min(len(h), 80)])
				}
			}
		})
	}
	t.Run("a malformed _meta traceparent on MCP is dropped and the call runs", func(t *testing.T) {
		a := mcpCall(t, g.mcp, traceKey, "fake.echo", map[string]any{"message": "hi"},
			map[string]any{mcpIdemKey: "hostile-tc-mcp", "traceparent": "00-" + traceMarker})
		if a.status != http.StatusOK || a.isError() {
			t.Fatalf("tools/call: %d %s", a.status, a.raw)
		}
		s := g.col.waitSpan(t, "execute_tool fake.echo", "toolgate.request_id", "hostile-tc-mcp")
		if got := g.requestTraceID(t, "hostile-tc-mcp"); got != s.traceID() {
			t.Errorf("request.json trace_id %q, span's trace %s", got, s.traceID())
		}
	})
	t.Run("an HTTP traceparent header on the MCP door parents its server span", func(t *testing.T) {
		h := mcp2026(traceKey, "tools/call", "workspace.readFile")
		h["traceparent"] = callerParent
		a := mcpPost(t, g.mcp.url, h, mcpCallBody("workspace.readFile", map[string]any{"path": "notes.txt"},
			map[string]any{mcpIdemKey: "hostile-tc-header"}))
		if a.isError() {
			t.Fatalf("tools/call: %s", a.raw)
		}
		call := g.col.waitSpan(t, "execute_tool workspace.readFile", "toolgate.request_id", "hostile-tc-header")
		if call.traceID() != callerTrace {
			t.Errorf("trace %s, want the header's %s", call.traceID(), callerTrace)
		}
	})
	if log := g.srv.log.String(); strings.Contains(log, traceMarker) || strings.Contains(log, huge[:512]) {
		t.Error("the server log carries a caller's trace context")
	}
	if strings.Contains(g.col.dump(), traceMarker) {
		t.Error("an exported span carries a caller's malformed trace context")
	}
}

// countingListener is a loopback listener that accepts and closes every
// connection, counting them: an address nothing should connect to.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

// listenCounting starts a countingListener, closed when t ends.
func listenCounting(t *testing.T) *countingListener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: lis}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l
}

// TestHostileTracingOff: with no endpoint configured, no exporter is
// built and nothing connects anywhere, whatever other OTLP variables a
// stale environment holds; request.json keeps the caller's trace id.
func TestHostileTracingOff(t *testing.T) {
	t.Parallel()
	counting := listenCounting(t)
	stale := "http://" + counting.Addr().String()
	for _, tc := range []struct {
		name, section string
		env           []string
	}{
		{name: "nothing configured, stale variables of other signals and headers",
			env: []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + stale, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=" + stale,
				"OTEL_EXPORTER_OTLP_HEADERS=api-key=" + traceSecret}},
		{name: "an endpoint, but OTEL_SDK_DISABLED", section: "telemetry: {otlp_endpoint: " + stale + "}",
			env: []string{"OTEL_SDK_DISABLED=true"}},
		{name: "an endpoint variable, but OTEL_TRACES_EXPORTER=none",
			env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + stale, "OTEL_TRACES_EXPORTER=none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGatewayTracingTo(t, startCollector(t), tc.section, tc.env...)
			g.call(t, "off-parent", "fake.echo", map[string]any{"message": "hi"}, "traceparent", callerParent)
			g.call(t, "off-none", "workspace.readFile", map[string]any{"path": "notes.txt"})
			if got := g.requestTraceID(t, "off-parent"); got != callerTrace {
				t.Errorf("request.json trace_id %q, want the caller's %s", got, callerTrace)
			}
			if got := g.requestTraceID(t, "off-none"); got != "" {
				t.Errorf("request.json trace_id %q with tracing off and no caller trace", got)
			}
			// The executor still continues the caller's trace.
			var sent string
			for _, r := range g.executor.Requests() {
				if strings.HasSuffix(r.Path, "execute-tool") {
					sent = r.Header.Get("traceparent")
				}
			}
			if !strings.HasPrefix(sent, "00-"+callerTrace+"-") {
				t.Errorf("executor traceparent %q, want the caller's trace", sent)
			}
			mcpMust(t, g.srv.cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-g.srv.done:
			case <-time.After(20 * time.Second):
				t.Fatal("serve did not exit")
			}
			if n := counting.accepted.Load(); n != 0 {
				t.Errorf("%d connections to the stale endpoint", n)
			}
		})
	}
}
