package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// collector is an OTLP/gRPC trace receiver on loopback: the spans a real
// `toolgate serve` exports, as a collector receives them.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu      sync.Mutex
	spans   []*span
	exports []string // each export request as protojson, for scans
}

// span is one exported span with its resource's attributes.
type span struct {
	*tracepb.Span
	resource map[string]string
}

// attr is the string (or bool, or int) value of a span attribute, "" when
// absent.
// attrDouble is a float attribute's value, 0 when absent.
func (s *span) attrDouble(key string) float64 {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetDoubleValue()
		}
	}
	return 0
}

func (s *span) attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			v := kv.Value
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetBoolValue():
				return "true"
			case v.GetIntValue() != 0:
				return fmt.Sprint(v.GetIntValue())
			}
		}
	}
	return ""
}

func (s *span) traceID() string  { return hex.EncodeToString(s.TraceId) }
func (s *span) spanID() string   { return hex.EncodeToString(s.SpanId) }
func (s *span) parentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Export implements the OTLP trace service.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	raw, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports = append(c.exports, string(raw))
	for _, rs := range req.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, &span{Span: s, resource: res})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startCollector serves the OTLP trace service on 127.0.0.1.
func startCollector(t *testing.T) *collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: lis.Addr().String()}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return c
}

// all returns the spans received so far.
func (c *collector) all() []*span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*span(nil), c.spans...)
}

// dump is every export received so far, as protojson.
func (c *collector) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.exports, "\n")
}

