package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// noopDriver answers at once, so a benchmark measures the gateway alone.
type noopDriver struct{}

func (noopDriver) Engine() string { return "noop" }

func (noopDriver) Run(context.Context, drivers.Call) (drivers.Result, error) {
	return drivers.Result{Stdout: "ok\n", Data: map[string]any{"done": true}}, nil
}

// echoDesc is a bare unary service on the same server: it decodes the same
// request and answers a response of similar size, doing nothing else. It
// is the baseline the gateway's overhead is measured against.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "toolgate.bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(toolgatev1.RunToolRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			return &toolgatev1.RunToolResponse{
				Ok:           true,
				ToolResult:   &toolgatev1.ToolResult{Stdout: "ok\n"},
				PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "allow", Reason: "echo", RuleId: req.GetToolId()},
				EvidenceRefs: []string{"requests/" + req.GetRequestId() + "/response.json"},
				EngineRef:    "echo",
			}, nil
		},
	}},
}

const benchPolicy = `
@id("allow_noop") @reason("benchmark")
permit (principal, action == Action::"RunTool", resource == Tool::"noop.run");
`

// benchDecider loads benchPolicy and builds the default redactor: the
// collaborators every RunTool benchmark's gateway shares.
func benchDecider(b *testing.B) (*policy.Engine, *redact.Redactor) {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(benchPolicy), 0o600); err != nil {
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
	return engine, red
}

func benchClient(b *testing.B, store evidence.Store) (*grpc.ClientConn, toolgatev1.ToolGatewayClient) {
	b.Helper()
	return benchClientWith(b, store, nil, nil, nil)
}

