package agentspaces

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// grpcService serves AgentSpacesService with a Door.
type grpcService struct {
	toolgatev1.UnimplementedAgentSpacesServiceServer
	door *Door
	// caller returns the caller the gRPC listener authenticated.
	caller func(ctx context.Context) (string, error)
}

// RegisterGRPC implements frontdoor.GRPCDoor: AgentSpacesService on the
// gateway's gRPC server, whose transport authenticates every call.
func (d *Door) RegisterGRPC(s *grpc.Server) {
	if d.callerOf == nil {
		d.log.Error("agentspaces: no way to learn a gRPC caller; AgentSpacesService not served")
		return
	}
	toolgatev1.RegisterAgentSpacesServiceServer(s, &grpcService{door: d, caller: d.callerOf})
}

// RunOperations implements AgentSpacesService.
func (g *grpcService) RunOperations(ctx context.Context, req *toolgatev1.RunOperationsRequest) (*toolgatev1.RunOperationsResponse, error) {
	caller, err := g.caller(ctx)
	if err != nil {
		return nil, err
	}
	body, err := protojson.Marshal(req.GetMessage())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "message: %v", err)
	}
	reply, code := g.door.Serve(ctx, Request{
		Caller: caller, RunID: req.GetRunId(), Turn: req.GetIdempotencyKey(), PolicyRef: req.GetPolicyRef(), Body: body,
	})
	if code == httpMalformed {
		msg := "malformed message"
		if len(reply.Events) > 0 {
			msg = reply.Events[0].Message
		}
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	out, err := replyStruct(reply)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "agentspaces: reply: %v", err)
	}
	return &toolgatev1.RunOperationsResponse{Events: out, IdempotencyKey: reply.Toolgate.Turn}, nil
}

// replyStruct is the reply as the HTTP form's JSON body, in a Struct.
func replyStruct(r Reply) (*structpb.Struct, error) {
	if r.Events == nil {
		r.Events = []Event{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		return nil, err
	}
	return s, nil
}
