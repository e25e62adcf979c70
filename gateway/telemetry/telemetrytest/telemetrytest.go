// Package telemetrytest reads a Telemetry's metrics back in tests.
package telemetrytest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/gateway/telemetry"
)

// New is a Telemetry with a registry of its own, labelled with version.
func New(t testing.TB, version string) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.New(telemetry.Options{Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return tel
}

// Value is the value of the series of name whose labels include every
// name=value pair of labels (a counter's or gauge's value; a histogram's
// count), summed over the series that match.
func Value(t testing.TB, tel *telemetry.Telemetry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var have []string
			for _, l := range m.GetLabel() {
				have = append(have, fmt.Sprintf("%s=%s", l.GetName(), l.GetValue()))
			}
			if !containsAll(have, labels) {
				continue
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
