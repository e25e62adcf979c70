package telemetry

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, the contract with the dashboard and the alert rules in
// the repository: renaming one breaks them.
const (
	// MetricCalls counts finished calls by decision (allow, deny, or ""
	// when the call ended before one), rule_id, tool (a catalog id or
	// "other") and outcome (ran, tool_error, denied, error).
	MetricCalls = "toolgate_calls_total"
	// MetricCallDuration is the time from a call's start to its end, by
	// outcome.
	MetricCallDuration = "toolgate_call_duration_seconds"
	// MetricCallsInFlight is the calls holding a max_concurrent_calls slot.
	MetricCallsInFlight = "toolgate_calls_in_flight"
	// MetricLimitHits counts work refused because a limit was reached, by
	// limit (the Limit constants).
	MetricLimitHits = "toolgate_limit_hits_total"
	// MetricStoreErrors counts failed evidence store operations, by op
	// (the StoreOp constants).
	MetricStoreErrors = "toolgate_evidence_store_errors_total"
	// MetricStoreRetries counts store writes tried again: each artifact
	// the spool flusher tries to move to the store.
	MetricStoreRetries = "toolgate_evidence_store_retries_total"
	// MetricSpoolArtifacts is the artifacts waiting in the local spool for
	// the store to take them.
	MetricSpoolArtifacts = "toolgate_spool_artifacts"
	// MetricSpoolOldestAge is the age of the oldest spooled artifact; 0
	// when the spool is empty.
	MetricSpoolOldestAge = "toolgate_spool_oldest_age_seconds"
	// MetricShadowFlips counts decisions a shadow policy set would have
	// decided the other way.
	MetricShadowFlips = "toolgate_shadow_flips_total"
	// MetricApprovalsPending is the approval requests waiting for a person.
	MetricApprovalsPending = "toolgate_approvals_pending"
	// MetricApprovalsOldestAge is how long the longest-waiting of them has
	// waited; 0 when none waits.
	MetricApprovalsOldestAge = "toolgate_approvals_oldest_pending_age_seconds"
	// MetricPolicyReloads counts policy reloads by result (ok, rejected).
	MetricPolicyReloads = "toolgate_policy_reloads_total"
	// MetricPolicyLastReloadOK is 1 when the last policy reload took (or
	// none was tried since start), 0 while the last one is rejected: an
	// alert on it lasts as long as the folder stays broken.
	MetricPolicyLastReloadOK = "toolgate_policy_last_reload_successful"
	// MetricRedactionFindings counts secrets the redactor removed from
	// evidence, by the redaction rule that found them.
	MetricRedactionFindings = "toolgate_redaction_findings_total"
	// MetricFrontDoorRequests counts requests each door received, by door
	// (grpc, mcp, tpmjs, agentspaces, …), before authentication.
	MetricFrontDoorRequests = "toolgate_frontdoor_requests_total"
	// MetricTampering counts records read back from the evidence store
	// that failed authentication, by record (the Record constants): a
	// forged, altered, moved or untrusted record the gateway refused to
	// act on.
	MetricTampering = "toolgate_evidence_tampering_total"
	// MetricBuildInfo is 1, labelled with the running version.
	MetricBuildInfo = "toolgate_build_info"
)

// The limits MetricLimitHits counts.
const (
	LimitMaxConcurrentCalls = "max_concurrent_calls" // a call refused RESOURCE_EXHAUSTED
	LimitMaxConnections     = "max_connections"      // a connection left waiting in the backlog
	LimitMaxRequestBytes    = "max_request_bytes"    // a gRPC request or front-door body refused as too large
	LimitArgs               = "args"                 // arguments too many or nested too deep
)

// The store operations MetricStoreErrors counts.
const (
	StoreOpPut  = "put"
	StoreOpGet  = "get"
	StoreOpList = "list"
)

// The records MetricTampering counts, by what the gateway was about to
// do with them.
const (
	RecordApproval      = "approval"       // approval.json or approval_request.json
	RecordAttempt       = "attempt"        // a decision or dispatch record
	RecordClaim         = "claim"          // request.json, read by recovery
	RecordResponse      = "response"       // a stored response and its manifest, replayed
	RecordLog           = "log"            // a log batch, lease or checkpoint
	RecordInstanceLease = "instance_lease" // the instance's writer lease
)

// tamperingRecords are MetricTampering's record label values.
var tamperingRecords = [...]string{RecordApproval, RecordAttempt, RecordClaim, RecordResponse, RecordLog, RecordInstanceLease}

// The results MetricPolicyReloads counts.
const (
	ReloadOK       = "ok"
	ReloadRejected = "rejected"
)

