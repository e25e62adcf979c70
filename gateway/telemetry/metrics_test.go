package telemetry

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/toolgate/toolgate/gateway/telemetry/telemetrytest"
)

func newTestTelemetry(t testing.TB) *Telemetry {
	t.Helper()
	tel, err := New(Options{Version: "1.2.3"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tel
}

// call runs one call through tel as the gateway does.
func call(tel *Telemetry, tool string, r Result) {
	_, span := tel.StartCall(context.Background(), Call{Tool: tool, RequestID: "r"})
	span.End(r)
}

func TestCallsAreCountedByDecisionRuleToolAndOutcome(t *testing.T) {
	tel := newTestTelemetry(t)
	call(tel, "fs.read", Result{Decision: "allow", RuleID: "read-ok", Outcome: OutcomeRan})
	call(tel, "fs.read", Result{Decision: "allow", RuleID: "read-ok", Outcome: OutcomeRan})
	call(tel, "fs.write", Result{Decision: "deny", RuleID: "no-write", Outcome: OutcomeDenied})
	call(tel, OtherTool, Result{Outcome: OutcomeError})
	want := map[string]float64{
		`decision="",outcome="error",rule_id="",tool="other"`:                 1,
		`decision="allow",outcome="ran",rule_id="read-ok",tool="fs.read"`:     2,
		`decision="deny",outcome="denied",rule_id="no-write",tool="fs.write"`: 1,
	}
	if got := samples(t, tel, MetricCalls); !maps.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", MetricCalls, got, want)
	}
	if n := len(samples(t, tel, MetricCallDuration)); n != 4 {
		t.Fatalf("%s has %d series, want one per outcome (4)", MetricCallDuration, n)
	}
}

func TestAFloodOfDistinctRuleAndToolIDsDoesNotGrowTheSeriesCount(t *testing.T) {
	tel := newTestTelemetry(t)
	for i := range 20000 {
		call(tel, fmt.Sprintf("tool-%d", i), Result{Decision: "deny", RuleID: fmt.Sprintf("rule-%d", i), Outcome: OutcomeDenied})
		call(tel, OtherTool, Result{Decision: fmt.Sprintf("d-%d", i), Outcome: fmt.Sprintf("o-%d", i)})
		tel.FrontDoorRequest(fmt.Sprintf("door-%d", i))
		tel.RedactionFindings(fmt.Sprintf("rule-%d", i), 1)
	}
	if n := len(samples(t, tel, MetricCalls)); n > maxCallSeries+12 {
		t.Fatalf("%s grew to %d series under a flood of ids; bound is %d", MetricCalls, n, maxCallSeries+12)
	}
	for _, name := range []string{MetricFrontDoorRequests, MetricRedactionFindings} {
		if n := len(samples(t, tel, name)); n > maxLabelValues+1 {
			t.Fatalf("%s grew to %d series under a flood of labels", name, n)
		}
	}
	if n := len(samples(t, tel, MetricCallDuration)); n != len(outcomes) {
		t.Fatalf("%s has %d series; unknown outcomes must count as error", MetricCallDuration, n)
	}
}

func TestCountersAndGaugesReadWhatTheGatewayReports(t *testing.T) {
	tel := newTestTelemetry(t)
	tel.LimitHit(LimitMaxConcurrentCalls)
	tel.StoreError(StoreOpPut)
	tel.StoreError(StoreOpPut)
	tel.StoreRetry()
	tel.ShadowFlip()
	tel.PolicyReload(true)
	tel.PolicyReload(false)
	tel.RedactionFindings("aws_key", 3)
	tel.RedactionFindings("aws_key", 0)
	tel.FrontDoorRequest(DoorGRPC)
	tel.ObserveStage(StageAuth, time.Millisecond)
	tel.SetGauges(Gauges{
		CallsInFlight: func() int { return 2 },
		Spool:         func() (int, time.Duration) { return 5, 90 * time.Second },
		Approvals:     func() (int, time.Duration) { return 1, time.Hour },
	})
	for name, want := range map[string]float64{
		MetricLimitHits: 1, MetricStoreErrors: 2, MetricStoreRetries: 1, MetricShadowFlips: 1,
		MetricRedactionFindings: 3, MetricFrontDoorRequests: 1, MetricCallsInFlight: 2,
		MetricSpoolArtifacts: 5, MetricSpoolOldestAge: 90, MetricApprovalsPending: 1, MetricApprovalsOldestAge: 3600,
		MetricBuildInfo: 1,
	} {
		if got := sum(t, tel, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	want := map[string]float64{`result="ok"`: 1, `result="rejected"`: 1}
	if got := samples(t, tel, MetricStageDuration)[`stage="auth"`]; got != 1 {
		t.Errorf("%s{stage=auth} has %v observations, want 1", MetricStageDuration, got)
	}
	if got := samples(t, tel, MetricPolicyReloads); !maps.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", MetricPolicyReloads, got, want)
	}
}

func TestGaugesReadZeroBeforeTheGatewayGivesThem(t *testing.T) {
	tel := newTestTelemetry(t)
	for name, want := range map[string]int{MetricLimitHits: 4, MetricStoreErrors: 3, MetricPolicyReloads: 2} {
		if got := len(samples(t, tel, name)); got != want {
			t.Errorf("%s has %d series before anything happened, want %d at 0", name, got, want)
		}
	}
	for _, name := range []string{MetricCallsInFlight, MetricSpoolArtifacts, MetricSpoolOldestAge, MetricApprovalsPending, MetricApprovalsOldestAge} {
		if got := sum(t, tel, name); got != 0 {
			t.Errorf("%s = %v before SetGauges, want 0", name, got)
		}
	}
}

func TestANilTelemetryRecordsNothingAndDoesNotPanic(t *testing.T) {
	var tel *Telemetry
	call(tel, "x", Result{Outcome: OutcomeRan})
	tel.LimitHit(LimitMaxConnections)
	tel.StoreError(StoreOpGet)
	tel.StoreRetry()
	tel.ShadowFlip()
	tel.PolicyReload(false)
	tel.RedactionFindings("r", 1)
	tel.FrontDoorRequest("mcp")
	tel.SetGauges(Gauges{})
	if tel.Registry() != nil {
		t.Fatal("a nil Telemetry has a registry")
	}
}

// samples are telemetrytest.Samples of tel's registry.
func samples(t *testing.T, tel *Telemetry, name string) map[string]float64 {
	t.Helper()
	return telemetrytest.Samples(t, tel.Registry(), name)
}

// sum is the sum of every sample of the metric called name.
func sum(t *testing.T, tel *Telemetry, name string) float64 {
	t.Helper()
	return telemetrytest.Value(t, tel.Registry(), name)
}

// BenchmarkCallSpanEnd is the per-call cost of StartCall and End with
// metrics (calls_total and call_duration_seconds, a no-op tracer) against
// a nil Telemetry, the baseline, in the same run, and of the metrics
// alone.
func BenchmarkCallSpanEnd(b *testing.B) {
	ctx := context.Background()
	c := Call{Tool: "fs.read", RequestID: "req-1"}
	r := Result{Decision: "allow", RuleID: "read-ok", Outcome: OutcomeRan}
	for _, bc := range []struct {
		name string
		tel  *Telemetry
	}{{"nil", nil}, {"metrics", newTestTelemetry(b)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, span := bc.tel.StartCall(ctx, c)
				span.End(r)
			}
		})
	}
	// The metrics alone, without the (no-op) span: one histogram
	// observation and one counter increment through the bound-series map.
	b.Run("counters-only", func(b *testing.B) {
		tel := newTestTelemetry(b)
		b.ReportAllocs()
		for b.Loop() {
			tel.m.countCall(c.Tool, r, time.Millisecond)
		}
	})
}
