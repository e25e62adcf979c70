package tpmjs

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// TestRunSendsTheCallsTraceContext: the executor continues the call's
// trace (W3C traceparent and tracestate of the span in ctx); a call
// without one sends neither header.
func TestRunSendsTheCallsTraceContext(t *testing.T) {
	t.Parallel()
	state, err := trace.ParseTraceState("rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, TraceState: state,
	}))
	for _, tc := range []struct {
		name                string
		ctx                 context.Context
		traceparent, tstate string
	}{
		{name: "a traced call", ctx: traced,
			traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tstate: "rojo=00f067aa0ba902b7"},
		{name: "an untraced call", ctx: context.Background()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := tpmjstest.New(t, tpmjstest.NodeV10)
			d := newDriver(t, fake.URL, nil)
			if r, err := d.Run(tc.ctx, call(tpmjstest.EchoTool, nil)); err != nil || r.ExitCode != 0 {
				t.Fatalf("Run = %+v, %v", r, err)
			}
			got := fake.Requests()
			if len(got) != 1 {
				t.Fatalf("%d requests", len(got))
			}
			if h := got[0].Header; h.Get("traceparent") != tc.traceparent || h.Get("tracestate") != tc.tstate {
				t.Errorf("traceparent %q tracestate %q, want %q %q", h.Get("traceparent"), h.Get("tracestate"), tc.traceparent, tc.tstate)
			}
		})
	}
}