// waitSpan waits for the span named name whose attribute key is value.
func (c *collector) waitSpan(t *testing.T, name, key, value string) *span {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.all() {
			if s.Name == name && s.attr(key) == value {
				return s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no span %q with %s=%s among %d received", name, key, value, len(c.all()))
	return nil
}

// waitChildren waits until parent has a child span of each name, and
// returns them by name.
func (c *collector) waitChildren(t *testing.T, parent *span, names ...string) map[string]*span {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		found := map[string]*span{}
		for _, s := range c.all() {
			if s.parentID() == parent.spanID() && s.traceID() == parent.traceID() {
				found[s.Name] = s
			}
		}
		missing := false
		for _, n := range names {
			missing = missing || found[n] == nil
		}
		if !missing {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of %s: got %v, want %v", parent.Name, keysOf(found), names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func keysOf(m map[string]*span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// traceGateway is a running `toolgate serve` exporting its spans to a
// collector, with a workspace, a TPMJS executor and the MCP door.
type traceGateway struct {
	srv      *server
	col      *collector
	executor *tpmjstest.Executor
	client   toolgatev1.ToolGatewayClient
	mcp      *mcpDoor
}

const (
	traceKey        = "tg-trace-key-0123456789"
	traceToolSecret = "gw-tool-secret-5f1e9c7a"
	tracePolicy     = `@id("allow_reads") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
@id("allow_echo") permit (principal, action == Action::"RunTool", resource == Tool::"fake.echo");
@id("no_shell") forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");
`
)

// startTraceGateway starts the binary with telemetry.otlp_endpoint at a
// fresh collector; env is added to its environment.
func startTraceGateway(t *testing.T, env ...string) *traceGateway {
	t.Helper()
	col := startCollector(t)
	return startGatewayTracingTo(t, col, "telemetry: {otlp_endpoint: http://"+col.addr+"}", env...)
}

// startGatewayTracingTo starts the binary with the telemetry section
// section (which may be ""), col being the collector the test watches.
func startGatewayTracingTo(t *testing.T, col *collector, section string, env ...string) *traceGateway {
	t.Helper()
	g := &traceGateway{col: col, executor: tpmjstest.New(t, tpmjstest.NodeV10)}
	dir := t.TempDir()
	writePolicy(t, dir, tracePolicy)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
instance: gw-trace
auth:
  keys:
    - {caller: agent, env: TG_TRACE_KEY}
evidence: {url: file://./evidence}
%s
drivers:
  workspace: {type: workspace, root: ./ws}
  tpmjs: {type: tpmjs, url: %q}
tools:
  fake.echo: {driver: tpmjs, package: %q, version: "1.0.0", export: %s, caller_env: [API_KEY],
    env: {GW_TOKEN: {from_env: TG_TRACE_TOOL_SECRET}}}
front_doors:
  mcp: {listen: 127.0.0.1:0}
`, section, g.executor.URL, tpmjstest.Package, tpmjstest.EchoTool)
	for name, text := range map[string]string{"toolgate.yaml": cfg, "ws/notes.txt": "hello from the workspace\n"} {
		mcpMust(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700))
		mcpMust(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	// The batch processor's 5 s default would make every test wait.
	env = append([]string{"TG_TRACE_KEY=" + traceKey, "TG_TRACE_TOOL_SECRET=" + traceToolSecret, "OTEL_BSP_SCHEDULE_DELAY=50"}, env...)
	g.srv = startServerEnv(t, dir, env, "--config", "toolgate.yaml")
	g.client = dial(t, g.srv.addr)
	g.mcp = &mcpDoor{url: g.srv.doorURL(t, "mcp") + "/mcp", srv: g.srv}
	return g
}

// call runs tool over gRPC as the agent, with extra metadata pairs.
func (g *traceGateway) call(t *testing.T, id, tool string, args map[string]any, md ...string) *toolgatev1.RunToolResponse {
	t.Helper()
	s, err := structpb.NewStruct(args)
	mcpMust(t, err)
	ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{"authorization", "Bearer " + traceKey}, md...)...)
	resp, err := g.client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
	if err != nil {
		t.Fatalf("RunTool %s: %v", id, err)
	}
	return resp
}

// requestTraceID is request.json's trace_id for request id.
func (g *traceGateway) requestTraceID(t *testing.T, id string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(g.srv.dir, "evidence", "requests", id, "request.json"))
	mcpMust(t, err)
	var req struct {
		TraceID string `json:"trace_id"`
	}
	mcpMust(t, json.Unmarshal(raw, &req))
	return req.TraceID
}

// stages are the stage spans every allowed call has under its call span.
// Redaction and store writes, once per artifact, are summed on the call
// span instead.
var stages = []string{"toolgate.auth", "toolgate.claim", "toolgate.decide", "toolgate.driver"}

const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// TestTraces follows calls from the wire to the collector: the spans a
// call produces, their attributes, and the trace id in the evidence.
func TestTraces(t *testing.T) {
	t.Parallel()
	g := startTraceGateway(t)

	t.Run("an allowed call is an execute_tool span with its stages as children", func(t *testing.T) {
		g.call(t, "trace-allow", "workspace.readFile", map[string]any{"path": "notes.txt"})
		s := g.col.waitSpan(t, "execute_tool workspace.readFile", "toolgate.request_id", "trace-allow")
		if s.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
			t.Errorf("kind %v, want INTERNAL", s.Kind)
		}
		for k, v := range map[string]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "workspace.readFile",
			"gen_ai.tool.call.id": "trace-allow", "gen_ai.tool.type": "extension",
			"toolgate.decision": "allow", "toolgate.rule_id": "allow_reads", "toolgate.outcome": "ran",
			"toolgate.evidence_prefix": "requests/trace-allow/", "toolgate.front_door": "grpc",
		} {
			if got := s.attr(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		for k, v := range map[string]string{"service.name": "toolgate", "service.instance.id": "gw-trace", "service.version": "0.1.0"} {
			if s.resource[k] != v {
				t.Errorf("resource %s = %q, want %q", k, s.resource[k], v)
			}
		}
		children := g.col.waitChildren(t, s, stages...)
		for _, name := range []string{"toolgate.redact", "toolgate.evidence_write"} {
			if children[name] != nil {
				t.Errorf("%s has a span per artifact; it is summed on the call span", name)
			}
		}
		// request, decision, dispatch marker, result, response, manifest
		if got := s.attr("toolgate.evidence_write.count"); got != "6" {
			t.Errorf("toolgate.evidence_write.count = %q, want 6", got)
		}
		for _, k := range []string{"toolgate.redact.seconds", "toolgate.evidence_write.seconds"} {
			if s.attrDouble(k) <= 0 {
				t.Errorf("%s = %v, want the summed time", k, s.attrDouble(k))
			}
		}
		if got := g.requestTraceID(t, "trace-allow"); got != s.traceID() {
			t.Errorf("request.json trace_id %q, span's trace %q", got, s.traceID())
		}
	})

	t.Run("a denied call carries the deciding rule and runs no driver", func(t *testing.T) {
		g.call(t, "trace-deny", "workspace.shell", map[string]any{"command": "true"})
		s := g.col.waitSpan(t, "execute_tool workspace.shell", "toolgate.request_id", "trace-deny")
		if s.attr("toolgate.decision") != "deny" || s.attr("toolgate.rule_id") != "no_shell" || s.attr("toolgate.outcome") != "denied" {
			t.Errorf("decision %q rule %q outcome %q", s.attr("toolgate.decision"), s.attr("toolgate.rule_id"), s.attr("toolgate.outcome"))
		}
		children := g.col.waitChildren(t, s, "toolgate.claim", "toolgate.decide")
		if children["toolgate.driver"] != nil {
			t.Error("a denied call has a driver stage")
		}
	})

	t.Run("a call with a traceparent continues the caller's trace", func(t *testing.T) {
		g.call(t, "trace-parent", "workspace.readFile", map[string]any{"path": "notes.txt"},
			"traceparent", callerParent, "tracestate", "rojo=00f067aa0ba902b7")
		s := g.col.waitSpan(t, "execute_tool workspace.readFile", "toolgate.request_id", "trace-parent")
		if s.traceID() != callerTrace || s.parentID() != callerSpan {
			t.Errorf("trace %s parent %s, want the caller's %s %s", s.traceID(), s.parentID(), callerTrace, callerSpan)
		}
		if s.TraceState != "rojo=00f067aa0ba902b7" {
			t.Errorf("tracestate %q was not kept", s.TraceState)
		}
		if got := g.requestTraceID(t, "trace-parent"); got != callerTrace {
			t.Errorf("request.json trace_id %q, want the caller's %s", got, callerTrace)
		}
	})

	t.Run("the TPMJS executor receives the driver stage as its parent", func(t *testing.T) {
		g.call(t, "trace-tpmjs", "fake.echo", map[string]any{"message": "hi"}, "traceparent", callerParent)
		s := g.col.waitSpan(t, "execute_tool fake.echo", "toolgate.request_id", "trace-tpmjs")
		driver := g.col.waitChildren(t, s, "toolgate.driver")["toolgate.driver"]
		var sent string
		for _, r := range g.executor.Requests() {
			if strings.HasSuffix(r.Path, "execute-tool") {
				sent = r.Header.Get("traceparent")
			}
		}
		if want := "00-" + callerTrace + "-" + driver.spanID() + "-01"; sent != want {
			t.Errorf("executor got traceparent %q, want %q", sent, want)
		}
	})

	t.Run("an MCP tools/call is a SERVER span parenting the call and its stages", func(t *testing.T) {
		a := mcpCall(t, g.mcp, traceKey, "workspace.readFile", map[string]any{"path": "notes.txt"},
			map[string]any{mcpIdemKey: "trace-mcp", "traceparent": callerParent})
		if a.isError() {
			t.Fatalf("tools/call: %s", a.raw)
		}
		srv := g.col.waitSpan(t, "tools/call workspace.readFile", "mcp.method.name", "tools/call")
		if srv.Kind != tracepb.Span_SPAN_KIND_SERVER || srv.traceID() != callerTrace || srv.parentID() != callerSpan {
			t.Errorf("kind %v trace %s parent %s, want SERVER under _meta's traceparent", srv.Kind, srv.traceID(), srv.parentID())
		}
		for k, v := range map[string]string{"gen_ai.tool.name": "workspace.readFile", "gen_ai.operation.name": "execute_tool",
			"mcp.protocol.version": "2026-07-28", "network.transport": "tcp", "network.protocol.name": "http"} {
			if got := srv.attr(k); got != v {
				t.Errorf("%s = %q, want %q", k, got, v)
			}
		}
		call := g.col.waitChildren(t, srv, "execute_tool workspace.readFile")["execute_tool workspace.readFile"]
		if call.attr("toolgate.front_door") != "mcp" || call.attr("toolgate.request_id") != "trace-mcp" {
			t.Errorf("call span front_door %q request_id %q", call.attr("toolgate.front_door"), call.attr("toolgate.request_id"))
		}
		// The door's authentication of the bearer key is the call's auth stage.
		g.col.waitChildren(t, call, stages...)
		if got := g.requestTraceID(t, "trace-mcp"); got != callerTrace {
			t.Errorf("request.json trace_id %q, want _meta's %s", got, callerTrace)
		}
	})
}

// TestTracesAreFlushedOnShutdown: spans still queued when serve is
// stopped reach the collector before it exits, whatever the batch delay.
func TestTracesAreFlushedOnShutdown(t *testing.T) {
	t.Parallel()
	g := startTraceGateway(t, "OTEL_BSP_SCHEDULE_DELAY=600000")
	g.call(t, "trace-flush", "workspace.readFile", map[string]any{"path": "notes.txt"})
	if err := g.srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.srv.done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	for _, s := range g.col.all() {
		if s.attr("toolgate.request_id") == "trace-flush" {
			return
		}
	}
	t.Fatalf("the call's span was not exported before exit; %d spans received", len(g.col.all()))
}
