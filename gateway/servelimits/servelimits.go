// Package servelimits turns limits: into what bounds a gateway's
// listeners: the gRPC server's options and the limiter of every
// listener's connections. It never imports gateway.
package servelimits

import (
	"runtime"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/connlimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// maxHeaderListBytes caps the headers of one call, which are read and
// decoded before the caller is authenticated (grpc-go allows 16 MiB). A
// gRPC client's headers take a few hundred bytes; 64 KiB leaves room for a
// proxy's tokens and tracing headers.
const maxHeaderListBytes = 64 << 10

// ServerOptions turns the connection limits into gRPC server options.
//
// Calls are served by one worker goroutine per CPU while one is free (a
// goroutine of their own otherwise, as without workers): a call's
// pipeline runs deep (JSON, Cedar, the redactor), and a fresh goroutine
// grew its stack to that depth on every call, copying it each time
// (a twentieth of an allowed call's CPU). A worker keeps its grown stack.
func ServerOptions(l config.LimitsConfig) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
		}),
	}
}

// File descriptors kept back from connections: fdReserveBase for the
// store, the log, the policy folder, the admin listener (16 connections)
// and the drivers' pools, and fdPerCall for each call that may run at
// once (a sandbox's pipes and files, an executor connection, the
// evidence files it writes).
const (
	fdReserveBase = 64
	fdPerCall     = 4
)

// Connections is the limiter of every listener's connections: at most
// max_connections, and fewer when the process's file descriptor limit
// (raised to its hard limit) leaves less room beside the reserve.
func Connections(l config.LimitsConfig, t *telemetry.Telemetry) *connlimit.Limiter {
	n := l.MaxConnections
	if fit, _, ok := connlimit.FDCap(fdReserveBase + fdPerCall*l.MaxConcurrentCalls); ok && fit < n {
		n = fit
	}
	return connlimit.New(n, func() { t.LimitHit(telemetry.LimitMaxConnections) })
}
