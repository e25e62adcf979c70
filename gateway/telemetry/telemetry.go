// Package telemetry is the gateway's view for operators: Prometheus
// metrics of every call and of each stage it passes through, and
// OpenTelemetry spans of every call and of the stages it passes once
// (StartStage says why not the others). It never records arguments,
// outputs or secrets: only what a call was (tool, door, decision, rule,
// outcome) and how long its stages took.
//
// A nil *Telemetry records nothing, so the pipeline calls it
// unconditionally and tests that do not look at telemetry need not build
// one.
package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Stage is one step of the pipeline a call's latency is split into.
type Stage uint8

// The stages, in the order a call meets them.
const (
	StageAuth          Stage = iota // who the caller is
	StageClaim                      // the create-only write of request.json
	StageDecide                     // Cedar (and the shadow set)
	StageDriver                     // the tool itself
	StageRedact                     // the redactor over every artifact
	StageEvidenceWrite              // each artifact's store write
	numStages
)

var stageNames = [numStages]string{"auth", "claim", "decide", "driver", "redact", "evidence_write"}

// String is the stage's label value and span name suffix.
func (s Stage) String() string {
	if s >= numStages {
		return "unknown"
	}
	return stageNames[s]
}

// Options configure a Telemetry. Every field is optional.
type Options struct {
	// Registerer receives the metrics; nil keeps them in a registry of
	// the Telemetry's own (Registry returns it).
	Registerer prometheus.Registerer
	// TracerProvider makes the spans; nil makes none.
	TracerProvider trace.TracerProvider
	// Version is toolgate_build_info's version label; "" reads unknown.
	Version string
}

// Telemetry records the gateway's metrics and spans. It is safe for
// concurrent use.
type Telemetry struct {
	registry *prometheus.Registry // nil when Options.Registerer was given
	tracer   trace.Tracer
	// tracing is false when the provider makes no spans (none given, or
	// a noop one): then no span is started at all, which with a noop
	// tracer still cost a context and a span per stage.
	tracing bool
	// stageSeconds is toolgate_stage_duration_seconds, one observer per
	// stage bound once so that the hot path does no label lookup.
	stageSeconds [numStages]prometheus.Observer
	// m are the other metrics (metrics.go).
	m metrics
}

// Metric names, the contract with the dashboard and the alert rules in
// the repository.
const (
	MetricStageDuration = "toolgate_stage_duration_seconds"
)

// New returns a Telemetry with its metrics registered.
func New(opts Options) (*Telemetry, error) {
	t := &Telemetry{}
	reg := opts.Registerer
	if reg == nil {
		t.registry = prometheus.NewRegistry()
		reg = t.registry
	}
	tp := opts.TracerProvider
	_, isNoop := tp.(noop.TracerProvider)
	t.tracing = tp != nil && !isNoop
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	t.tracer = tp.Tracer("github.com/toolgate/toolgate/gateway")

	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricStageDuration,
		Help:    "Time a call spent in each stage of the pipeline.",
		Buckets: durationBuckets,
	}, []string{"stage"})
	if err := reg.Register(stages); err != nil {
		return nil, err
	}
	for s := range numStages {
		t.stageSeconds[s] = stages.WithLabelValues(s.String())
	}
	if err := t.m.register(reg, opts.Version); err != nil {
		return nil, err
	}
	return t, nil
}

// Registry is the registry New made, or nil when Options.Registerer was
// given.
func (t *Telemetry) Registry() *prometheus.Registry {
	if t == nil {
		return nil
	}
	return t.registry
}

// StageSpan is one stage of one call in progress; End it once.
type StageSpan struct {
	t     *Telemetry
	stage Stage
	start time.Time
	span  trace.Span
}

