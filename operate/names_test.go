package operate_test

import (
	"context"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/gateway/telemetry"
)

// describingRegisterer registers into a registry and keeps every metric
// description it is given, so that the test sees metrics that have no
// series yet.
type describingRegisterer struct {
	*prometheus.Registry
	t     *testing.T
	descs []*prometheus.Desc
}

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return r.Registry.Register(c)
}

func (r *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			r.t.Fatalf("MustRegister: %v", err)
		}
	}
}

// gatewayMetrics is the gateway's metric families' types (COUNTER,
// GAUGE, HISTOGRAM …) by name, after one of everything it counts has
// happened; and the description of any registered metric that is still
// missing from them.
func gatewayMetrics(t *testing.T) (map[string]string, []string) {
	t.Helper()
	reg := &describingRegisterer{Registry: prometheus.NewRegistry(), t: t}
	tel, err := telemetry.New(telemetry.Options{Registerer: reg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, call := tel.StartCall(context.Background(), telemetry.Call{Tool: telemetry.OtherTool, RequestID: "r"})
	_, stage := tel.StartStage(ctx, telemetry.StageDecide)
	stage.End()
	call.End(telemetry.Result{Decision: "deny", RuleID: "r", Outcome: telemetry.OutcomeDenied})
	tel.LimitHit(telemetry.LimitMaxConcurrentCalls)
	tel.StoreError(telemetry.StoreOpPut)
	tel.StoreRetry()
	tel.ShadowFlip()
	tel.PolicyReload(false)
	tel.RedactionFindings("r", 1)
	tel.FrontDoorRequest(telemetry.DoorGRPC)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]string{}
	for _, mf := range mfs {
		families[mf.GetName()] = mf.GetType().String()
	}
	var missing []string
	for _, d := range reg.descs {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(families)), func(name string) bool {
			return strings.Contains(d.String(), `fqName: "`+name+`"`)
		}) {
			missing = append(missing, d.String())
		}
	}
	return families, missing
}

// seriesNames are the names the samples of the family n of type typ are
// stored under in Prometheus.
func seriesNames(n, typ string) []string {
	switch typ {
	case "HISTOGRAM":
		return []string{n + "_bucket", n + "_sum", n + "_count"}
	case "SUMMARY":
		return []string{n, n + "_sum", n + "_count"}
	}
	return []string{n}
}

var metricName = regexp.MustCompile(`\btoolgate_[a-z0-9_]*[a-z0-9]`)

// namesIn are the toolgate_* names text mentions.
func namesIn(text string) map[string]bool {
	names := map[string]bool{}
	for _, n := range metricName.FindAllString(text, -1) {
		names[n] = true
	}
	return names
}

func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// knownSeries maps each series name the gateway's families store samples
// under to its family.
func knownSeries(t *testing.T) map[string]string {
	t.Helper()
	families, missing := gatewayMetrics(t)
	if len(missing) > 0 {
		t.Fatalf("registered metrics this test does not make a sample of (add a call to gatewayMetrics): %v", missing)
	}
	known := map[string]string{}
	for name, typ := range families {
		for _, s := range seriesNames(name, typ) {
			known[s] = name
		}
	}
	if _, ok := known[telemetry.MetricCalls]; !ok || len(families) < 15 {
		t.Fatalf("gathered %d families from the gateway's registry, without %s", len(families), telemetry.MetricCalls)
	}
	return known
}

// unknownNames are the toolgate_* names in text that are no series of the
// gateway's, sorted.
func unknownNames(text string, known map[string]string) []string {
	var unknown []string
	for n := range namesIn(text) {
		if _, ok := known[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// TestDashboardAndAlertsNameOnlyTheGatewaysMetrics: a renamed or
// misspelt metric leaves a panel empty and an alert silent forever, so
// every name the dashboard, the alerts and their unit tests use must be
// one the gateway registers; and every metric the gateway registers is on
// the dashboard.
func TestDashboardAndAlertsNameOnlyTheGatewaysMetrics(t *testing.T) {
	known := knownSeries(t)
	for _, path := range []string{dashboardFile, alertsFile, alertTestsFile} {
		if u := unknownNames(readText(t, path), known); len(u) > 0 {
			t.Errorf("%s uses %v, which the gateway does not export", path, u)
		}
	}
	onDashboard := namesIn(readText(t, dashboardFile))
	families := map[string]bool{}
	for s, family := range known {
		families[family] = families[family] || onDashboard[s]
	}
	for family, shown := range families {
		if !shown {
			t.Errorf("%s is not on the dashboard", family)
		}
	}
}

// TestTheNameCheckCatchesMetricsTheGatewayDoesNotExport shows the check
// above is not vacuous.
func TestTheNameCheckCatchesMetricsTheGatewayDoesNotExport(t *testing.T) {
	known := knownSeries(t)
	tests := []struct{ name, expr string }{
		{"a misspelt counter", `rate(toolgate_call_total[5m])`},
		{"a histogram suffix on a counter", `rate(toolgate_calls_total_bucket[5m])`},
		{"a histogram without its suffix", `rate(toolgate_call_duration_seconds[5m])`},
		{"a metric the gateway does not have", `toolgate_approvals_oldest_age_seconds > 3600`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if u := unknownNames(tc.expr, known); len(u) != 1 {
				t.Fatalf("unknownNames(%q) = %v, want the one name it uses", tc.expr, u)
			}
		})
	}
}

// TestAlertsUseTheGatewaysLabelValues: a selector on a label value or a
// gauge value the gateway never writes matches nothing.
func TestAlertsUseTheGatewaysLabelValues(t *testing.T) {
	var rules ruleFile
	readYAML(t, alertsFile, &rules)
	var exprs strings.Builder
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs.WriteString(r.Expr)
		}
	}
	for _, want := range []string{
		telemetry.MetricPolicyLastReloadOK + ") == 0",
		`limit=~"` + telemetry.LimitMaxConcurrentCalls + "|" + telemetry.LimitMaxConnections + `"`,
	} {
		if !strings.Contains(exprs.String(), want) {
			t.Errorf("no alert selects %s", want)
		}
	}
}
