package tpmjs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// waitProbed waits until d's first health probe has finished.
func waitProbed(t *testing.T, d *Driver) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.Health().CheckedAt.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("no health probe finished within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHealthReportsTheLastProbe(t *testing.T) {
	t.Parallel()
	t.Run("an executor that answers is healthy, with its engine and the time it was asked", func(t *testing.T) {
		exec := tpmjstest.New(t, tpmjstest.NodeV10)
		d := newDriver(t, exec.URL, nil)
		before := time.Now()
		d.Start(context.Background())
		waitProbed(t, d)
		h := d.Health()
		if !h.Healthy || h.Detail != "" || !strings.HasPrefix(h.Engine, "tpmjs:") || h.CheckedAt.Before(before.Add(-time.Second)) {
			t.Errorf("health %+v", h)
		}
	})
	t.Run("an executor whose health check fails is unhealthy, saying why", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "installing", http.StatusServiceUnavailable)
		}))
		t.Cleanup(srv.Close)
		d := newDriver(t, srv.URL, nil)
		d.Start(context.Background())
		waitProbed(t, d)
		if h := d.Health(); h.Healthy || !strings.Contains(h.Detail, "HTTP 503") {
			t.Errorf("health %+v, want unhealthy with HTTP 503", h)
		}
	})
	t.Run("a closed driver is unhealthy", func(t *testing.T) {
		exec := tpmjstest.New(t, tpmjstest.NodeV10)
		d := newDriver(t, exec.URL, nil)
		d.Close()
		if h := d.Health(); h.Healthy || h.Detail != "driver closed" {
			t.Errorf("health %+v", h)
		}
	})
	t.Run("an executor never probed is taken as healthy, as Run takes it", func(t *testing.T) {
		exec := tpmjstest.New(t, tpmjstest.NodeV10)
		d := newDriver(t, exec.URL, nil)
		if h := d.Health(); !h.Healthy || h.Detail != "not probed yet" || len(exec.Requests()) != 0 {
			t.Errorf("health %+v after %d requests", h, len(exec.Requests()))
		}
	})
}