// StartStage starts stage s of the call in ctx: a timer for the stage's
// histogram and, for the stages a call passes through once (auth, claim,
// decide, driver), a child span of the call's. The returned context
// carries the stage's span, for work nested inside it.
//
// Redaction and store writes get no span: they happen once per artifact,
// four to six times a call, interleaved, and a span each was 12 spans a
// call and about 7% of its CPU. Their times are summed onto the call span
// instead (StageTimes, AnnotateCall).
func (t *Telemetry) StartStage(ctx context.Context, s Stage) (context.Context, StageSpan) {
	if t == nil {
		return ctx, StageSpan{}
	}
	span := trace.SpanFromContext(context.Background()) // a noop span
	if t.tracing && !s.perArtifact() {
		ctx, span = t.tracer.Start(ctx, stageSpanName(s))
	}
	return ctx, StageSpan{t: t, stage: s, start: time.Now(), span: span}
}

// perArtifact reports whether a call meets s once per artifact.
func (s Stage) perArtifact() bool { return s == StageRedact || s == StageEvidenceWrite }

// End ends the stage, recording its duration, which it returns.
func (s StageSpan) End() time.Duration {
	if s.t == nil {
		return 0
	}
	d := time.Since(s.start)
	s.t.stageSeconds[s.stage].Observe(d.Seconds())
	s.span.End()
	return d
}

// StageTimes sums a call's per-artifact stages.
type StageTimes struct {
	Redact, EvidenceWrite time.Duration
	// Artifacts counts the store writes.
	Artifacts int
}

// Add adds a per-artifact stage's duration; other stages are ignored.
func (st *StageTimes) Add(s Stage, d time.Duration) {
	switch s {
	case StageRedact:
		st.Redact += d
	case StageEvidenceWrite:
		st.EvidenceWrite += d
		st.Artifacts++
	}
}

// Call describes a call as it starts: nothing of its arguments.
type Call struct {
	// Tool is the tool id as a label: Telemetry never sees an id the
	// catalog does not know (the gateway passes OtherTool instead), so
	// a caller cannot grow the label set.
	Tool string
	// FrontDoor is the door the call came through; "" for gRPC RunTool.
	FrontDoor string
	// RequestID and Nested are span attributes, never labels. RequestID
	// is set only once it is known to match the request id pattern: a
	// caller's malformed id never reaches a span.
	RequestID string
	Nested    bool
}

// OtherTool is the tool label of every id the catalog does not know.
const OtherTool = "other"

// Result is how a call ended.
type Result struct {
	// Decision is "allow", "deny", or "" when the call ended before one
	// was made.
	Decision string
	// RuleID decided the call; policy authors bound the set.
	RuleID string
	// Outcome is one of the Outcome constants.
	Outcome string
	// EvidencePrefix is requests/<request_id>/ once the request is
	// claimed, for an operator to go from a span to the evidence.
	EvidencePrefix string
	// ErrorType is the gRPC code of an OutcomeError ("InvalidArgument"),
	// the span's error.type.
	ErrorType string
}

// The outcomes of a call.
const (
	OutcomeRan       = "ran"        // the tool ran and exited 0
	OutcomeToolError = "tool_error" // the tool ran and exited non-zero
	OutcomeDenied    = "denied"     // policy said no; nothing ran
	OutcomeError     = "error"      // the call failed (a gRPC error)
)

// CallSpan is one call in progress; End it once.
type CallSpan struct {
	t     *Telemetry
	call  Call
	start time.Time
	span  trace.Span
}

// StartCall starts the span of a call and returns a context carrying it;
// the stages of the call are its children.
func (t *Telemetry) StartCall(ctx context.Context, c Call) (context.Context, CallSpan) {
	if t == nil {
		return ctx, CallSpan{}
	}
	span := trace.SpanFromContext(context.Background()) // a noop span
	if t.tracing {
		ctx, span = t.startCallSpan(ctx, c)
	}
	return ctx, CallSpan{t: t, call: c, start: time.Now(), span: span}
}

// End ends the call.
func (c CallSpan) End(r Result) {
	if c.t == nil {
		return
	}
	c.t.m.countCall(c.call.Tool, r, time.Since(c.start))
	endCallSpan(c.span, r)
}
