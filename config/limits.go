package config

import (
	"fmt"
	"math"
	"time"
)

// LimitsConfig bounds what callers, authenticated or not, can make the
// gateway hold at once: connections, streams, calls and their lifetimes.
// Every key is optional; zero means the default of DefaultLimits, which is
// the one place defaults are set.
type LimitsConfig struct {
	// MaxConnections caps the TCP connections the gateway holds open,
	// across the gRPC listener and the doors' (the admin listener has its
	// own 16). The process's file descriptor limit, raised to its hard
	// limit at start, lowers it when it leaves less room: 64 descriptors
	// plus 4 per max_concurrent_calls are kept back for the store, the
	// log, the drivers and the sandboxes, and connections get the rest
	// (at least a quarter). At the cap, a new connection is taken and an
	// idle one closed (one that never sent a request first, then the one
	// idle longest); only when every connection carries a call does a new
	// one wait, unserved, for a slot. Each held connection costs a file
	// descriptor, two goroutines and about 64 KiB of buffers.
	MaxConnections int `yaml:"max_connections"`
	// MaxConcurrentStreams caps the calls in flight on one connection;
	// HTTP/2 refuses streams beyond it.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxConcurrentCalls caps the RunTool calls running at once, across
	// all connections. A call beyond it is answered RESOURCE_EXHAUSTED at
	// once and leaves no evidence, so the caller may retry it under the
	// same request_id. Tool calls made by a running call's sandboxed code
	// are not counted: they are bounded per parent call.
	MaxConcurrentCalls int `yaml:"max_concurrent_calls"`
	// MaxConnectionIdle closes (with GOAWAY) a connection that has had no
	// call in flight for this long; clients reconnect when they need to.
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
	// MaxConnectionAge closes a connection this long after it opened, so
	// load spreads again over the gateways behind a balancer; calls in
	// flight then get MaxConnectionAgeGrace to finish.
	MaxConnectionAge      time.Duration `yaml:"max_connection_age"`
	MaxConnectionAgeGrace time.Duration `yaml:"max_connection_age_grace"`
	// KeepaliveMinTime is the shortest interval between a client's pings
	// the gateway tolerates; a client pinging more often is sent GOAWAY
	// (too_many_pings). Pings are allowed on connections without calls,
	// since this interval bounds their cost.
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// KeepaliveTime is how long a connection may be silent before the
	// gateway pings the client, and KeepaliveTimeout how long it waits for
	// the answer before closing the connection: a peer that vanished
	// without closing its socket does not keep its slot.
	KeepaliveTime    time.Duration `yaml:"keepalive_time"`
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface: a connection that never sends them is closed this soon.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
}

// DefaultLimits returns the limits a gateway runs with when the
// configuration sets none. They suit a gateway serving a few dozen
// orchestrators, each holding a long-lived connection:
//
//   - 1024 connections: far above the orchestrators a gateway serves,
//     and at about 64 KiB each, 64 MiB at most, well inside the process's
//     file descriptor limit (which Go raises to the hard limit at start);
//   - 100 streams per connection, the value HTTP/2 recommends as a minimum
//     and most servers ship;
//   - 64 concurrent calls: each can run a shell, an executor call or a
//     sandbox, so this is what bounds the machine's load, not the
//     transport; raise it on a larger host;
//   - 5 minutes idle, 1 hour of age with 10 minutes' grace: the grace is
//     longer than any call's default timeout (a shell 30 s, an executor
//     call 120 s), so a connection closed for age does not cut a call;
//   - pings no more often than every 30 s (clients that keep connections
//     warm ping every 30 s to minutes); the gateway pings a silent client
//     after 2 minutes and gives it 20 s to answer;
//   - 10 s for a handshake, which takes milliseconds on a working network.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{
		MaxConnections:        1024,
		MaxConcurrentStreams:  100,
		MaxConcurrentCalls:    64,
		MaxConnectionIdle:     5 * time.Minute,
		MaxConnectionAge:      time.Hour,
		MaxConnectionAgeGrace: 10 * time.Minute,
		KeepaliveMinTime:      30 * time.Second,
		KeepaliveTime:         2 * time.Minute,
		KeepaliveTimeout:      20 * time.Second,
		HandshakeTimeout:      10 * time.Second,
	}
}

// WithDefaults fills every unset limit from DefaultLimits.
func (l LimitsConfig) WithDefaults() LimitsConfig {
	def := DefaultLimits()
	fill := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	fillDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	fill(&l.MaxConnections, def.MaxConnections)
	fill(&l.MaxConcurrentStreams, def.MaxConcurrentStreams)
	fill(&l.MaxConcurrentCalls, def.MaxConcurrentCalls)
	fillDur(&l.MaxConnectionIdle, def.MaxConnectionIdle)
	fillDur(&l.MaxConnectionAge, def.MaxConnectionAge)
	fillDur(&l.MaxConnectionAgeGrace, def.MaxConnectionAgeGrace)
	fillDur(&l.KeepaliveMinTime, def.KeepaliveMinTime)
	fillDur(&l.KeepaliveTime, def.KeepaliveTime)
	fillDur(&l.KeepaliveTimeout, def.KeepaliveTimeout)
	fillDur(&l.HandshakeTimeout, def.HandshakeTimeout)
	return l
}

// Validate reports the first limit that is out of range, naming its key.
func (l LimitsConfig) Validate() error {
	for _, v := range []struct {
		key string
		n   int64
	}{
		{"max_connections", int64(l.MaxConnections)},
		{"max_concurrent_streams", int64(l.MaxConcurrentStreams)},
		{"max_concurrent_calls", int64(l.MaxConcurrentCalls)},
		{"max_connection_idle", int64(l.MaxConnectionIdle)},
		{"max_connection_age", int64(l.MaxConnectionAge)},
		{"max_connection_age_grace", int64(l.MaxConnectionAgeGrace)},
		{"keepalive_min_time", int64(l.KeepaliveMinTime)},
		{"keepalive_time", int64(l.KeepaliveTime)},
		{"keepalive_timeout", int64(l.KeepaliveTimeout)},
		{"handshake_timeout", int64(l.HandshakeTimeout)},
	} {
		if v.n < 0 {
			return fmt.Errorf("limits.%s: must not be negative (0 means the default)", v.key)
		}
	}
	if l.MaxConcurrentStreams > math.MaxUint32 {
		return fmt.Errorf("limits.max_concurrent_streams: at most %d", uint32(math.MaxUint32))
	}
	return nil
}
