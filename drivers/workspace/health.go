package workspace

import "github.com/toolgate/toolgate/drivers"

var _ drivers.HealthReporter = (*Driver)(nil)

// Health reports whether the workspace folder can serve operations: one
// stat of the open folder, the check Run makes before every operation.
func (d *Driver) Health() drivers.Health {
	h := drivers.Health{Healthy: true, Engine: d.Engine()}
	if err := d.usable(); err != nil {
		h.Healthy, h.Detail = false, err.Error()
	}
	return h
}
