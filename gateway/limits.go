package gateway

import (
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/toolgate/toolgate/gateway/telemetry"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// LimitsConfig bounds what callers, authenticated or not, can make the
// gateway hold at once: connections, streams, calls and their lifetimes.
// Every key is optional; zero means the default of DefaultLimits, which is
// the one place defaults are set.
type LimitsConfig struct {
	// MaxConnections caps the TCP connections the gateway holds open.
	// Connections beyond it are not accepted: they wait in the kernel's
	// listen backlog until one closes. Each held connection costs a file
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

// withDefaults fills every unset limit from DefaultLimits.
func (l LimitsConfig) withDefaults() LimitsConfig {
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

// validate reports the first limit that is out of range, naming its key.
func (l LimitsConfig) validate() error {
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

// maxHeaderListBytes caps the headers of one call, which are read and
// decoded before the caller is authenticated (grpc-go allows 16 MiB). A
// gRPC client's headers take a few hundred bytes; 64 KiB leaves room for a
// proxy's tokens and tracing headers.
const maxHeaderListBytes = 64 << 10

// serverOptions turns the connection limits into gRPC server options.
func (l LimitsConfig) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxHeaderListSize(maxHeaderListBytes),
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

// LimitListener wraps the gateway's listener so that it holds at most
// limits.max_connections connections: further ones are accepted only when
// one closes, and wait in the kernel's backlog meanwhile. Each time every
// slot is taken and the listener has to stop accepting, telemetry counts a
// max_connections hit.
func (g *Gateway) LimitListener(lis net.Listener) net.Listener {
	return &limitListener{Listener: lis, t: g.telemetry,
		slots: make(chan struct{}, g.limits.MaxConnections), done: make(chan struct{})}
}

// limitListener is netutil.LimitListener that tells telemetry when it
// is full.
type limitListener struct {
	net.Listener
	t         *telemetry.Telemetry
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// acquire takes a slot, waiting for one while all are held; false when
// the listener closed meanwhile.
func (l *limitListener) acquire() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.t.LimitHit(telemetry.LimitMaxConnections)
	select {
	case <-l.done:
		return false
	case l.slots <- struct{}{}:
		return true
	}
}

func (l *limitListener) release() { <-l.slots }

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	if !l.acquire() {
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	return &limitConn{Conn: c, release: l.release}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
