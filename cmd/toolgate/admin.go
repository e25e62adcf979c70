package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
)

// The admin listener's bounds: it answers a scraper and a few probes, so
// a handful of connections and short timeouts are plenty, and a client
// that dawdles cannot hold it.
const (
	adminMaxConns          = 16
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	adminWriteTimeout      = 30 * time.Second
	adminIdleTimeout       = 60 * time.Second
	adminMaxHeaderBytes    = 16 << 10
	// adminScrapeTimeout bounds one /metrics answer (the spool gauges walk
	// a folder).
	adminScrapeTimeout = 10 * time.Second
	// adminMaxScrapes caps the /metrics answers in progress; more are
	// answered 503.
	adminMaxScrapes = 4
)

// adminServer is the running admin listener; a nil one is off.
type adminServer struct {
	srv  *http.Server
	addr net.Addr
}

// startAdmin serves the admin listener of cfg unless it is off: the
// gateway's metrics and the Go runtime's on /metrics, liveness on /healthz,
// and on /readyz the gRPC health state hs holds (200 while serving, 503
// once shutdown has begun). log should be the gateway's redacting logger.
func startAdmin(ctx context.Context, cfg config.AdminConfig, g *gateway.Gateway, hs *health.Server, log *slog.Logger) (*adminServer, error) {
	addr := cfg.Addr()
	if addr == "" {
		return nil, nil
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		// The default address is one per host: a second gateway on the
		// same host needs its own.
		return nil, fmt.Errorf("admin.listen: %w (give each gateway on a host its own admin.listen, or --admin-listen ADDR|off)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("admin.listen: %w", err)
	}
	srv := &http.Server{
		Handler:           adminHandler(g, hs, config.IsLoopbackAddr(addr)),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	a := &adminServer{srv: srv, addr: lis.Addr()}
	go func() {
		if err := srv.Serve(netutil.LimitListener(lis, adminMaxConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin listener stopped", "err", err)
		}
	}()
	log.Info("admin serving", "addr", a.addr.String(), "paths", "/metrics /healthz /readyz")
	return a, nil
}

// Close stops the admin listener at once: it is closed last, after the
// gateway drained, so that /readyz said 503 throughout the drain.
func (a *adminServer) Close() error {
	if a == nil {
		return nil
	}
	return a.srv.Close()
}

// adminHandler routes the admin paths; anything else is 404, and a method
// other than GET or HEAD on them 405. On a loopback listener only loopback
// Host names are answered, so that a web page cannot read the metrics
// through a DNS name rebound to 127.0.0.1.
func adminHandler(g *gateway.Gateway, hs *health.Server, loopback bool) http.Handler {
	process := prometheus.NewRegistry()
	process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gatherers := prometheus.Gatherers{process}
	if reg := g.Telemetry().Registry(); reg != nil {
		gatherers = append(gatherers, reg)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{
		MaxRequestsInFlight: adminMaxScrapes,
		Timeout:             adminScrapeTimeout,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		adminText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := hs.Check(r.Context(), &healthpb.HealthCheckRequest{})
		switch {
		case err != nil:
			adminText(w, http.StatusServiceUnavailable, "UNKNOWN")
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			adminText(w, http.StatusServiceUnavailable, resp.GetStatus().String())
		default:
			adminText(w, http.StatusOK, resp.GetStatus().String())
		}
	})
	if !loopback {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !config.IsLoopbackAddr(hostPort(r.Host)) {
			adminText(w, http.StatusForbidden, "the admin listener answers loopback host names only")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostPort is a Host header as host:port, for config.IsLoopbackAddr.
func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.JoinHostPort(host, "80")
}

// adminText answers a short plain-text body.
func adminText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, body)
}
