package execbox

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

// echoTools is the trivial ToolCaller of the benchmarks: it answers every
// call with its input and records nothing.
type echoTools struct{}

func (echoTools) Tools() []drivers.ToolInfo { return []drivers.ToolInfo{{ID: "echo"}} }

func (echoTools) CallTool(_ context.Context, callID, _ string, input any) drivers.NestedResult {
	return drivers.NestedResult{RequestID: callID, OK: true, Result: input}
}

// benchInput is the input of every benchmarked call.
var benchInput = map[string]any{"query": "weather in Lisbon", "limit": 5}

// BenchmarkNestedCall measures one tool_call → tool_result round trip
// through the driver: decoding the call, the ToolCaller, encoding the
// result and both transport hops to a fake runner in the same or another
// process. One execution carries all b.N calls, so the start of the
// session is spread over them. Compare with BenchmarkDirectToolCall for
// the driver's share.
func BenchmarkNestedCall(b *testing.B) {
	starts := []struct {
		name   string
		config func(b *testing.B, script execboxtest.Script) Config
	}{
		{"ws", func(b *testing.B, script execboxtest.Script) Config {
			return Config{URL: execboxtest.NewWS(b, script).URL}
		}},
		{"stdio", func(b *testing.B, script execboxtest.Script) Config {
			return Config{Command: execboxtest.NewStdio(b, script).Command}
		}},
	}
	for _, s := range starts {
		b.Run(s.name, func(b *testing.B) {
			script := execboxtest.Script{
				execboxtest.Started(),
				execboxtest.Repeat(b.N, execboxtest.CallTool("c", "tools", "echo", benchInput), execboxtest.AwaitResult("c")),
				execboxtest.DoneUndefined(),
			}
			d := newDriver(b, s.config(b, script))
			call := newCall(echoTools{}, nil)
			b.ReportAllocs()
			b.ResetTimer()
			res, err := d.Run(context.Background(), call)
			b.StopTimer()
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("Run = %+v, %v", res, err)
			}
		})
	}
}

// BenchmarkDirectToolCall calls the ToolCaller of BenchmarkNestedCall
// directly, the floor of a nested call.
func BenchmarkDirectToolCall(b *testing.B) {
	var tools drivers.ToolCaller = echoTools{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r := tools.CallTool(ctx, "c", "echo", benchInput); !r.OK {
			b.Fatal(r)
		}
	}
}
