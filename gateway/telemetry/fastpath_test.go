package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestStagesWithoutTracingCostNoAllocation: with no tracer provider, or a
// noop one, a stage and a call are timed but start no span, and a span
// already in the context stays the current one.
func TestStagesWithoutTracingCostNoAllocation(t *testing.T) {
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"no tracer provider", nil},
		{"a noop tracer provider", noop.NewTracerProvider()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := New(Options{TracerProvider: tc.tp})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			allocs := testing.AllocsPerRun(100, func() {
				cctx, call := tel.StartCall(ctx, Call{Tool: "t"})
				_, stage := tel.StartStage(cctx, StageDecide)
				stage.End()
				call.End(Result{Outcome: OutcomeRan})
			})
			if allocs != 0 {
				t.Errorf("a call with one stage allocates %v times", allocs)
			}
			families, err := tel.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			var observed uint64
			for _, f := range families {
				if f.GetName() == MetricStageDuration {
					for _, m := range f.GetMetric() {
						observed += m.GetHistogram().GetSampleCount()
					}
				}
			}
			if want := uint64(100 + 1); observed != want {
				t.Errorf("%s observed %d stages, want %d", MetricStageDuration, observed, want)
			}
		})
	}
}
