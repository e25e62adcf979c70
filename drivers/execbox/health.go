package execbox

import (
	"fmt"

	"github.com/toolgate/toolgate/drivers"
)

var _ drivers.HealthReporter = (*Driver)(nil)

// Health reports the runner pool: healthy while it holds an idle runner or
// its last start succeeded, unhealthy after failed starts with nothing
// idle (a broken runner command). Without a pool, or over WebSocket, a
// runner is started or dialled per call and there is nothing to know
// before one; the driver is then healthy until closed.
func (d *Driver) Health() drivers.Health {
	h := drivers.Health{Healthy: true, Engine: d.Engine()}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		h.Healthy, h.Detail = false, "driver closed"
		return h
	}
	if d.pool != nil {
		idle, size, failures := d.pool.state()
		h.Healthy = idle > 0 || failures == 0
		h.Detail = fmt.Sprintf("pool: %d of %d runners idle", idle, size)
		if failures > 0 {
			h.Detail += fmt.Sprintf(", %d consecutive runner failures", failures)
		}
	}
	return h
}

// state returns the idle runners, the pool's size and the consecutive
// failed starts and idle deaths.
func (p *pool) state() (idle, size, failures int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle), p.size, p.failures
}
