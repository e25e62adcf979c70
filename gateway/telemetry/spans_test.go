package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// recorded returns a Telemetry whose spans end up in the returned
// recorder.
func recorded(t testing.TB) (*Telemetry, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := New(Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return tel, rec
}

// attrs maps a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// spanNamed returns the one ended span with name.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d", name, len(rec.Ended()))
	return nil
}

const incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestCallSpanFollowsTheGenAIConventions(t *testing.T) {
	tel, rec := recorded(t)
	authStart := time.Now().Add(-time.Millisecond)
	ctx := WithAuth(context.Background(), authStart, authStart.Add(100*time.Microsecond))
	ctx = Incoming(ctx, incoming)
	ctx, call := tel.StartCall(ctx, Call{Tool: "workspace.read_file", RequestID: "req-1"})
	_, claim := tel.StartStage(ctx, StageClaim)
	claim.End()
	var times StageTimes
	for _, s := range []Stage{StageRedact, StageEvidenceWrite, StageRedact, StageEvidenceWrite} {
		_, st := tel.StartStage(ctx, s)
		time.Sleep(time.Millisecond)
		times.Add(s, st.End())
	}
	tel.AnnotateCall(ctx, times)
	if got := TraceID(ctx); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("TraceID = %q, want the caller's trace", got)
	}
	call.End(Result{Decision: "allow", RuleID: "read-ok", Outcome: OutcomeRan, EvidencePrefix: "requests/req-1/"})

	span := spanNamed(t, rec, "execute_tool workspace.read_file")
	if span.SpanKind() != trace.SpanKindInternal {
		t.Errorf("kind %v, want INTERNAL", span.SpanKind())
	}
	if span.Parent().SpanID().String() != "00f067aa0ba902b7" || !span.Parent().IsRemote() {
		t.Errorf("parent %v, want the caller's span", span.Parent())
	}
	want := map[attribute.Key]string{
		"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "workspace.read_file",
		"gen_ai.tool.call.id": "req-1", "gen_ai.tool.type": "extension",
		AttrRequestID: "req-1", AttrFrontDoor: "grpc", AttrDecision: "allow", AttrRuleID: "read-ok",
		AttrOutcome: "ran", AttrEvidencePrefix: "requests/req-1/",
	}
	got := attrs(span)
	for k, v := range want {
		if got[k].AsString() != v {
			t.Errorf("%s = %q, want %q", k, got[k].AsString(), v)
		}
	}
	for _, name := range []string{"toolgate.auth", "toolgate.claim"} {
		child := spanNamed(t, rec, name)
		if child.Parent().SpanID() != span.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the call span", name)
		}
	}
	for _, s := range rec.Ended() {
		if s.Name() == "toolgate.redact" || s.Name() == "toolgate.evidence_write" {
			t.Errorf("%s has a span of its own; per-artifact stages are summed on the call span", s.Name())
		}
	}
	if n := got[AttrEvidenceWriteCount].AsInt64(); n != 2 {
		t.Errorf("%s = %d, want 2", AttrEvidenceWriteCount, n)
	}
	for _, k := range []attribute.Key{AttrRedactSeconds, AttrEvidenceWriteSeconds} {
		if v := got[k].AsFloat64(); v < 0.002 {
			t.Errorf("%s = %v, want the two stages' sum (at least 2ms)", k, v)
		}
	}
	if auth := spanNamed(t, rec, "toolgate.auth"); !auth.StartTime().Equal(authStart) {
		t.Errorf("auth span starts %v, want the transport's %v", auth.StartTime(), authStart)
	}
}

func TestCallSpanOfAFailedCallIsAnError(t *testing.T) {
	tel, rec := recorded(t)
	_, call := tel.StartCall(context.Background(), Call{Tool: OtherTool})
	call.End(Result{Outcome: OutcomeError, ErrorType: "InvalidArgument"})
	span := spanNamed(t, rec, "execute_tool other")
	if span.Status().Code != codes.Error || span.Status().Description != "InvalidArgument" {
		t.Errorf("status %+v, want Error InvalidArgument", span.Status())
	}
	if got := attrs(span)["error.type"].AsString(); got != "InvalidArgument" {
		t.Errorf("error.type = %q", got)
	}
}

func TestNestedCallHasNoAuthStageOfItsOwn(t *testing.T) {
	tel, rec := recorded(t)
	ctx := WithAuth(context.Background(), time.Now(), time.Now())
	ctx, parent := tel.StartCall(ctx, Call{Tool: "execbox.run"})
	dctx, driver := tel.StartStage(ctx, StageDriver)
	_, nested := tel.StartCall(dctx, Call{Tool: "workspace.read_file", Nested: true})
	nested.End(Result{Outcome: OutcomeRan})
	driver.End()
	parent.End(Result{Outcome: OutcomeRan})
	n := spanNamed(t, rec, "execute_tool workspace.read_file")
	if n.Parent().SpanID() != spanNamed(t, rec, "toolgate.driver").SpanContext().SpanID() {
		t.Error("the nested call span is not a child of the driver stage")
	}
	if !attrs(n)[AttrNested].AsBool() {
		t.Error("toolgate.nested not set")
	}
	auths := 0
	for _, s := range rec.Ended() {
		if s.Name() == "toolgate.auth" {
			auths++
		}
	}
	if auths != 1 {
		t.Errorf("%d auth spans, want the parent's only", auths)
	}
}

