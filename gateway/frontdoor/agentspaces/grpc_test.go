package agentspaces

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// grpcClient serves the gateway, with the door's service, on a loopback
// gRPC listener.
func (e *testEnv) grpcClient() toolgatev1.AgentSpacesServiceClient {
	e.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	srv, _ := e.gw.NewServer()
	e.door.RegisterGRPC(srv)
	go srv.Serve(lis)
	e.t.Cleanup(srv.Stop)
	e.grpcAddr = lis.Addr().String()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return toolgatev1.NewAgentSpacesServiceClient(conn)
}

func (e *testEnv) grpcCall(c toolgatev1.AgentSpacesServiceClient, key, runID, turn, body string) (Reply, string, error) {
	e.t.Helper()
	msg := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(body), msg); err != nil {
		e.t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	resp, err := c.RunOperations(ctx, &toolgatev1.RunOperationsRequest{RunId: runID, IdempotencyKey: turn, Message: msg})
	if err != nil {
		return Reply{}, "", err
	}
	b, _ := protojson.Marshal(resp.GetEvents())
	var r Reply
	if err := json.Unmarshal(b, &r); err != nil {
		e.t.Fatal(err)
	}
	return r, resp.GetIdempotencyKey(), nil
}

func TestSameEventsOverGRPC(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	c := e.grpcClient()

	r, turn, err := e.grpcCall(c, agentKey, "run_abc123", "", example(t, "example1-operations"))
	if err != nil || r.Status != statusCompleted || !slices.Equal(types(r.Events), []string{"message", "createFile", "shell"}) ||
		turn == "" || turn != r.Toolgate.Turn || !*r.Events[2].Success {
		t.Fatalf("example 1 over gRPC: %+v %q %v", r, turn, err)
	}
	if req := e.artifact(requestID("agent", "run_abc123", turn, 1), "request.json"); req["front_door"] != Name {
		t.Errorf("request.json %v", req)
	}

	e.seed("temp/a.txt", "a")
	r, _, err = e.grpcCall(c, agentKey, "run_del456", "turn-1", example(t, "example3-operations"))
	if err != nil || r.Status != statusAwaitingApproval || r.Events[1].OperationID != "cleanup-1" || !approvalIDPattern.MatchString(r.Events[1].ApprovalID) {
		t.Fatalf("example 3 over gRPC: %+v %v", r, err)
	}
	r, _, err = e.grpcCall(c, agentKey, "run_del456", "", example(t, "example3-approval"))
	if err != nil || r.Status != statusError || r.Events[0].Category != categoryPolicy {
		t.Fatalf("self-approval over gRPC: %+v %v", r, err)
	}
	r, _, err = e.grpcCall(c, aliceKey, "run_del456", "", example(t, "example3-approval"))
	if err != nil || r.Status != statusCompleted || len(r.Events) != 1 || !*r.Events[0].Success {
		t.Fatalf("approval over gRPC: %+v %v", r, err)
	}
	r, _, err = e.grpcCall(c, agentKey, "run_del456", "turn-1", example(t, "example3-operations"))
	if err != nil || r.Status != statusCompleted || len(r.Events) != 2 || !*r.Events[1].Success || e.read("temp/a.txt") != "<absent>" {
		t.Fatalf("the re-sent batch over gRPC: %+v %v", r, err)
	}

	if _, _, err := e.grpcCall(c, agentKey, "run:x", "", `{"operations":[]}`); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad run id over gRPC: %v, want INVALID_ARGUMENT", err)
	}
	if _, _, err := e.grpcCall(c, "wrong-key-0123456789abcdef", "run", "", `{"operations":[]}`); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a wrong key over gRPC: %v, want UNAUTHENTICATED", err)
	}
}
