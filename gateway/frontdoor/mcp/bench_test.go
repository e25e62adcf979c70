package mcpdoor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/doortest"
	"github.com/toolgate/toolgate/internal/argsize"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// benchArgs are the arguments of every benchmarked call, those of
// gateway's BenchmarkRunTool and the TPMJS door's benchmark.
const benchArgs = `{"path":"docs/readme.md","limit":10,"verbose":true}`

// benchGateway is a gateway on a memory store with one allow rule and the
// tool "noop.run", whose driver answers at once.
func benchGateway(b *testing.B) *gateway.Gateway {
	g, _ := doortest.Gateway(b, doortest.AllowNoopPolicy,
		map[string]drivers.Driver{"noop": doortest.InstantDriver{Name: "noop",
			Result: drivers.Result{Stdout: "ok\n", Data: map[string]any{"done": true}}}},
		map[string]gateway.Tool{"noop.run": {Driver: "noop", Target: "run"}})
	return g
}

// benchDoor serves the door for g as `toolgate serve` does (frontdoor.Serve:
// its own loopback listener, the plumbing, the gateway's connection limit)
// and returns the endpoint.
func benchDoor(b *testing.B, g *gateway.Gateway) string {
	b.Helper()
	cfg := newConfig()
	cfg.Listen = "127.0.0.1:0"
	must(b, cfg.Validate())
	servers, err := frontdoor.Serve(context.Background(), config.Config{}, g, []frontdoor.Loaded{{Name: Name, Config: cfg}}, nil)
	must(b, err)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = servers.Shutdown(ctx)
	})
	return "http://" + servers.Addr(cfg.Listen).String() + Path
}

// mcpVersion is how a benchmarked client speaks: the protocol version and
// whether it sends the 2026-07-28 headers and _meta.
type mcpVersion struct {
	version string
	modern  bool
}

// callBody is a tools/call of tool with benchArgs and key as its
// idempotency key, as a client of v sends it.
func (v mcpVersion) callBody(tool, key string) []byte {
	meta := `"io.github.toolgate/idempotencyKey":"` + key + `"`
	if v.modern {
		meta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` + meta
	}
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + benchArgs + `,"_meta":{` + meta + `}}}`)
}

// post sends one keep-alive POST of method (and tool, for Mcp-Name) to
// url as a client of v and returns the body.
func (v mcpVersion) post(b *testing.B, client *http.Client, url, method, tool string, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	must(b, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", v.version)
	if v.modern {
		req.Header.Set("Mcp-Method", method)
		if tool != "" {
			req.Header.Set("Mcp-Name", tool)
		}
	}
	resp, err := client.Do(req)
	must(b, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	must(b, err)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d %s", method, resp.StatusCode, out)
	}
	return out
}

// runGRPC runs noop.run once over gRPC under request id.
func runGRPC(b *testing.B, client toolgatev1.ToolGatewayClient, args *structpb.Struct, id string) {
	resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{RequestId: id, ToolId: "noop.run", Args: args})
	if err != nil || !resp.GetOk() {
		b.Fatalf("%v %v", resp, err)
	}
}

// cpuTime is the CPU time this process (client and server alike) used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perOp is d per operation of n, in nanoseconds.
func perOp(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

// BenchmarkFrontDoor sets one tools/call through the MCP door against the
// same call as a direct RunTool over loopback gRPC, on the same gateway
// and in the same run: each mcp-* benchmark, after its timed loop, runs
// as many RunTool calls and reports their time (rungrpc-ns/op) and the
// ratio (x-rungrpc; the goal is ≤ 1.5). cpu-us/op is the CPU of client and
// server together, per call, and x-rungrpc-cpu its ratio, which a loaded
// machine disturbs less than the wall-clock one.
func BenchmarkFrontDoor(b *testing.B) {
	args, err := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0, "verbose": true})
	must(b, err)
	b.Run("rungrpc", func(b *testing.B) {
		client := doortest.GRPCClient(b, benchGateway(b))
		b.ReportAllocs()
		cpu, i := cpuTime(), 0
		for b.Loop() {
			runGRPC(b, client, args, fmt.Sprintf("bench-%d", i))
			i++
		}
		b.ReportMetric(perOp(cpuTime()-cpu, i)/1e3, "cpu-us/op")
	})
	for _, tc := range []struct {
		name string
		v    mcpVersion
	}{
		{"mcp-2026", mcpVersion{version: "2026-07-28", modern: true}},
		{"mcp-legacy", mcpVersion{version: "2025-11-25"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			g := benchGateway(b)
			url, grpcClient := benchDoor(b, g), doortest.GRPCClient(b, g)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.ReportAllocs()
			cpu, start, i := cpuTime(), time.Now(), 0
			for b.Loop() {
				out := tc.v.post(b, client, url, "tools/call", "noop.run", tc.v.callBody("noop.run", fmt.Sprintf("mcp-%d", i)))
				if !bytes.Contains(out, []byte(`"text":"ok\n"`)) || bytes.Contains(out, []byte(`"isError":true`)) {
					b.Fatalf("answer %s", out)
				}
				i++
			}
			mcpNs, mcpCPU := perOp(time.Since(start), i), perOp(cpuTime()-cpu, i)
			cpu, start = cpuTime(), time.Now()
			for j := range i {
				runGRPC(b, grpcClient, args, fmt.Sprintf("grpc-%d", j))
			}
			grpcNs, grpcCPU := perOp(time.Since(start), i), perOp(cpuTime()-cpu, i)
			b.ReportMetric(mcpCPU/1e3, "cpu-us/op")
			b.ReportMetric(grpcNs, "rungrpc-ns/op")
			b.ReportMetric(mcpNs/grpcNs, "x-rungrpc")
			b.ReportMetric(mcpCPU/grpcCPU, "x-rungrpc-cpu")
		})
	}
}

// listPolicy allows every tool of the noop driver except those tagged
// "denied": half of the catalog of BenchmarkToolsList1000.
const listPolicy = `
@id("allow_noop") @reason("benchmark")
permit (principal, action == Action::"RunTool", resource in Driver::"noop");

