// Package doortest builds what the tests and benchmarks of front doors
// share: a gateway on a memory store judged by one policy text, drivers
// that answer at once, and a gRPC client of the same gateway, so that a
// door's cost can be set against a direct RunTool of the same call.
package doortest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// AllowNoopPolicy allows RunTool of the tool "noop.run" and nothing else:
// the policy of the doors' benchmarks, so that each sets the same decision
// against its own transport.
const AllowNoopPolicy = `
@id("allow_noop") @reason("benchmark")
permit (principal, action == Action::"RunTool", resource == Tool::"noop.run");
`

// KeyDigest is the hex SHA-256 of an API key, as auth.keys' sha256 holds
// it.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// InstantDriver answers every call at once with Result, so that a
// benchmark measures the gateway and the door alone.
type InstantDriver struct {
	Name   string
	Result drivers.Result
}

// Engine implements drivers.Driver.
func (d InstantDriver) Engine() string { return d.Name }

// Run implements drivers.Driver.
func (d InstantDriver) Run(context.Context, drivers.Call) (drivers.Result, error) {
	return d.Result, nil
}

// Gateway returns a gateway with authentication off, a memory store,
// policyText as its default policy set, and the drivers and tools given.
// It fails tb on any error.
func Gateway(tb testing.TB, policyText string, drvs map[string]drivers.Driver, tools map[string]gateway.Tool) (*gateway.Gateway, *callerauth.Authenticator) {
	tb.Helper()
	dir := tb.TempDir()
	must(tb, os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(policyText), 0o600))
	engine, err := policy.Load(dir)
	must(tb, err)
	red, err := redact.New(redact.Config{})
	must(tb, err)
	auth, err := callerauth.New(nil, nil)
	must(tb, err)
	g, err := gateway.New(gateway.Options{
		Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth, Instance: "bench",
		Drivers: drvs, Tools: tools,
	})
	must(tb, err)
	return g, auth
}

// GRPCClient serves g's gRPC service on a loopback listener until tb ends
// and returns a client of it.
func GRPCClient(tb testing.TB, g *gateway.Gateway) toolgatev1.ToolGatewayClient {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(tb, err)
	srv, _ := g.NewServer()
	go srv.Serve(g.LimitListener(lis))
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return toolgatev1.NewToolGatewayClient(conn)
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
