package gateway

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/toolgate/toolgate/gateway/telemetry"
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
	return context.WithValue(ctx, callerKey{}, caller), nil
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

// scanRequestArgs walks the args field of an encoded RunToolRequest and
// refuses it, before anything is decoded, when it holds more than
// maxArgsNodes values or nests deeper than maxArgsDepth. It allocates
// nothing. A message it cannot parse is left to proto.Unmarshal, which
// says what is wrong with it; the values counted before the damage still
// count. Repeated args fields are merged by protobuf, so their counts add.
func scanRequestArgs(b []byte) error {
	s := argsScan{budget: maxArgsNodes}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != 3 {
			continue
		}
		if err := s.object(v, 1); err != nil {
			return err
		}
	}
}

// argsScan counts the values of a google.protobuf.Struct on the wire.
type argsScan struct{ budget int }

// Field numbers of google.protobuf.Struct, its map entries, Value and
// ListValue that hold nested values.
const (
	structFields     = 1 // Struct.fields, map entries
	entryValue       = 2 // map entry value
	valueStructValue = 5 // Value.struct_value
	valueListValue   = 6 // Value.list_value
	listValues       = 1 // ListValue.values
)

// object scans a Struct at depth (args itself is depth 1, as for
// checkStruct).
func (s *argsScan) object(b []byte, depth int) error {
	if depth > maxArgsDepth {
		return invalidf("args: nested deeper than %d levels", maxArgsDepth)
	}
	for {
		num, entry, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != structFields {
			continue
		}
		for {
			num, v, rest, ok := nextMessage(entry)
			if !ok {
				break
			}
			entry = rest
			if num != entryValue {
				continue
			}
			if err := s.value(v, depth); err != nil {
				return err
			}
		}
	}
}

// list scans a ListValue whose items sit at depth.
func (s *argsScan) list(b []byte, depth int) error {
	if depth > maxArgsDepth {
		return invalidf("args: nested deeper than %d levels", maxArgsDepth)
	}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != listValues {
			continue
		}
		if err := s.value(v, depth); err != nil {
			return err
		}
	}
}

// value counts one Value and scans what it nests.
func (s *argsScan) value(b []byte, depth int) error {
	if s.budget--; s.budget < 0 {
		return invalidf("args: more than %d values, the limit", maxArgsNodes)
	}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		var err error
		switch num {
		case valueStructValue:
			err = s.object(v, depth+1)
		case valueListValue:
			err = s.list(v, depth+1)
		}
		if err != nil {
			return err
		}
	}
}

// nextMessage returns the next length-delimited field of the message b,
// its number and what follows it, skipping fields of other wire types. ok
// is false at the end of b and at bytes that do not parse.
func nextMessage(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, nil, nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, nil, nil, false
		}
		return num, v, b[n:], true
	}
	return 0, nil, nil, false
}