@id("deny_tagged") @reason("benchmark")
forbid (principal, action == Action::"RunTool", resource in Driver::"noop")
when { resource.tags.contains("denied") };
`

// BenchmarkToolsList1000 is one tools/list (2026-07-28) of a catalog of
// 1,000 tools, one page, of which policy lets the caller see half: the
// SDK's work and 1,000 Cedar decisions. p50-ms and p99-ms are the
// latencies of single lists.
func BenchmarkToolsList1000(b *testing.B) {
	tools := map[string]gateway.Tool{}
	for i := range 1000 {
		t := gateway.Tool{Driver: "noop", Target: "run", Description: fmt.Sprintf("Benchmark tool %d of the catalog.", i)}
		if i%2 == 1 {
			t.Tags = []string{"denied"}
		}
		tools[fmt.Sprintf("tool.%04d", i)] = t
	}
	g, _ := doortest.Gateway(b, listPolicy,
		map[string]drivers.Driver{"noop": doortest.InstantDriver{Name: "noop"}}, tools)
	url := benchDoor(b, g)
	v := mcpVersion{version: "2026-07-28", modern: true}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	out := v.post(b, client, url, "tools/list", "", body)
	if n := strings.Count(string(out), `"name":"tool.`); n != 500 || bytes.Contains(out, []byte(`"nextCursor"`)) {
		b.Fatalf("one page of 500 tools expected, got %d: %.300s", n, out)
	}
	b.ReportAllocs()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		v.post(b, client, url, "tools/list", "", body)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkDoorOversizedBody: what one request costs the process, from a
// small tools/call (the baseline) and one whose arguments are at their limit to bodies far
// over it, declared or chunked. The oversized ones must cost a small
// multiple of the limit (x-limit/op), not of the body.
func BenchmarkDoorOversizedBody(b *testing.B) {
	url := benchDoor(b, benchGateway(b))
	limit := frontdoor.DefaultMaxBodyBytes
	call := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop.run","arguments":` + args + `}}`)
	}
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2025-06-18"}}
	doortest.BenchBodies(b, url, header, limit, []doortest.BodyCase{
		{Name: "small", Body: call(benchArgs), Status: http.StatusOK},
		{Name: "args-at-limit", Body: call(`{"s":` + doortest.Pad(argsize.MaxBytes-64) + `}`), Status: http.StatusOK},
		{Name: "4MiB", Body: call(`{"s":` + doortest.Pad(4<<20) + `}`), Status: http.StatusRequestEntityTooLarge},
		{Name: "16MiB-chunked", Body: call(`{"s":` + doortest.Pad(16<<20) + `}`), Chunked: true, Status: http.StatusRequestEntityTooLarge},
		{Name: "100k-values", Body: call(`{"s":` + doortest.Zeros(100_000) + `}`), Status: http.StatusRequestEntityTooLarge},
	})
}
