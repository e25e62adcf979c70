package gateway

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway/servelimits"
	"github.com/toolgate/toolgate/gateway/telemetry"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// NewServer returns a gRPC server serving g's ToolGateway, the standard
// grpc.health.v1 health service and server reflection. The returned health
// server lets the caller mark the service NOT_SERVING while it drains.
//
// Callers are authenticated from their headers before a message is read
// (health needs no key), a message is capped at the largest valid request,
// and the connection limits of Options.Limits apply; serve the result on
// g.LimitListener(lis) to cap connections too.
func (g *Gateway) NewServer(opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	own := append([]grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")}),
		grpc.MaxRecvMsgSize(maxRequestBytes),
	}, servelimits.ServerOptions(g.limits)...)
	// Tells the connection limiter which connections carry calls.
	own = append(own, g.conns.ServerOptions()...)
	if g.auth.Enabled() {
		// Without keys every caller is anonymous (on loopback only), and
		// there is nothing to check before the body.
		own = append(own, grpc.InTapHandle(g.authenticateStream))
	}
	opts = append(own, opts...)
	s := grpc.NewServer(opts...)
	s.RegisterService(&toolGatewayDesc, g)
	hs := health.NewServer()
	hs.SetServingStatus(toolgatev1.ToolGateway_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s, hs
}

// toolGatewayServer is what the service descriptor dispatches to.
type toolGatewayServer interface {
	RunTool(context.Context, *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error)
	ListTools(context.Context, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error)
	DecideApproval(context.Context, *toolgatev1.DecideApprovalRequest) (*toolgatev1.DecideApprovalResponse, error)
	ListApprovals(context.Context, *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error)
}

// toolGatewayDesc is the generated descriptor with our own RunTool handler.
// grpc-go reports a request that fails to decode (for example a string that
// is not UTF-8) as INTERNAL, which blames the gateway for the caller's
// mistake; decoding here lets us answer INVALID_ARGUMENT and name the field.
var toolGatewayDesc = grpc.ServiceDesc{
	ServiceName: toolgatev1.ToolGateway_ServiceDesc.ServiceName,
	HandlerType: (*toolGatewayServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "RunTool", Handler: runToolHandler},
		{MethodName: "ListTools", Handler: unaryHandler(toolgatev1.ToolGateway_ListTools_FullMethodName, toolGatewayServer.ListTools)},
		{MethodName: "DecideApproval", Handler: unaryHandler(toolgatev1.ToolGateway_DecideApproval_FullMethodName, toolGatewayServer.DecideApproval)},
		{MethodName: "ListApprovals", Handler: unaryHandler(toolgatev1.ToolGateway_ListApprovals_FullMethodName, toolGatewayServer.ListApprovals)},
	},
	Metadata: toolgatev1.ToolGateway_ServiceDesc.Metadata,
}

func runToolHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	var tel *telemetry.Telemetry
	if g, ok := srv.(*Gateway); ok {
		tel = g.telemetry
	}
	tel.FrontDoorRequest(telemetry.DoorGRPC)
	var raw rawMessage
	if err := dec(&raw); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			tel.LimitHit(telemetry.LimitMaxRequestBytes)
		}
		return nil, err
	}
	if err := scanRequestArgs(raw.data); err != nil {
		tel.LimitHit(telemetry.LimitArgs)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	req := new(toolgatev1.RunToolRequest)
	if err := proto.Unmarshal(raw.data, req); err != nil {
		return nil, status.Error(codes.InvalidArgument, describeDecodeError(raw.data, err))
	}
	s := srv.(toolGatewayServer)
	if interceptor == nil {
		return s.RunTool(ctx, req)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: toolgatev1.ToolGateway_RunTool_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return s.RunTool(ctx, req.(*toolgatev1.RunToolRequest))
	})
}

// unaryHandler is the handler of a method whose request grpc-go decodes
// itself.
func unaryHandler[Req any, PReq interface {
	*Req
	proto.Message
}, Resp any](fullMethod string, call func(toolGatewayServer, context.Context, PReq) (Resp, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := PReq(new(Req))
		if err := dec(req); err != nil {
			return nil, err
		}
		s := srv.(toolGatewayServer)
		if interceptor == nil {
			return call(s, ctx, req)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
			return call(s, ctx, req.(PReq))
		})
	}
}

// rawMessage receives a request's undecoded bytes.
type rawMessage struct{ data []byte }

// rawCodec is the proto codec, except that it hands *rawMessage targets the
// bytes as they arrived.
type rawCodec struct{ proto encoding.CodecV2 }

func (c rawCodec) Name() string { return c.proto.Name() }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMessage); ok {
		r.data = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// describeDecodeError names the field of a RunToolRequest that failed to
// decode, when it can find it.
func describeDecodeError(b []byte, err error) string {
	names := map[protowire.Number]string{1: "request_id", 2: "tool_id", 3: "args", 4: "ctx"}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				break
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			break
		}
		b = b[n:]
		name, known := names[num]
		if !known {
			continue
		}
		switch num {
		case 1, 2:
			if !utf8.Valid(v) {
				return fmt.Sprintf("%s: string is not valid UTF-8", name)
			}
		case 3:
			if e := proto.Unmarshal(v, &structpb.Struct{}); e != nil {
				return fmt.Sprintf("args: not a valid google.protobuf.Struct (%v)", e)
			}
		case 4:
			if e := proto.Unmarshal(v, &toolgatev1.RunContext{}); e != nil {
				return fmt.Sprintf("ctx: not a valid RunContext (%v)", e)
			}
		}
	}
	return fmt.Sprintf("request: not a valid RunToolRequest (%v)", err)
}
