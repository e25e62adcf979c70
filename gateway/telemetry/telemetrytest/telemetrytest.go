// Package telemetrytest reads metrics back in tests, from a Telemetry's
// registry or any other prometheus.Gatherer.
package telemetrytest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Samples are the series of the metric called name, keyed by their labels
// (name="value",… in name order), each with a counter's or gauge's value
// or a histogram's sample count.
func Samples(t testing.TB, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range gather(t, g, name) {
		out[strings.Join(s.labels, ",")] = s.value
	}
	return out
}

// Value sums the series of name whose labels include every name=value
// pair of labels (unquoted: "stage=auth"); with no labels, every series.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	total := 0.0
	for _, s := range gather(t, g, name) {
		if hasAll(s.labels, labels) {
			total += s.value
		}
	}
	return total
}

// series is one series: its labels as name="value" and its value.
type series struct {
	labels []string
	value  float64
}

func gather(t testing.TB, g prometheus.Gatherer, name string) []series {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []series
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var s series
			for _, l := range m.GetLabel() {
				s.labels = append(s.labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			s.value = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out = append(out, s)
		}
	}
	return out
}

// hasAll reports whether have (name="value" pairs) holds each name=value
// pair of want.
func hasAll(have, want []string) bool {
	for _, w := range want {
		name, value, _ := strings.Cut(w, "=")
		if !slices.Contains(have, fmt.Sprintf("%s=%q", name, value)) {
			return false
		}
	}
	return true
}