// The door label of calls through gRPC RunTool.
const DoorGRPC = "grpc"

// OtherLabel replaces a label value once its label has maxLabelValues
// distinct values: a flood of new values cannot grow the series count.
const OtherLabel = "other"

// maxLabelValues caps the distinct values of one open label (rule_id,
// tool, a redaction rule, a door), far above what a policy folder or a
// catalog names.
const maxLabelValues = 1000

// maxCallSeries caps toolgate_calls_total's label sets: past it, new sets
// are counted under rule_id and tool "other".
const maxCallSeries = 4096

// durationBuckets are the call and stage histograms' buckets, in seconds:
// from a tenth of a millisecond (a cached decision) to a minute (a shell).
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// outcomes are the outcome label's values; any other counts as error.
var outcomes = [...]string{OutcomeRan, OutcomeToolError, OutcomeDenied, OutcomeError}

// outcomeIndex is o's place in outcomes.
func outcomeIndex(o string) int {
	for i, v := range outcomes {
		if v == o {
			return i
		}
	}
	return len(outcomes) - 1
}

// Gauges read state the gateway holds, at scrape time. Any field may be
// nil; its gauges then read 0.
type Gauges struct {
	// CallsInFlight is toolgate_calls_in_flight.
	CallsInFlight func() int
	// Spool is toolgate_spool_artifacts and
	// toolgate_spool_oldest_age_seconds, read together so that a scrape
	// looks at the spool once.
	Spool func() (artifacts int, oldestAge time.Duration)
	// Approvals is toolgate_approvals_pending and
	// toolgate_approvals_oldest_pending_age_seconds, read together.
	Approvals func() (pending int, oldestAge time.Duration)
}

// metrics are the Telemetry's Prometheus metrics other than the stage
// histogram.
type metrics struct {
	calls       *prometheus.CounterVec
	callSeries  boundedMap[callKey, prometheus.Counter]
	callRules   labelSet
	callTools   labelSet
	callSeconds [len(outcomes)]prometheus.Observer

	limitHits   *prometheus.CounterVec
	storeErrors *prometheus.CounterVec
	tampering   *prometheus.CounterVec
	retries     prometheus.Counter
	shadowFlips prometheus.Counter
	reloads     [2]prometheus.Counter // ok, rejected
	lastReload  prometheus.Gauge

	findings      *prometheus.CounterVec
	findingSeries boundedMap[string, prometheus.Counter]
	doors         *prometheus.CounterVec
	doorSeries    boundedMap[string, prometheus.Counter]

	gauges atomic.Pointer[Gauges]
}

// callKey is one label set of toolgate_calls_total.
type callKey struct{ decision, rule, tool, outcome string }

// register makes the metrics and registers them with reg.
func (m *metrics) register(reg prometheus.Registerer, version string) error {
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricCalls,
		Help: "Calls finished, by decision (allow, deny, or empty when the call failed before one), the rule_id that decided it, tool (a catalog id, or other) and outcome (ran, tool_error, denied, error).",
	}, []string{"decision", "rule_id", "tool", "outcome"})
	callSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricCallDuration,
		Help:    "Time from a call's start to its end, by outcome.",
		Buckets: durationBuckets,
	}, []string{"outcome"})
	for i, o := range outcomes {
		m.callSeconds[i] = callSeconds.WithLabelValues(o)
	}
	m.limitHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricLimitHits,
		Help: "Work refused because a limit was reached, by limit (max_concurrent_calls, max_connections, max_request_bytes, args).",
	}, []string{"limit"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricStoreErrors,
		Help: "Evidence store operations that failed, by op (put, get, list).",
	}, []string{"op"})
	m.tampering = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricTampering,
		Help: "Records read back from the evidence store that failed authentication and were not acted on, by record (approval, attempt, claim, response, log, instance_lease).",
	}, []string{"record"})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricStoreRetries,
		Help: "Evidence store writes tried again: each spooled artifact the flusher tries to move to the store.",
	})
	m.shadowFlips = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricShadowFlips,
		Help: "Decisions a shadow policy set would have decided the other way.",
	})
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricPolicyReloads,
		Help: "Policy reloads, by result: ok (the new sets are in force, or nothing changed) or rejected (the running sets stay).",
	}, []string{"result"})
	m.reloads = [2]prometheus.Counter{reloads.WithLabelValues(ReloadOK), reloads.WithLabelValues(ReloadRejected)}
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricPolicyLastReloadOK,
		Help: "1 when the last policy reload took (or none was tried since start), 0 while the last one is rejected and the previous sets stay.",
	})
	m.lastReload.Set(1)
	m.findings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRedactionFindings,
		Help: "Secrets the redactor removed from evidence, by the redaction rule that found them.",
	}, []string{"rule"})
	m.doors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricFrontDoorRequests,
		Help: "Requests each front door received, by door: grpc for RunTool, else the door's name in front_doors.",
	}, []string{"door"})
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricBuildInfo,
		Help: "Always 1; its version label is the running Toolgate's version.",
	}, []string{"version"})
	if version == "" {
		version = "unknown"
	}
	buildInfo.WithLabelValues(version).Set(1)

	// The label values known in advance read 0 from the start, so that a
	// rate over them is defined before the first hit.
	for _, l := range []string{LimitMaxConcurrentCalls, LimitMaxConnections, LimitMaxRequestBytes, LimitArgs} {
		m.limitHits.WithLabelValues(l)
	}
	for _, op := range []string{StoreOpPut, StoreOpGet, StoreOpList} {
		m.storeErrors.WithLabelValues(op)
	}
	for _, r := range tamperingRecords {
		m.tampering.WithLabelValues(r)
	}
	m.callSeries.init(maxCallSeries)
	m.findingSeries.init(maxLabelValues)
	m.doorSeries.init(maxLabelValues)
	m.callRules.max, m.callTools.max = maxLabelValues, maxLabelValues
	for _, c := range []prometheus.Collector{m.calls, callSeconds, m.limitHits, m.storeErrors, m.tampering,
		m.retries, m.shadowFlips, reloads, m.lastReload, m.findings, m.doors, buildInfo, &gaugeCollector{m: m}} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// countCall counts one finished call.
