package execbox

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

func TestHealthReportsThePool(t *testing.T) {
	t.Parallel()
	t.Run("a filled pool is healthy and says how many runners wait", func(t *testing.T) {
		r := execboxtest.NewStdio(t, execboxtest.Script{started(), done("ok")})
		d := newDriver(t, Config{Command: r.Command, Pool: 2})
		eventually(t, "the pool filled", func() bool { return len(idlePids(d)) == 2 })
		if h := d.Health(); !h.Healthy || h.Engine != "execbox-stdio" || h.Detail != "pool: 2 of 2 runners idle" {
			t.Errorf("health %+v", h)
		}
	})
	t.Run("a runner that dies before any call makes the pool unhealthy", func(t *testing.T) {
		d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", "exit 1"}, Pool: 1})
		eventually(t, "a start failed", func() bool { return !d.Health().Healthy })
		if h := d.Health(); !strings.Contains(h.Detail, "0 of 1 runners idle") || !strings.Contains(h.Detail, "failures") {
			t.Errorf("health %+v", h)
		}
	})
	t.Run("without a pool the driver is healthy until closed", func(t *testing.T) {
		d := newDriver(t, Config{URL: "ws://127.0.0.1:1/run"})
		if h := d.Health(); !h.Healthy || h.Engine != "execbox-ws" {
			t.Errorf("health %+v", h)
		}
		d.Close()
		if h := d.Health(); h.Healthy || h.Detail != "driver closed" {
			t.Errorf("health after Close %+v", h)
		}
	})
}