// benchClientWith is benchClient with tel recording the gateway's metrics
// and spans, signer signing and sealing its evidence, and l, a lease on
// instance "bench", held (each nil: none).
func benchClientWith(b *testing.B, store evidence.Store, tel *telemetry.Telemetry, signer *evidence.Signer, l *lease.Lease) (*grpc.ClientConn, toolgatev1.ToolGatewayClient) {
	b.Helper()
	engine, red := benchDecider(b)
	auth, _ := callerauth.New(nil, nil)
	g, err := New(Options{
		Decider: engine, Store: store, Redactor: red, Auth: auth, Instance: "bench", Telemetry: tel, Signer: signer, Lease: l,
		Drivers: map[string]drivers.Driver{"noop": noopDriver{}, "other": noopDriver{}},
		Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}, "other.run": {Driver: "other", Target: "run"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	conn := serve(b, g, func(s *grpc.Server) { s.RegisterService(&echoDesc, struct{}{}) })
	return conn, toolgatev1.NewToolGatewayClient(conn)
}

// benchHistoryClient is benchClientWith (a memory store, no signer)
// under a policy that decides on history.
func benchHistoryClient(b *testing.B, tel *telemetry.Telemetry) (*grpc.ClientConn, toolgatev1.ToolGatewayClient) {
	b.Helper()
	dir := b.TempDir()
	text := `@id("allow_noop") @label("bench")
permit (principal, action == Action::"RunTool", resource == Tool::"noop.run")
when { context.session.calls < 1000000000 && context.caller.callsLastMinute < 1000000000 };`
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	_, red := benchDecider(b)
	auth, _ := callerauth.New(nil, nil)
	g, err := New(Options{
		Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth, Instance: "bench", Telemetry: tel,
		Drivers: map[string]drivers.Driver{"noop": noopDriver{}},
		Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	conn := serve(b, g, func(s *grpc.Server) { s.RegisterService(&echoDesc, struct{}{}) })
	return conn, toolgatev1.NewToolGatewayClient(conn)
}

// benchLease takes and runs the lease on instance "bench" in store, with
// the default heartbeat.
func benchLease(b *testing.B, store evidence.Store) *lease.Lease {
	b.Helper()
	l, err := lease.Acquire(context.Background(), store, lease.Options{Instance: "bench",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return l
}

// discardExporter is a span exporter that drops every span: tracing is on
// (spans are sampled, built, ended and batched) but nothing is sent, so a
// benchmark measures the gateway's cost of tracing, not a collector's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }

func (discardExporter) Shutdown(context.Context) error { return nil }

// benchTelemetry is telemetry as an operator runs it: metrics in a
// registry of their own, every call traced through the SDK's batch span
// processor into discardExporter.
func benchTelemetry(b *testing.B) *telemetry.Telemetry {
	b.Helper()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discardExporter{}),
	)
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	tel, err := telemetry.New(telemetry.Options{Registerer: prometheus.NewRegistry(), TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	return tel
}

// cpuMeter reports the process's CPU time per operation (user and system,
// every goroutine: client, server, GC) as cpu-ns/op. On a shared machine
// wall time per call swings with the neighbours' load; the CPU a call
// costs moves much less, so ratios of cpu-ns/op stay comparable between
// runs where ratios of ns/op do not.
type cpuMeter struct{ start time.Duration }

func startCPU() cpuMeter { return cpuMeter{start: processCPU()} }

func (m cpuMeter) report(b *testing.B, ops int) {
	if ops > 0 {
		b.ReportMetric(float64(processCPU()-m.start)/float64(ops), "cpu-ns/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunTool measures RunTool over a real loopback gRPC connection.
// "echo" is a bare unary call on the same connection; the gateway's
// overhead is each case's ns/op divided by echo's. The "memory-telemetry"
// cases are "memory" with metrics and tracing on (a no-op exporter), the
// configuration the overhead goal is stated for.
func BenchmarkRunTool(b *testing.B) {
	args, _ := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0, "verbose": true})
	newReq := func(i int, tool string) *toolgatev1.RunToolRequest {
		return &toolgatev1.RunToolRequest{
			RequestId: fmt.Sprintf("bench-%d", i), ToolId: tool, Args: args,
			Ctx: &toolgatev1.RunContext{RunId: "run-1", StepId: "step-1"},
		}
	}
	b.Run("echo", func(b *testing.B) {
		conn, _ := benchClient(b, evidence.NewMemoryStore())
		b.ReportAllocs()
		cpu := startCPU()
		i := 0
		for b.Loop() {
			var resp toolgatev1.RunToolResponse
			if err := conn.Invoke(context.Background(), "/toolgate.bench.Echo/Echo", newReq(i, "noop.run"), &resp); err != nil {
				b.Fatal(err)
			}
			i++
		}
		cpu.report(b, i)
	})
	stores := []struct {
		name      string
		open      func(b *testing.B) evidence.Store
		telemetry bool
		leased    bool
		// signed: manifests signed and records sealed, as on every
		// gateway whose configuration does not say signing_key: none.
		signed bool
	}{
		{name: "memory", open: func(*testing.B) evidence.Store { return evidence.NewMemoryStore() }},
		{name: "memory-signed", open: func(*testing.B) evidence.Store { return evidence.NewMemoryStore() }, signed: true},
		// The instance lease's cost per call: its check before the claim
		// and on every write (the heartbeat runs once per period).
		{name: "leased-memory", open: func(*testing.B) evidence.Store { return evidence.NewMemoryStore() }, leased: true},
		{name: "memory-telemetry", open: func(*testing.B) evidence.Store { return evidence.NewMemoryStore() }, telemetry: true},
		// The transparency log's own cost per call: building the claim's
		// and the completion's entries (sequencing runs once a second).
		{name: "logged-memory", open: func(b *testing.B) evidence.Store { return withBenchLog(b, evidence.NewMemoryStore()) }},
		{name: "file", open: func(b *testing.B) evidence.Store {
			s, err := evidence.NewFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	for _, path := range []struct{ name, tool string }{{"deny", "other.run"}, {"allow", "noop.run"}} {
		for _, st := range stores {
			b.Run(path.name+"/"+st.name, func(b *testing.B) {
				var tel *telemetry.Telemetry
				if st.telemetry {
					tel = benchTelemetry(b)
				}
				store := st.open(b)
				var l *lease.Lease
				if st.leased {
					l = benchLease(b, store)
				}
				var signer *evidence.Signer
				if st.signed {
					signer = benchSigner(b)
				}
				_, client := benchClientWith(b, store, tel, signer, l)
				b.ReportAllocs()
				cpu := startCPU()
				i := 0
				for b.Loop() {
					resp, err := client.RunTool(context.Background(), newReq(i, path.tool))
					if err != nil {
						b.Fatal(err)
					}
					if want := path.name; resp.GetPolicyCheck().GetDecision() != want {
						b.Fatalf("decision %q, want %q", resp.GetPolicyCheck().GetDecision(), want)
					}
					i++
				}
				cpu.report(b, i)
			})
		}
	}
}

// BenchmarkOverhead is the overhead goal measured so that a shared
// machine's drift cancels out: every iteration makes one bare echo call
// and one RunTool call on the same connection, one right after the other,
// timing each, and reports the ratio of the summed times as x-echo. The
// gateway runs with metrics and tracing on (benchTelemetry) and the
// memory store. BenchmarkRunTool's separate cases give the absolute
// figures; their ratios move with whatever else the machine runs between
// them.
func BenchmarkOverhead(b *testing.B) {
	args, _ := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0, "verbose": true})
	// allow-history is allow under a policy that decides on history (a
	// session cap and a label): one create-only write of the caller's
	// next history slot per call, no read.
	for _, path := range []struct{ name, tool, decision string }{
		{"deny", "other.run", "deny"}, {"allow", "noop.run", "allow"}, {"allow-history", "noop.run", "allow"},
	} {
		b.Run(path.name, func(b *testing.B) {
			var conn *grpc.ClientConn
			var client toolgatev1.ToolGatewayClient
			if path.name == "allow-history" {
				conn, client = benchHistoryClient(b, benchTelemetry(b))
			} else {
				conn, client = benchClientWith(b, evidence.NewMemoryStore(), benchTelemetry(b), nil, nil)
			}
			var echoTime, callTime time.Duration
			i := 0
			for b.Loop() {
				req := &toolgatev1.RunToolRequest{
					RequestId: fmt.Sprintf("overhead-%d", i), ToolId: path.tool, Args: args,
					Ctx: &toolgatev1.RunContext{RunId: "run-1", StepId: "step-1"},
				}
				start := time.Now()
				var echoed toolgatev1.RunToolResponse
				if err := conn.Invoke(context.Background(), "/toolgate.bench.Echo/Echo", req, &echoed); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				resp, err := client.RunTool(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				callTime += time.Since(mid)
				echoTime += mid.Sub(start)
				if resp.GetPolicyCheck().GetDecision() != path.decision {
					b.Fatalf("decision %q, want %q", resp.GetPolicyCheck().GetDecision(), path.decision)
				}
				i++
			}
			b.ReportMetric(float64(echoTime)/float64(i), "echo-ns/op")
			b.ReportMetric(float64(callTime)/float64(i), "call-ns/op")
			b.ReportMetric(float64(callTime)/float64(echoTime), "x-echo")
		})
	}
}

// BenchmarkNestedCall measures one nested tool call made by sandboxed code:
// tool_call from the runner, the whole gate (claim, CallTool decision,
// redaction, evidence in memory), tool_result back. "direct" is the same
// tool called through RunTool over loopback gRPC, in the same run.
func BenchmarkNestedCall(b *testing.B) {
	const policyText = `
permit (principal, action == Action::"RunTool", resource == Tool::"code.run");
permit (principal, action, resource == Tool::"noop.run");
`
	newGateway := func(b *testing.B, runnerURL string) toolgatev1.ToolGatewayClient {
		dir := b.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(policyText), 0o600); err != nil {
			b.Fatal(err)
		}
		engine, err := policy.Load(dir)
		if err != nil {
			b.Fatal(err)
		}
		red, _ := redact.New(redact.Config{})
		auth, _ := callerauth.New(nil, nil)
		drvs := map[string]drivers.Driver{"noop": noopDriver{}}
		tools := map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}}
		if runnerURL != "" {
			sandbox, err := execbox.New(execbox.Config{URL: runnerURL, Timeout: time.Hour, MaxNestedCalls: execbox.MaxNestedCallsBound})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sandbox.Close() })
			drvs["sandbox"] = sandbox
			tools["code.run"] = Tool{Driver: "sandbox"}
		}
		g, err := New(Options{Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth,
			Instance: "bench", Drivers: drvs, Tools: tools})
		if err != nil {
			b.Fatal(err)
		}
		return toolgatev1.NewToolGatewayClient(serve(b, g))
	}
	input := map[string]any{"path": "docs/readme.md", "limit": 10.0}
	b.Run("nested", func(b *testing.B) {
		// An execution makes at most MaxNestedCallsBound calls, so b.N
		// calls take several executions; the guest's code says how many
		// calls each makes.
		runnerURL := execboxtest.ServeWS(b, func(s *execboxtest.Session) {
			n, _ := strconv.Atoi(s.Execute()["code"].(string))
			execboxtest.Script{
				execboxtest.Started(),
				execboxtest.Repeat(n, execboxtest.CallTool("c", "noop", "run", input), execboxtest.AwaitResult("c")),
				execboxtest.DoneUndefined(),
			}.Play(s)
		})
		client := newGateway(b, runnerURL)
		b.ReportAllocs()
		b.ResetTimer()
		for round := 0; round*execbox.MaxNestedCallsBound < b.N; round++ {
			n := min(b.N-round*execbox.MaxNestedCallsBound, execbox.MaxNestedCallsBound)
			args, _ := structpb.NewStruct(map[string]any{"code": strconv.Itoa(n)})
			resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("nested-%d-%d", b.N, round), ToolId: "code.run", Args: args})
			if err != nil || !resp.GetOk() {
				b.Fatalf("sandbox run: %v, %v", resp, err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		client := newGateway(b, "")
		args, _ := structpb.NewStruct(input)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("direct-%d", i), ToolId: "noop.run", Args: args})
			if err != nil || !resp.GetOk() {
				b.Fatalf("direct call: %v, %v", resp, err)
			}
			i++
		}
	})
}

// benchSigner is a signer with a fixed key.
func benchSigner(b *testing.B) *evidence.Signer {
	b.Helper()
	s, err := evidence.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)))
	if err != nil {
		b.Fatal(err)
	}
	return s
}
