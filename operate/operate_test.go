// Package operate_test checks what Toolgate ships for its operators in
// operate/: the Prometheus alert rules (promtool check rules, and their
// unit tests with promtool test rules), the Grafana dashboard (against a
// schema of the dashboard model and with every query parsed by promtool),
// and that both name only metrics the gateway registers. There is no Go
// code in operate/ besides these tests.
package operate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"gopkg.in/yaml.v3"
)

const (
	alertsFile     = "prometheus/alerts.yml"
	alertTestsFile = "prometheus/alerts_test.yml"
	dashboardFile  = "grafana/toolgate.json"
	schemaFile     = "grafana/dashboard.schema.json"
)

// promtool is the path of promtool. It is never skipped: the test
// command installs the pinned version into .ci/bin and puts it on PATH.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not on PATH: run the tests with `bash .ci/test.sh`, which installs the pinned version into .ci/bin")
	}
	return p
}

// runPromtool runs promtool with args in this directory and returns its
// combined output, and an error when it exits non-zero.
func runPromtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool(t), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

func TestAlertRulesPassPromtoolCheck(t *testing.T) {
	if out, err := runPromtool(t, "check", "rules", "--lint=all", "--lint-fatal", alertsFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestEachAlertFiresOnItsSeriesAndStaysQuietOnNormalTraffic(t *testing.T) {
	if out, err := runPromtool(t, "test", "rules", alertTestsFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// unitTests is the part of a promtool unit test file these tests read.
type unitTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestEveryAlertIsTestedBothWaysAndTellsWhatToDo holds each alert to a
// unit test where it fires and one where it stays quiet, a severity an
// on-call rota routes on, and the annotations a page needs.
func TestEveryAlertIsTestedBothWaysAndTellsWhatToDo(t *testing.T) {
	var rules ruleFile
	var tests unitTests
	readYAML(t, alertsFile, &rules)
	readYAML(t, alertTestsFile, &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: needs a unit test where it fires (%v) and one where it stays quiet (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if want := "Operating Toolgate → Alerts → " + r.Alert; !strings.Contains(r.Annotations["runbook"], want) {
				t.Errorf("%s: runbook %q does not point at %q", r.Alert, r.Annotations["runbook"], want)
			}
		}
	}
	if n < 4 {
		t.Fatalf("%s has %d alerts; store failing, spool growing, policy reload rejected and deny spike are required", alertsFile, n)
	}
}

// readDashboard returns the dashboard as generic JSON.
func readDashboard(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// dashboardSchema is the committed schema of the dashboard model.
func dashboardSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", schemaFile, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: %v", schemaFile, err)
	}
	return rs
}

func TestDashboardFollowsTheSchema(t *testing.T) {
	if err := dashboardSchema(t).Validate(readDashboard(t)); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
}

// TestTheSchemaRejectsBrokenDashboards shows the schema check is not
// vacuous: each edit a careless export or hand edit makes is caught.
func TestTheSchemaRejectsBrokenDashboards(t *testing.T) {
	rs := dashboardSchema(t)
	firstPanel := func(d map[string]any) map[string]any {
		for _, p := range d["panels"].([]any) {
			if p := p.(map[string]any); p["type"] != "row" {
				return p
			}
		}
		t.Fatal("the dashboard has no panel besides rows")
		return nil
	}
	firstTarget := func(d map[string]any) map[string]any { return firstPanel(d)["targets"].([]any)[0].(map[string]any) }
	tests := []struct {
		name   string
		break_ func(d map[string]any)
	}{
		{"a data source uid exported from one Grafana is rejected", func(d map[string]any) {
			firstPanel(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}},
		{"a query with its own data source uid is rejected", func(d map[string]any) {
			firstTarget(d)["datasource"] = map[string]any{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
		}},
		{"a query without an expression is rejected", func(d map[string]any) { delete(firstTarget(d), "expr") }},
		{"a query without a refId is rejected", func(d map[string]any) { delete(firstTarget(d), "refId") }},
		{"a panel without a place on the grid is rejected", func(d map[string]any) { delete(firstPanel(d), "gridPos") }},
		{"a panel wider than the grid is rejected", func(d map[string]any) { firstPanel(d)["gridPos"].(map[string]any)["w"] = 25 }},
		{"a panel without queries is rejected", func(d map[string]any) { firstPanel(d)["targets"] = []any{} }},
		{"a dashboard without a uid is rejected", func(d map[string]any) { delete(d, "uid") }},
		{"a dashboard without the datasource variable is rejected", func(d map[string]any) {
			vars := d["templating"].(map[string]any)["list"].([]any)
			d["templating"].(map[string]any)["list"] = slices.DeleteFunc(vars, func(v any) bool { return v.(map[string]any)["name"] == "datasource" })
		}},
		{"a dashboard from before Grafana 11 is rejected", func(d map[string]any) { d["schemaVersion"] = 27 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := readDashboard(t)
			tc.break_(d)
			err := rs.Validate(d)
			if err == nil {
				t.Fatal("the schema accepted it")
			}
			t.Logf("rejected: %v", err)
		})
	}
}

// grafanaVariables are what Grafana puts in place of the variables the
// dashboard's queries use, for promtool to parse them.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "30s",
	"$__range", "6h",
	"${instance}", ".*",
	"$instance", ".*",
)

// dashboardQueries are every PromQL expression in d: the panels' (and
// rows' panels') targets and the annotations.
func dashboardQueries(d map[string]any) []string {
	var exprs []string
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			p, _ := p.(map[string]any)
			for _, tg := range asList(p["targets"]) {
				if e, ok := tg.(map[string]any)["expr"].(string); ok {
					exprs = append(exprs, e)
				}
			}
			walk(asList(p["panels"]))
		}
	}
	walk(asList(d["panels"]))
	if a, ok := d["annotations"].(map[string]any); ok {
		for _, an := range asList(a["list"]) {
			if e, ok := an.(map[string]any)["expr"].(string); ok {
				exprs = append(exprs, e)
			}
		}
	}
	return exprs
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// checkQueries has promtool parse exprs, with Grafana's variables
// substituted, as the recording rules of a temporary rule file.
func checkQueries(t *testing.T, exprs []string) (string, error) {
	t.Helper()
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	rules := make([]rule, len(exprs))
	for i, e := range exprs {
		e = grafanaVariables.Replace(e)
		if strings.Contains(e, "$") {
			return "", fmt.Errorf("query %q uses a variable the dashboard does not define", exprs[i])
		}
		rules[i] = rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e}
	}
	b, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml") // JSON is YAML
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return runPromtool(t, "check", "rules", path)
}

func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	exprs := dashboardQueries(readDashboard(t))
	if len(exprs) < 15 {
		t.Fatalf("found %d queries in %s; the walk over its panels missed some", len(exprs), dashboardFile)
	}
	if out, err := checkQueries(t, exprs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestTheQueryCheckRejectsBrokenQueries shows promtool parses what
// checkQueries writes: a typo in a panel's query fails the test command.
func TestTheQueryCheckRejectsBrokenQueries(t *testing.T) {
	tests := []struct{ name, expr, want string }{
		{"an unclosed parenthesis", `sum(rate(toolgate_calls_total[$__rate_interval])`, "unclosed left parenthesis"},
		{"a range vector where an instant one is needed", `sum(toolgate_calls_total[5m])`, "got range vector"},
		{"a misspelt function", `histogram_quantil(0.99, rate(toolgate_call_duration_seconds_bucket[5m]))`, "unknown function"},
		{"a variable the dashboard does not define", `rate(toolgate_calls_total{job="$job"}[5m])`, "variable the dashboard does not define"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := `sum(rate(toolgate_calls_total{instance=~"$instance"}[$__rate_interval]))`
			out, err := checkQueries(t, []string{good, tc.expr})
			if err == nil {
				t.Fatalf("%q passed the check:\n%s", tc.expr, out)
			}
			if !strings.Contains(out+err.Error(), tc.want) {
				t.Fatalf("%q failed, but not with %q: %v\n%s", tc.expr, tc.want, err, out)
			}
		})
	}
}

// TestTheAlertTestsCatchABrokenAlert shows each alert's unit tests are not
// vacuous: with the part of its rule that keeps it quiet (or makes it
// fire) taken out, its test group fails.
func TestTheAlertTestsCatchABrokenAlert(t *testing.T) {
	rules, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, group, from, to string }{
		{"a store alert without its 5 minutes fires on one retried blip", "^store failing",
			"(rate(toolgate_evidence_store_errors_total[5m])) > 0\n        for: 5m\n", "(rate(toolgate_evidence_store_errors_total[5m])) > 0\n"},
		{"a spool alert on depth alone fires on a steady spool", "^a spool that keeps growing", "\n          and deriv(toolgate_spool_artifacts[10m]) > 0", ""},
		{"a spool age threshold of 100 minutes misses a 12-minute-old artifact", "^spooled evidence older", "toolgate_spool_oldest_age_seconds > 600", "toolgate_spool_oldest_age_seconds > 6000"},
		{"a reload alert on the wrong value fires on accepted reloads", "^a rejected reload", "(toolgate_policy_last_reload_successful) == 0", "(toolgate_policy_last_reload_successful) == 1"},
		{"a deny spike without the traffic guard fires on two denies", "^a deny ratio far above", "\n          and\n          sum by (job, instance) (increase(toolgate_calls_total{decision=\"deny\"}[5m])) >= 10", ""},
		{"a capacity alert on every limit fires on oversized requests", "^calls turned away", `toolgate_limit_hits_total{limit=~"max_concurrent_calls|max_connections"}`, "toolgate_limit_hits_total"},
		{"an approvals alert at 20 hours misses a 2-hour wait", "^an approval waiting over 2 hours", "toolgate_approvals_oldest_pending_age_seconds > 2 * 3600", "toolgate_approvals_oldest_pending_age_seconds > 20 * 3600"},
		{"a tampering alert that waits for a second refusal misses the first", "^one refused record fires",
			"(increase(toolgate_evidence_tampering_total[1h])) > 0", "(increase(toolgate_evidence_tampering_total[1h])) > 1"},
		{"an approvals alert at 1 hour fires on a 100-minute wait", "^an approval waiting over 2 hours", "toolgate_approvals_oldest_pending_age_seconds > 2 * 3600", "toolgate_approvals_oldest_pending_age_seconds > 1 * 3600"},
	}
	dir := t.TempDir()
	tests0, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yml"), tests0, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n := strings.Count(string(rules), tc.from); n != 1 {
				t.Fatalf("%s holds %q %d times, want once", alertsFile, tc.from, n)
			}
			broken := strings.Replace(string(rules), tc.from, tc.to, 1)
			if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), []byte(broken), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := runPromtool(t, "test", "rules", "--run", tc.group, filepath.Join(dir, "alerts_test.yml"))
			if err == nil || !strings.Contains(out, "FAILED") {
				t.Fatalf("the unit tests passed with the alert broken: %v\n%s", err, out)
			}
		})
	}
}
