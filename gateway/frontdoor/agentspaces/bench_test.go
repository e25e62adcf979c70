package agentspaces

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// benchDriver answers at once, with the data a readFile has, so the
// benchmark measures the gateway and the door alone.
type benchDriver struct{}

func (benchDriver) Engine() string { return "bench" }

func (benchDriver) Run(context.Context, drivers.Call) (drivers.Result, error) {
	return drivers.Result{Stdout: "ok\n", Data: map[string]any{"type": "readFile", "path": "a.txt", "success": true, "size": 3}}, nil
}

// benchGateway is a gateway with one allow rule, a memory store and the
// bench driver serving workspace.readFile, with authentication off.
func benchGateway(b *testing.B) (*gateway.Gateway, *gateway.Authenticator) {
	b.Helper()
	dir := b.TempDir()
	text := `@id("allow_read") @reason("benchmark") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");`
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		b.Fatal(err)
	}
	auth, err := gateway.NewAuthenticator(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{
		Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth, Instance: "bench",
		Drivers: map[string]drivers.Driver{"workspace": benchDriver{}},
		Tools:   map[string]gateway.Tool{"workspace.readFile": {Driver: "workspace", Target: "readFile"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return g, auth
}

// BenchmarkFrontDoor compares one operation through the door (HTTP on
// loopback, the front-door plumbing, one RunTool call) with the same call
// as a direct RunTool over loopback gRPC. Both make a fresh request each
// iteration. Figures: ns/op of agentspaces-1op over grpc-runtool.
func BenchmarkFrontDoor(b *testing.B) {
	g, auth := benchGateway(b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv, _ := g.NewServer()
	go srv.Serve(g.LimitListener(lis))
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := toolgatev1.NewToolGatewayClient(conn)

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
