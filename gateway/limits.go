package gateway

import (
	"net"

	"github.com/toolgate/toolgate/internal/connlimit"
)

// LimitListener wraps a listener of the gateway (the gRPC one, a door's)
// so that all of them together hold at most Connections().Max()
// connections: limits.max_connections, or fewer when the file descriptor
// limit leaves less room. At the cap a new connection is taken and the
// idle connection waiting longest (one that never carried a request
// first) is closed; only when every connection is busy does the new one
// wait. Each time every slot is taken, telemetry counts a max_connections
// hit.
func (g *Gateway) LimitListener(lis net.Listener) net.Listener { return g.conns.Listener(lis) }

// Connections is the gateway's connection limiter: an HTTP server on a
// LimitListener sets its ConnState to HTTPConnState, so that idle
// connections are told from busy ones.
func (g *Gateway) Connections() *connlimit.Limiter { return g.conns }