func TestIncomingTraceContext(t *testing.T) {
	local := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	remote := Extract(context.Background(), propagation.MapCarrier{TraceParentField: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	grpcIn := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TraceParentField, incoming))
	for _, tc := range []struct {
		name, traceParent, want string
		ctx                     context.Context
	}{
		{name: "nothing sent", ctx: context.Background(), want: ""},
		{name: "a door's traceparent", ctx: context.Background(), traceParent: incoming, want: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "a malformed traceparent is ignored", ctx: context.Background(), traceParent: "00-XYZ-00f067aa0ba902b7-01", want: ""},
		{name: "an all-zero trace id is ignored", ctx: context.Background(), traceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", want: ""},
		{name: "HTTP headers already extracted", ctx: remote, want: "0af7651916cd43dd8448eb211c80319c"},
		{name: "the door's _meta wins over HTTP headers", ctx: remote, traceParent: incoming, want: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "a span of this process stays the parent", ctx: local, traceParent: incoming, want: trace.TraceID{1}.String()},
		{name: "gRPC metadata", ctx: grpcIn, want: "4bf92f3577b34da6a3ce929d0e0e4736"},
		{name: "gRPC metadata sent twice is ignored", want: "",
			ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs(TraceParentField, incoming, TraceParentField, incoming))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TraceID(Incoming(tc.ctx, tc.traceParent)); got != tc.want {
				t.Fatalf("trace id %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExtractDropsOversizedTraceContext(t *testing.T) {
	huge := incoming + strings.Repeat("-ab", 100)
	if got := TraceID(Extract(context.Background(), propagation.MapCarrier{TraceParentField: huge})); got != "" {
		t.Errorf("an oversized traceparent was taken: %s", got)
	}
	state := "rojo=00f067aa0ba902b7"
	for _, tc := range []struct {
		name, state string
		kept        bool
	}{
		{name: "a small tracestate is kept", state: state, kept: true},
		{name: "a tracestate over 512 bytes is dropped", state: state + strings.Repeat(",k"+strings.Repeat("x", 20)+"=v", 25), kept: false},
		{name: "a malformed tracestate is dropped", state: "not a tracestate", kept: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := Extract(context.Background(), propagation.MapCarrier{TraceParentField: incoming, TraceStateField: tc.state})
			sc := trace.SpanContextFromContext(ctx)
			if !sc.IsValid() {
				t.Fatal("the traceparent was dropped with the tracestate")
			}
			if got := sc.TraceState().String(); (got != "") != tc.kept {
				t.Fatalf("tracestate %q kept = %v, want %v", got, got != "", tc.kept)
			}
		})
	}
}

func TestMCPServerSpanParentsTheCall(t *testing.T) {
	tel, rec := recorded(t)
	ambient := Extract(context.Background(), propagation.MapCarrier{TraceParentField: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	ctx, door := tel.StartMCP(ambient, MCPRequest{Method: "tools/call", Tool: "echo", ProtocolVersion: "2025-06-18", TraceParent: incoming})
	_, call := tel.StartCall(Incoming(ctx, incoming), Call{Tool: "echo", FrontDoor: "mcp"})
	call.End(Result{Outcome: OutcomeToolError})
	door.End("tool_error")
	srv := spanNamed(t, rec, "tools/call echo")
	if srv.SpanKind() != trace.SpanKindServer {
		t.Errorf("kind %v, want SERVER", srv.SpanKind())
	}
	if srv.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the server span's parent is not _meta's traceparent: %v", srv.Parent())
	}
	if len(srv.Links()) != 1 || srv.Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("links %v, want the HTTP request's context", srv.Links())
	}
	a := attrs(srv)
	for k, v := range map[attribute.Key]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
		"gen_ai.operation.name": "execute_tool", "mcp.protocol.version": "2025-06-18", "network.transport": "tcp",
		"network.protocol.name": "http", "error.type": "tool_error"} {
		if a[k].AsString() != v {
			t.Errorf("%s = %q, want %q", k, a[k].AsString(), v)
		}
	}
	if spanNamed(t, rec, "execute_tool echo").Parent().SpanID() != srv.SpanContext().SpanID() {
		t.Error("the call span is not the server span's child")
	}
}

// discard is an exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// allowedCallStages are the stages of an allowed call that writes six
// artifacts: each is redacted and written once (timed, without a span).
var allowedCallStages = []Stage{StageClaim, StageEvidenceWrite, StageDecide, StageDriver,
	StageRedact, StageRedact, StageRedact, StageRedact, StageRedact, StageRedact,
	StageEvidenceWrite, StageEvidenceWrite, StageEvidenceWrite, StageEvidenceWrite, StageEvidenceWrite}

// BenchmarkStartCall is the telemetry cost of one allowed call, its
// execute_tool span, its auth span and the fifteen stages such a
// call has, with a caller's traceparent: nil Telemetry (nothing
// recorded), a no-op provider (metrics only), and the SDK with a batch
// processor over an exporter that discards.
func BenchmarkStartCall(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	withSDK, err := New(Options{TracerProvider: sdk})
	if err != nil {
		b.Fatal(err)
	}
	noProvider, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		tel  *Telemetry
	}{{"nil", nil}, {"noop", noProvider}, {"sdk", withSDK}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := WithAuth(context.Background(), time.Now(), time.Now())
			for b.Loop() {
				cctx, call := bc.tel.StartCall(Incoming(ctx, incoming), Call{Tool: "workspace.read_file", RequestID: "req-1"})
				var times StageTimes
				for _, s := range allowedCallStages {
					_, st := bc.tel.StartStage(cctx, s)
					times.Add(s, st.End())
				}
				bc.tel.AnnotateCall(cctx, times)
				call.End(Result{Decision: "allow", RuleID: "r", Outcome: OutcomeRan, EvidencePrefix: "requests/req-1/"})
			}
		})
	}
}
