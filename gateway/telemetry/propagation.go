package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// W3C trace context fields, as HTTP headers, gRPC metadata keys and MCP
// _meta keys.
const (
	TraceParentField = "traceparent"
	TraceStateField  = "tracestate"
)

// Bounds of what a caller may hand the gateway as trace context. A longer
// traceparent is no version the gateway knows; a longer tracestate is
// dropped whole (W3C lets a receiver drop what it cannot keep), so that a
// caller cannot make every span and every executor request carry
// kilobytes of its choosing.
const (
	maxTraceParentLen = 128
	maxTraceStateLen  = 512
)

// boundedCarrier reads trace context fields through a carrier, dropping
// those over the bounds. It never writes.
type boundedCarrier struct{ propagation.TextMapCarrier }

// Get returns the field, or "" when it is too long.
func (c boundedCarrier) Get(key string) string {
	v := c.TextMapCarrier.Get(key)
	switch strings.ToLower(key) {
	case TraceParentField:
		if len(v) > maxTraceParentLen {
			return ""
		}
	case TraceStateField:
		if len(v) > maxTraceStateLen {
			return ""
		}
	}
	return v
}

// Extract returns ctx with the W3C trace context carrier holds as its
// remote parent. A malformed traceparent is ignored and ctx returned as
// it is; a malformed or oversized tracestate is dropped. It never fails:
// a caller's trace context is advice, never a reason to refuse a call.
func Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return propagation.TraceContext{}.Extract(ctx, boundedCarrier{carrier})
}

// Inject writes the trace context of ctx (traceparent, and tracestate
// when there is one) into carrier; nothing when ctx holds no valid span
// context.
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	propagation.TraceContext{}.Inject(ctx, carrier)
}

// Incoming returns ctx with the parent the call's span should have:
//
//   - a span already started in this process (a front door's span, the
//     driver stage of the parent of a nested call) stays the parent;
//   - else traceParent, the W3C traceparent a front door read from its
//     protocol (MCP's params._meta), when it is valid;
//   - else a remote context already extracted (HTTP headers, by the
//     front-door plumbing);
//   - else the traceparent and tracestate of the gRPC metadata.
func Incoming(ctx context.Context, traceParent string) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() && !sc.IsRemote() {
		return ctx
	}
	if traceParent != "" {
		if out := Extract(ctx, propagation.MapCarrier{TraceParentField: traceParent}); trace.SpanContextFromContext(out).IsValid() {
			return out
		}
	}
	if sc.IsValid() {
		return ctx
	}
	return extractMetadata(ctx)
}

// extractMetadata extracts the trace context of the call's gRPC metadata
// without copying the rest of it: this runs on every call. A field sent
// more than once is no valid trace context and reads as absent.
func extractMetadata(ctx context.Context) context.Context {
	tp := metadata.ValueFromIncomingContext(ctx, TraceParentField)
	if len(tp) != 1 {
		return ctx
	}
	carrier := propagation.MapCarrier{TraceParentField: tp[0]}
	if ts := metadata.ValueFromIncomingContext(ctx, TraceStateField); len(ts) == 1 {
		carrier[TraceStateField] = ts[0]
	}
	return Extract(ctx, carrier)
}
