package tpmjs

import (
	"time"

	"github.com/toolgate/toolgate/drivers"
)

var _ drivers.HealthReporter = (*Driver)(nil)

// probeState is what the last health probe found. It is kept beside the
// engine names under Driver.mu.
type probeState struct {
	checkedAt time.Time // zero until a probe finished
	err       string    // "" when the last /health answered 200
}

// Health reports the last /health probe: healthy when it answered, with
// when it was asked. It never contacts the executor, so it answers at once
// even while the executor hangs. Before the first probe finishes the
// executor is taken as healthy, as Run takes it: calls are not held back
// by probes.
func (d *Driver) Health() drivers.Health {
	engine := d.Engine()
	d.mu.Lock()
	defer d.mu.Unlock()
	h := drivers.Health{Healthy: d.probed.err == "", Engine: engine, CheckedAt: d.probed.checkedAt}
	switch {
	case d.closed:
		h.Healthy, h.Detail = false, "driver closed"
	case d.probed.err != "":
		h.Detail = d.probed.err
	case d.probed.checkedAt.IsZero():
		h.Detail = "not probed yet"
	}
	return h
}

// noteProbe records the outcome of one /health probe.
func (d *Driver) noteProbe(at time.Time, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probed.checkedAt = at.UTC()
	d.probed.err = ""
	if err != nil {
		d.probed.err = "health probe failed: " + err.Error()
	}
}
