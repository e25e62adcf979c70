package agentspaces

import (
	"context"
	"maps"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Every request through the door is a RunTool call: its evidence equals
// that of the same call made over gRPC but for the request id, the times
// and request.json's front_door.
func TestEvidenceIsThatOfRunToolExceptFrontDoor(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("a.txt", "hello")
	a := e.post(agentKey, "run_ev", "door", `{"operations":[{"type":"readFile","path":"a.txt"}]}`)
	if !*a.reply.Events[0].Success {
		t.Fatalf("%+v", a.reply)
	}

	e.grpcClient() // serves the gateway's own gRPC API too
	lisConn := e.grpcConn()
	args, _ := structpb.NewStruct(map[string]any{"path": "a.txt"})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+agentKey)
	if _, err := toolgatev1.NewToolGatewayClient(lisConn).RunTool(ctx, &toolgatev1.RunToolRequest{
		RequestId: "grpc-1", ToolId: "workspace.readFile", Args: args,
		Ctx: &toolgatev1.RunContext{RunId: "run_ev", StepId: "0"},
	}); err != nil {
		t.Fatal(err)
	}

	viaDoor, viaGRPC := e.artifact(requestID("agent", "run_ev", "door", 0), "request.json"), e.artifact("grpc-1", "request.json")
	if viaDoor["front_door"] != Name || viaGRPC["front_door"] != nil {
		t.Fatalf("front_door: door %v, gRPC %v", viaDoor["front_door"], viaGRPC["front_door"])
	}
	for _, m := range []map[string]any{viaDoor, viaGRPC} {
		delete(m, "request_id")
		delete(m, "received_at")
		delete(m, "front_door")
	}
	if !maps.EqualFunc(viaDoor, viaGRPC, func(x, y any) bool { return jsonEqual(x, y) }) {
		t.Errorf("request.json differs:\ndoor %v\ngRPC %v", viaDoor, viaGRPC)
	}
	dr, gr := e.artifact(requestID("agent", "run_ev", "door", 0), "tool_result.json"), e.artifact("grpc-1", "tool_result.json")
	if dr["stdout"] != "hello" || !jsonEqual(dr["stdout"], gr["stdout"]) || !jsonEqual(dr["exit_code"], gr["exit_code"]) {
		t.Errorf("tool_result.json differs:\ndoor %v\ngRPC %v", dr, gr)
	}
}

// grpcConn is a client connection to the gRPC listener grpcClient opened.
func (e *testEnv) grpcConn() *grpc.ClientConn {
	e.t.Helper()
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}