func (m *metrics) countCall(tool string, r Result, d time.Duration) {
	i := outcomeIndex(r.Outcome)
	m.callSeconds[i].Observe(d.Seconds())
	k := callKey{decision: r.Decision, rule: r.RuleID, tool: tool, outcome: outcomes[i]}
	if k.decision != "allow" && k.decision != "deny" {
		k.decision = ""
	}
	c, ok := m.callSeries.get(k)
	if !ok {
		c = m.callCounter(k)
	}
	c.Inc()
}

// callCounter binds k's counter, the first time k is seen, with rule_id
// and tool bounded.
func (m *metrics) callCounter(k callKey) prometheus.Counter {
	orig := k
	k.rule = m.callRules.bound(k.rule)
	k.tool = m.callTools.bound(k.tool)
	if c, ok := m.callSeries.get(k); ok {
		m.callSeries.put(orig, c)
		return c
	}
	if m.callSeries.full() {
		k.rule, k.tool = OtherLabel, OtherLabel
	}
	c := m.calls.WithLabelValues(k.decision, k.rule, k.tool, k.outcome)
	m.callSeries.put(orig, c)
	return c
}

// ObserveStage records d as a duration of stage s without a span: for a
// stage timed where no call span exists yet (authentication in the
// transport).
func (t *Telemetry) ObserveStage(s Stage, d time.Duration) {
	if t == nil || s >= numStages {
		return
	}
	t.stageSeconds[s].Observe(d.Seconds())
}

// LimitHit counts one refusal by limit, one of the Limit constants.
func (t *Telemetry) LimitHit(limit string) {
	if t == nil {
		return
	}
	t.m.limitHits.WithLabelValues(limit).Inc()
}

// StoreError counts one failed evidence store operation; op is one of
// the StoreOp constants.
func (t *Telemetry) StoreError(op string) {
	if t == nil {
		return
	}
	t.m.storeErrors.WithLabelValues(op).Inc()
}

// Tampering counts one record that failed authentication; record is one
// of the Record constants (any other counts as log).
func (t *Telemetry) Tampering(record string) {
	if t == nil {
		return
	}
	for _, r := range tamperingRecords {
		if r == record {
			t.m.tampering.WithLabelValues(r).Inc()
			return
		}
	}
	t.m.tampering.WithLabelValues(RecordLog).Inc()
}

// StoreRetry counts one store write tried again.
func (t *Telemetry) StoreRetry() {
	if t == nil {
		return
	}
	t.m.retries.Inc()
}

// ShadowFlip counts one decision a shadow set would have flipped.
func (t *Telemetry) ShadowFlip() {
	if t == nil {
		return
	}
	t.m.shadowFlips.Inc()
}

// PolicyReload counts one reload: ok, or rejected (the running policies
// stay).
func (t *Telemetry) PolicyReload(ok bool) {
	if t == nil {
		return
	}
	if ok {
		t.m.reloads[0].Inc()
		t.m.lastReload.Set(1)
	} else {
		t.m.reloads[1].Inc()
		t.m.lastReload.Set(0)
	}
}

