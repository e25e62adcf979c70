package gateway

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"google.golang.org/grpc/mem"
)

// bytesCodec sends pre-encoded bytes, so a test can put on the wire what a
// well-behaved protobuf library refuses to encode.
type bytesCodec struct{}

func (bytesCodec) Name() string { return "proto" }

func (bytesCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (bytesCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	str := func(num protowire.Number, s string) []byte {
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendString(b, s)
	}
	argsWithBadString := func() []byte {
		// Struct{fields: {"k": Value{string_value: "\xff"}}}
		value := str(3, "\xff")
		entry := append(str(1, "k"), protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), value)...)
		fields := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
		return protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), fields)
	}
	tests := []struct {
		name      string
		wire      []byte
		wantField string
	}{
		{"invalid UTF-8 tool_id", append(str(1, "utf-1"), str(2, "bad\xfftool")...), "tool_id"},
		{"invalid UTF-8 request_id", str(1, "id\xc3"), "request_id"},
		{"invalid UTF-8 inside args", append(append(str(1, "utf-2"), str(2, "workspace.readFile")...), argsWithBadString()...), "args"},
		{"truncated message", []byte{0x0a, 0x10, 'a'}, "request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			err := e.conn.Invoke(context.Background(), toolgatev1.ToolGateway_RunTool_FullMethodName,
				&tc.wire, &out, grpc.ForceCodecV2(bytesCodec{}))
			wantCode(t, err, codes.InvalidArgument, tc.wantField)
		})
	}
	if keys, _ := e.store.List(context.Background(), ""); len(keys) != 0 {
		t.Errorf("undecodable requests left evidence: %v", keys)
	}
}

func TestHealthAndReflection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	h, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{
		Service: toolgatev1.ToolGateway_ServiceDesc.ServiceName,
	})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", h, err)
	}

	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "toolgate.v1.ToolGateway"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("reflection does not describe toolgate.v1.ToolGateway: %v", resp)
	}
}

// TestClientCancelStillCompletesEvidence: a caller that gives up mid-call
// must not leave a request half recorded.
func TestClientCancelStillCompletesEvidence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.client.RunTool(ctx, &toolgatev1.RunToolRequest{
			RequestId: "cancel-1", ToolId: "workspace.shell",
			Args: &structpb.Struct{Fields: map[string]*structpb.Value{"command": structpb.NewStringValue("sleep 1; echo finished")}},
		})
		done <- err
	}()
	waitFor(t, func() bool {
		_, err := e.store.Get(context.Background(), evidence.Key("cancel-1", evidence.ArtifactPolicyDecision))
		return err == nil
	})
	cancel()
	<-done
	waitFor(t, func() bool {
		_, err := e.store.Get(context.Background(), evidence.Key("cancel-1", evidence.ArtifactManifest))
		return err == nil
	})
	resp, err := e.call(context.Background(), "cancel-1", "workspace.shell", map[string]any{"command": "sleep 1; echo finished"})
	if err != nil || resp.GetToolResult().GetStdout() != "finished\n" {
		t.Fatalf("retry after cancel = %v, %v; want the finished result replayed", resp, err)
	}
	e.checkReplyIsStored("cancel-1", resp)
}
