package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// floodCalls is how many tool calls the guest of BenchmarkNestedFlood
// fans out at once.
const floodCalls = 1000

// BenchmarkNestedFlood measures one execution whose guest fans out 1,000
// tool calls at once and awaits them all, through the whole gateway
// (claim, CallTool decision, redaction, evidence in memory). With
// max_nested_calls at 1000 every call runs; at the default of 256 the rest
// are refused. The runner is a stdio process started per execution, so
// B/op and peak-heap-MiB (the heap in use above what it was before the
// execution, sampled every 5 ms) are the gateway's own; the evidence
// store is fresh for every execution.
func BenchmarkNestedFlood(b *testing.B) {
	input := map[string]any{"path": "docs/readme.md", "limit": 10.0}
	command := execboxtest.StdioCommand(b, execboxtest.Script{
		execboxtest.Started(),
		execboxtest.Repeat(floodCalls, execboxtest.CallTool("c", "noop", "run", input)),
		execboxtest.Repeat(floodCalls, execboxtest.AwaitResult("c")),
		execboxtest.DoneUndefined(),
	})
	for _, limit := range []int{1000, 256} {
		b.Run(fmt.Sprintf("max_nested_calls=%d", limit), func(b *testing.B) {
			args, _ := structpb.NewStruct(map[string]any{"code": "await Promise.all(calls)"})
			var peak uint64
			b.ReportAllocs()
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				client := floodGateway(b, command, limit)
				runtime.GC()
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				stopHeap := heapPeak()
				b.StartTimer()
				resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("flood-%d", i), ToolId: "code.run", Args: args})
				b.StopTimer()
				if p := stopHeap(); p > before.HeapInuse {
					peak = max(peak, p-before.HeapInuse)
				}
				if err != nil || !resp.GetOk() {
					b.Fatalf("flood: %v, %v", resp, err)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// floodGateway is a gateway with a noop tool and an execbox driver running
// command, its evidence in a fresh memory store.
func floodGateway(b *testing.B, command []string, maxNested int) toolgatev1.ToolGatewayClient {
	b.Helper()
	dir := b.TempDir()
	const policyText = `
permit (principal, action == Action::"RunTool", resource == Tool::"code.run");
permit (principal, action == Action::"CallTool", resource == Tool::"noop.run");
`
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(policyText), 0o600); err != nil {
		b.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	sandbox, err := execbox.New(execbox.Config{Command: command, Timeout: time.Minute, MaxNestedCalls: maxNested})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sandbox.Close() })
	red, _ := redact.New(redact.Config{})
	auth, _ := callerauth.New(nil, nil)
	g, err := New(Options{Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth, Instance: "bench",
		Drivers: map[string]drivers.Driver{"noop": noopDriver{}, "sandbox": sandbox},
		Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}, "code.run": {Driver: "sandbox"}}})
	if err != nil {
		b.Fatal(err)
	}
	return toolgatev1.NewToolGatewayClient(serve(b, g))
}