// RedactionFindings counts n secrets found by the redaction rule named
// rule.
func (t *Telemetry) RedactionFindings(rule string, n int) {
	if t == nil || n <= 0 {
		return
	}
	t.m.boundedCounter(&t.m.findingSeries, t.m.findings, rule).Add(float64(n))
}

// FrontDoorRequest counts one request received by door.
func (t *Telemetry) FrontDoorRequest(door string) {
	if t == nil {
		return
	}
	t.m.boundedCounter(&t.m.doorSeries, t.m.doors, door).Inc()
}

// boundedCounter is vec's counter for value, bound once, or its "other"
// counter once series holds maxLabelValues values.
func (m *metrics) boundedCounter(series *boundedMap[string, prometheus.Counter], vec *prometheus.CounterVec, value string) prometheus.Counter {
	if c, ok := series.get(value); ok {
		return c
	}
	if series.full() {
		return vec.WithLabelValues(OtherLabel)
	}
	c := vec.WithLabelValues(value)
	series.put(value, c)
	return c
}

// SetGauges makes the state gauges read g at each scrape, replacing what
// an earlier call gave.
func (t *Telemetry) SetGauges(g Gauges) {
	if t == nil {
		return
	}
	t.m.gauges.Store(&g)
}

// gaugeCollector reports the gauges that read the gateway's state.
type gaugeCollector struct{ m *metrics }

var (
	descInFlight = prometheus.NewDesc(MetricCallsInFlight,
		"Calls running now, each holding a limits.max_concurrent_calls slot.", nil, nil)
	descSpool = prometheus.NewDesc(MetricSpoolArtifacts,
		"Artifacts waiting in the local spool for the evidence store.", nil, nil)
	descSpoolAge = prometheus.NewDesc(MetricSpoolOldestAge,
		"Age of the oldest artifact in the local spool; 0 when it is empty.", nil, nil)
	descApprovals = prometheus.NewDesc(MetricApprovalsPending,
		"Approval requests waiting for a person's answer.", nil, nil)
	descApprovalsAge = prometheus.NewDesc(MetricApprovalsOldestAge,
		"How long the approval request waiting longest has waited; 0 when none waits.", nil, nil)
)

// Describe implements prometheus.Collector.
func (gc *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descInFlight
	ch <- descSpool
	ch <- descSpoolAge
	ch <- descApprovals
	ch <- descApprovalsAge
}

// Collect implements prometheus.Collector.
func (gc *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	g := gc.m.gauges.Load()
	if g == nil {
		g = &Gauges{}
	}
	inFlight := 0
	if g.CallsInFlight != nil {
		inFlight = g.CallsInFlight()
	}
	ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(inFlight))
	countAndAge(ch, g.Spool, descSpool, descSpoolAge)
	countAndAge(ch, g.Approvals, descApprovals, descApprovalsAge)
}

// countAndAge reports a queue's length and its oldest entry's age, read
// once by f; both are 0 when f is nil.
func countAndAge(ch chan<- prometheus.Metric, f func() (int, time.Duration), count, age *prometheus.Desc) {
	var n int
	var oldest time.Duration
	if f != nil {
		n, oldest = f()
	}
	ch <- prometheus.MustNewConstMetric(count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(age, prometheus.GaugeValue, oldest.Seconds())
}

// boundedMap is a read-mostly map that stops growing at max entries.
// A read takes a shared lock and allocates nothing.
type boundedMap[K comparable, V any] struct {
	mu  sync.RWMutex
	m   map[K]V
	max int
}

func (b *boundedMap[K, V]) init(max int) { b.m, b.max = make(map[K]V), max }

func (b *boundedMap[K, V]) get(k K) (V, bool) {
	b.mu.RLock()
	v, ok := b.m[k]
	b.mu.RUnlock()
	return v, ok
}

// put stores v under k unless the map is full.
func (b *boundedMap[K, V]) put(k K, v V) {
	b.mu.Lock()
	if len(b.m) < b.max {
		b.m[k] = v
	}
	b.mu.Unlock()
}

func (b *boundedMap[K, V]) full() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.m) >= b.max
}

// labelSet admits the first max distinct values of a label and maps every
// later one to OtherLabel.
type labelSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
	max  int
}

// bound is v if v is admitted, else OtherLabel.
func (s *labelSet) bound(v string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[v]; ok {
		return v
	}
	if s.seen == nil {
		s.seen = make(map[string]struct{})
	}
	if len(s.seen) >= s.max {
		return OtherLabel
	}
	s.seen[v] = struct{}{}
	return v
}
