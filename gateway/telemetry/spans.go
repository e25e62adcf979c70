package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Toolgate's own span attributes. Every value is from a bounded or
// gateway-checked set: never an argument, an output, an environment value
// or a credential.
const (
	AttrDecision       = attribute.Key("toolgate.decision")
	AttrRuleID         = attribute.Key("toolgate.rule_id")
	AttrOutcome        = attribute.Key("toolgate.outcome")
	AttrEvidencePrefix = attribute.Key("toolgate.evidence_prefix")
	AttrFrontDoor      = attribute.Key("toolgate.front_door")
	AttrRequestID      = attribute.Key("toolgate.request_id")
	AttrNested         = attribute.Key("toolgate.nested")
	// The per-artifact stages, summed over a call (see StartStage).
	AttrRedactSeconds        = attribute.Key("toolgate.redact.seconds")
	AttrEvidenceWriteSeconds = attribute.Key("toolgate.evidence_write.seconds")
	AttrEvidenceWriteCount   = attribute.Key("toolgate.evidence_write.count")
)

// ToolTypeExtension is gen_ai.tool.type of every call: the tool runs on
// the gateway's side and acts on the world, which the GenAI conventions
// call an extension.
const ToolTypeExtension = "extension"

// startCallSpan starts the execute_tool span of a call (GenAI semantic
// conventions: INTERNAL, named "execute_tool {gen_ai.tool.name}"), and
// the auth stage span the transport timed before the call existed. It is
// called only when t.tracing.
func (t *Telemetry) startCallSpan(ctx context.Context, c Call) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(c.Tool),
		semconv.GenAIToolType(ToolTypeExtension),
		AttrFrontDoor.String(frontDoorLabel(c.FrontDoor)),
	}
	if c.RequestID != "" {
		attrs = append(attrs, semconv.GenAIToolCallID(c.RequestID), AttrRequestID.String(c.RequestID))
	}
	if c.Nested {
		attrs = append(attrs, AttrNested.Bool(true))
	}
	ctx, span := t.tracer.Start(ctx, "execute_tool "+c.Tool,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if a, ok := ctx.Value(authKey{}).(authTiming); ok && !c.Nested && span.IsRecording() {
		_, auth := t.tracer.Start(ctx, stageSpanName(StageAuth), trace.WithTimestamp(a.start))
		auth.End(trace.WithTimestamp(a.end))
	}
	return ctx, span
}

// stageSpanNames are the stage spans' names, built once.
var stageSpanNames = func() (names [numStages]string) {
	for s := range numStages {
		names[s] = "toolgate." + s.String()
	}
	return names
}()

// stageSpanName is stage s's span name, "toolgate.<stage>".
func stageSpanName(s Stage) string {
	if s >= numStages {
		return "toolgate.unknown"
	}
	return stageSpanNames[s]
}

// frontDoorLabel is the door's name, "grpc" for plain RunTool.
func frontDoorLabel(door string) string {
	if door == "" {
		return "grpc"
	}
	return door
}

