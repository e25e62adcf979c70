package gateway

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
)

// callerKey marks the caller name the transport authenticated in a call's
// context.
type callerKey struct{}

// authenticateStream is the server's tap handle: it runs when a call's
// headers arrive, before its body is read, and refuses a call without a
// valid key there, so an unauthenticated caller never makes the gateway
// buffer or decode a message. The health service is open to all: load
// balancers probe it without keys, and it reveals only whether the gateway
// serves. Everything else (ToolGateway, reflection, unknown methods) needs
// a key. It runs on the connection's reader goroutine, so it must stay
// cheap: one SHA-256 and a comparison per configured key.
func (g *Gateway) authenticateStream(ctx context.Context, info *tap.Info) (context.Context, error) {
	if strings.HasPrefix(info.FullMethodName, "/"+healthpb.Health_ServiceDesc.ServiceName+"/") {
		return ctx, nil
	}
	start := time.Now()
	caller, err := g.auth.Authenticate(ctx)
	g.telemetry.ObserveStage(telemetry.StageAuth, time.Since(start))
	if err != nil {
		return nil, err
	}
	// The call's span does not exist yet: its auth stage is recorded
	// from these times.
	return telemetry.WithAuth(context.WithValue(ctx, callerKey{}, caller), start, time.Now()), nil
}

// authenticate returns the caller the transport authenticated, or
// authenticates ctx itself when the call did not come through the
// gateway's server (a Gateway used as a library).
func (g *Gateway) authenticate(ctx context.Context) (string, error) {
	if caller, ok := ctx.Value(callerKey{}).(string); ok {
		return caller, nil
	}
	return g.auth.Authenticate(ctx)
}

// admitCall takes one of the limits.max_concurrent_calls slots without
// waiting, or answers RESOURCE_EXHAUSTED. Refusing at once, before the
// request is claimed, means a refused call leaves no evidence and costs
// nothing to store: the caller retries under the same request_id, and a
// flood cannot turn into a flood of evidence writes or of parked
// goroutines. releaseCall gives the slot back.
func (g *Gateway) admitCall() error {
	if n := g.running.Add(1); n > int64(g.limits.MaxConcurrentCalls) {
		g.running.Add(-1)
		g.telemetry.LimitHit(telemetry.LimitMaxConcurrentCalls)
		return status.Errorf(codes.ResourceExhausted,
			"limits.max_concurrent_calls: %d calls are running, the limit; retry later", g.limits.MaxConcurrentCalls)
	}
	return nil
}

// releaseCall gives back a slot admitCall took.
func (g *Gateway) releaseCall() { g.running.Add(-1) }

// scanRequestArgs refuses an encoded RunToolRequest whose args hold more
// than maxArgsNodes values or nest deeper than maxArgsDepth, before
// anything is decoded.
func scanRequestArgs(b []byte) error {
	if err := wire.ScanArgs(b, maxArgsNodes, maxArgsDepth); err != nil {
		return invalidf("%s", err)
	}
	return nil
}
