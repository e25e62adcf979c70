package agentspaces

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/doortest"
	"github.com/toolgate/toolgate/internal/argsize"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// benchGateway is a gateway with one allow rule, a memory store and a
// workspace.readFile that answers at once with the data a readFile has,
// with authentication off.
func benchGateway(b *testing.B) (*gateway.Gateway, *callerauth.Authenticator) {
	return doortest.Gateway(b,
		`@id("allow_read") @reason("benchmark") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");`,
		map[string]drivers.Driver{"workspace": doortest.InstantDriver{Name: "bench", Result: drivers.Result{
			Stdout: "ok\n", Data: map[string]any{"type": "readFile", "path": "a.txt", "success": true, "size": 3}}}},
		map[string]gateway.Tool{"workspace.readFile": {Driver: "workspace", Target: "readFile"}})
}

// BenchmarkFrontDoor compares one operation through the door (HTTP on
// loopback, the front-door plumbing, one RunTool call) with the same call
// as a direct RunTool over loopback gRPC. Both make a fresh request each
// iteration. Figures: ns/op of agentspaces-1op over grpc-runtool.
func BenchmarkFrontDoor(b *testing.B) {
	g, auth := benchGateway(b)
	client := doortest.GRPCClient(b, g)

	door, err := New(g, Options{})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	door.Routes(mux)
	hs := httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(auth)}.Wrap(mux))
	b.Cleanup(hs.Close)
	args, _ := structpb.NewStruct(map[string]any{"path": "a.txt"})
	// seq numbers the requests across every run of the sub-benchmarks, so
	// that none is a replay of an earlier one.
	seq := 0

	b.Run("grpc-runtool", func(b *testing.B) {
		for b.Loop() {
			seq++
			resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
				RequestId: fmt.Sprintf("grpc-%d", seq), ToolId: "workspace.readFile", Args: args,
				Ctx: &toolgatev1.RunContext{RunId: "bench", StepId: "0"},
			})
			if err != nil || !resp.GetOk() {
				b.Fatal(resp, err)
			}
		}
	})
	for _, n := range []int{1, 10} {
		ops := strings.TrimSuffix(strings.Repeat(`{"type":"readFile","path":"a.txt"},`, n), ",")
		body := `{"protocolVersion":"1.0","operations":[` + ops + `]}`
		b.Run(fmt.Sprintf("agentspaces-%dop", n), func(b *testing.B) {
			for b.Loop() {
				seq++
				req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/runs/bench/operations", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("t%d", seq))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/operation")
		})
	}
}

// BenchmarkDoorOversizedBody: what one request costs the process, from a
// one-operation batch (the baseline) and a batch whose arguments are at their limit to
// bodies far over it, declared or chunked. The oversized ones must cost a
// small multiple of the limit (x-limit/op), not of the body.
func BenchmarkDoorOversizedBody(b *testing.B) {
	g, auth := benchGateway(b)
	door, err := New(g, Options{})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	door.Routes(mux)
	hs := httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(auth)}.Wrap(mux))
	b.Cleanup(hs.Close)
	limit := frontdoor.DefaultMaxBodyBytes
	batch := func(pad string) []byte {
		return []byte(`{"protocolVersion":"1.0","operations":[{"type":"readFile","path":"a.txt","pad":` + pad + `}]}`)
	}
	doortest.BenchBodies(b, hs.URL+"/v1/runs/bench/operations", nil, limit, []doortest.BodyCase{
		{Name: "small", Body: []byte(`{"protocolVersion":"1.0","operations":[{"type":"readFile","path":"a.txt"}]}`), Status: http.StatusOK},
		{Name: "args-at-limit", Body: batch(doortest.Pad(argsize.MaxBytes - 64)), Status: http.StatusOK},
		{Name: "16MiB", Body: batch(doortest.Pad(16 << 20)), Status: http.StatusRequestEntityTooLarge},
		{Name: "16MiB-chunked", Body: batch(doortest.Pad(16 << 20)), Chunked: true, Status: http.StatusRequestEntityTooLarge},
		{Name: "100k-values", Body: batch(doortest.Zeros(100_000)), Status: http.StatusRequestEntityTooLarge},
	})
}