// endCallSpan records how the call ended on its span and ends it. An
// error outcome sets the span's status, with error.type the gRPC code.
func endCallSpan(span trace.Span, r Result) {
	if span.IsRecording() {
		attrs := []attribute.KeyValue{AttrOutcome.String(r.Outcome)}
		if r.Decision != "" {
			attrs = append(attrs, AttrDecision.String(r.Decision))
		}
		if r.RuleID != "" {
			attrs = append(attrs, AttrRuleID.String(r.RuleID))
		}
		if r.EvidencePrefix != "" {
			attrs = append(attrs, AttrEvidencePrefix.String(r.EvidencePrefix))
		}
		if r.Outcome == OutcomeError {
			errType := r.ErrorType
			if errType == "" {
				errType = "_OTHER"
			}
			attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
			// The description is the code, never the error's message:
			// messages quote what the caller sent.
			span.SetStatus(codes.Error, errType)
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// AnnotateCall records st on the call span in ctx, when one is being
// recorded: toolgate.redact.seconds, toolgate.evidence_write.seconds and
// toolgate.evidence_write.count.
func (t *Telemetry) AnnotateCall(ctx context.Context, st StageTimes) {
	if t == nil || !t.tracing || st == (StageTimes{}) {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		AttrRedactSeconds.Float64(st.Redact.Seconds()),
		AttrEvidenceWriteSeconds.Float64(st.EvidenceWrite.Seconds()),
		AttrEvidenceWriteCount.Int(st.Artifacts),
	)
}

// authKey holds an authTiming in a context.
type authKey struct{}

// authTiming is when authentication of a call started and ended.
type authTiming struct{ start, end time.Time }

// WithAuth records in ctx when the call's authentication started and
// ended: it runs in the transport, before the call's span exists, and
// becomes the call span's toolgate.auth child.
func WithAuth(ctx context.Context, start, end time.Time) context.Context {
	return context.WithValue(ctx, authKey{}, authTiming{start: start, end: end})
}

// TraceID is the hex trace id of the span in ctx, or "" when ctx holds no
// valid span context: after StartCall, the call span's trace; with
// tracing off, the trace the caller sent, if any.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// MCPRequest describes a request entering the MCP front door, for its
// server span (MCP semantic conventions).
type MCPRequest struct {
	// Method is mcp.method.name ("tools/call").
	Method string
	// Tool is gen_ai.tool.name: a catalog id the door serves.
	Tool string
	// ProtocolVersion is mcp.protocol.version, SessionID mcp.session.id;
	// either may be "".
	ProtocolVersion, SessionID string
	// TraceParent and TraceState are the W3C trace context of the
	// request's params._meta, the span's parent when valid; the HTTP
	// request's (in ctx) is then linked.
	TraceParent, TraceState string
}

// DoorSpan is a front door's span of one request; End it once.
type DoorSpan struct{ span trace.Span }

// StartMCP starts the SERVER span of an MCP request, named
// "{mcp.method.name} {gen_ai.tool.name}". The returned context carries
// it: the call's execute_tool span becomes its child.
func (t *Telemetry) StartMCP(ctx context.Context, r MCPRequest) (context.Context, DoorSpan) {
	if t == nil {
		return ctx, DoorSpan{}
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	if r.TraceParent != "" {
		meta := Extract(ctx, propagation.MapCarrier{TraceParentField: r.TraceParent, TraceStateField: r.TraceState})
		if sc := trace.SpanContextFromContext(meta); sc.IsValid() {
			// The transport's context is independent of the message's:
			// MCP's conventions make it a link.
			if ambient := trace.SpanContextFromContext(ctx); ambient.IsValid() && !ambient.Equal(sc) {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: ambient}))
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	attrs := []attribute.KeyValue{
		semconv.McpMethodNameKey.String(r.Method),
		semconv.NetworkTransportTCP,
		semconv.NetworkProtocolName("http"),
	}
	name := r.Method
	if r.Tool != "" {
		name += " " + r.Tool
		attrs = append(attrs, semconv.GenAIToolName(r.Tool), semconv.GenAIOperationNameExecuteTool)
	}
	if r.ProtocolVersion != "" {
		attrs = append(attrs, semconv.McpProtocolVersion(r.ProtocolVersion))
	}
	if r.SessionID != "" {
		attrs = append(attrs, semconv.McpSessionID(r.SessionID))
	}
	ctx, span := t.tracer.Start(ctx, name, append(opts, trace.WithAttributes(attrs...))...)
	return ctx, DoorSpan{span: span}
}

// End ends the span; errorType, when not "", is its error.type (a
// JSON-RPC error code, or tool_error for a result with isError) and
// marks it failed.
func (s DoorSpan) End(errorType string) {
	if s.span == nil {
		return
	}
	if errorType != "" && s.span.IsRecording() {
		s.span.SetAttributes(semconv.ErrorTypeKey.String(errorType))
		s.span.SetStatus(codes.Error, errorType)
	}
	s.span.End()
}
