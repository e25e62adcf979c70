package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/callbench"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

const benchAbout = `
Starts a gateway in this process on the evidence store given (a fresh folder
by default), with a workspace driver and a policy that allows
workspace.readFile and denies every other tool, and calls it over gRPC on
loopback from 1, 8 and 64 callers: allowed reads of a 25-byte file and, with
--deny, denied calls. At each number of callers it first measures the floor
of the store: for a folder, writing a small file, fsyncing it and fsyncing
its folder; for S3, one create-only PUT (If-None-Match: *). Each row is
bounded by --duration and --max-calls. Every call is checked: an allowed
call must be ok and return the file, a denied one must be a deny; any other
answer counts as failed and makes the exit status 1. An S3 store must be on
a loopback endpoint; the gateway's evidence goes under a fresh prefix.

With --ceiling, each number of callers also gets a "ceiling" row: the same
allowed calls to a second gateway whose evidence is kept in memory, where
no write waits for storage. It is what this machine's CPU allows the
gateway, client included: a store's row can come near it, never pass it.
`

// benchContent is the file every allowed call reads: 25 bytes.
const benchContent = "toolgate bench: 25 bytes\n"

// benchPolicy allows the read and nothing else, so the denied call is
// denied by default, as most calls a policy refuses are.
const benchPolicy = `@id("bench_read")
@reason("the benchmark's allowed call")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

// maxBenchCallers bounds --callers: each caller is a goroutine and a
// stream, and the gateway is given as many concurrent calls.
const maxBenchCallers = 1024

// benchOptions are bench's flags, checked.
type benchOptions struct {
	evidenceURL string
	callers     []int
	duration    time.Duration
	maxCalls    int
	deny        bool
	ceiling     bool
	json        bool
	profileDir  string
}

// benchCmd runs the governed-call benchmark.
func benchCmd(ctx context.Context, args []string, std stdio) int {
	opts, err := parseBenchFlags(args, std)
	if err != nil {
		return flagExit(err)
	}
	stopProfiles, err := startProfiles(opts.profileDir)
	if err != nil {
		fmt.Fprintf(std.Err, "toolgate bench: %v\n", err)
		return exitError
	}
	rows, err := runBench(ctx, opts, std)
	if perr := stopProfiles(); err == nil {
		err = perr
	}
	if err != nil {
		fmt.Fprintf(std.Err, "toolgate bench: %v\n", err)
		return exitError
	}
	if err := writeBench(std.Out, opts, rows); err != nil {
		fmt.Fprintf(std.Err, "toolgate bench: %v\n", err)
		return exitError
	}
	for _, r := range rows {
		if r.Failed > 0 {
			fmt.Fprintf(std.Err, "toolgate bench: %d %s calls at %d callers failed; the first: %s\n", r.Failed, r.Kind, r.Callers, r.FirstError)
			return exitFailure
		}
	}
	return exitOK
}

func parseBenchFlags(args []string, std stdio) (benchOptions, error) {
	fs := newFlagSet("toolgate bench", "[--evidence URL] [--callers 1,8,64] [--duration 10s] [--deny] [--ceiling] [--json]", benchAbout, std)
	evidenceURL := fs.String("evidence", "", "evidence store `URL`: file://DIR or s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:PORT&… (default: a fresh temporary folder)")
	callers := fs.String("callers", "1,8,64", "comma-separated `counts` of concurrent callers")
	duration := fs.Duration("duration", 10*time.Second, "how long each row runs, at most (up to 10m)")
	maxCalls := fs.Int("max-calls", 200_000, "how many calls each row makes, at most")
	deny := fs.Bool("deny", false, "measure denied calls too")
	ceiling := fs.Bool("ceiling", false, "measure allowed calls to a gateway that keeps its evidence in memory too: the CPU's limit")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	profileDir := fs.String("profile", "", "write CPU, mutex and block profiles and an execution trace of the run (cpu.pprof, mutex.pprof, block.pprof, trace.out) to `folder`")
	if err := parseFlags(fs, args); err != nil {
		return benchOptions{}, err
	}
	usage := func(format string, a ...any) (benchOptions, error) {
		fmt.Fprintf(std.Err, "toolgate bench: "+format+"\n", a...)
		return benchOptions{}, errUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	opts := benchOptions{evidenceURL: *evidenceURL, duration: *duration, maxCalls: *maxCalls, deny: *deny, ceiling: *ceiling, json: *asJSON, profileDir: *profileDir}
	for f := range strings.SplitSeq(*callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxBenchCallers {
			return usage("--callers %q: want counts from 1 to %d", *callers, maxBenchCallers)
		}
		opts.callers = append(opts.callers, n)
	}
	if opts.duration <= 0 || opts.duration > 10*time.Minute {
		return usage("--duration %v: want more than 0 and at most 10m", opts.duration)
	}
	if opts.maxCalls < 1 || opts.maxCalls > 10_000_000 {
		return usage("--max-calls %d: want 1 to 10000000", opts.maxCalls)
	}
	return opts, nil
}

// benchStore is the store a run measures: where the gateway keeps its
// evidence and how one floor operation is made on the same storage.
type benchStore struct {
	kind       string // "file" or "s3"
	gatewayURL string
	floor      callbench.Op
	close      func() error
}

// runBench measures every row: at each number of callers, the floor, the
// allowed call and, with opts.deny, the denied call.
func runBench(ctx context.Context, opts benchOptions, std stdio) ([]callbench.Row, error) {
	work, err := os.MkdirTemp("", "toolgate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	store, err := openBenchStore(ctx, opts.evidenceURL, work)
	if err != nil {
		return nil, err
	}
	defer store.close()
	client, stop, err := startBenchGateway(ctx, work, store.gatewayURL, slices.Max(opts.callers), std)
	if err != nil {
		return nil, err
	}
	defer stop()
	clients := map[string]toolgatev1.ToolGatewayClient{"allow": client, "deny": client}
	kinds := []string{"allow"}
	if opts.deny {
		kinds = append(kinds, "deny")
	}
	if opts.ceiling {
		memWork := filepath.Join(work, "ceiling")
		if clients["ceiling"], stop, err = startBenchGateway(ctx, memWork, "mem://", slices.Max(opts.callers), std); err != nil {
			return nil, err
		}
		defer stop()
		kinds = append(kinds, "ceiling")
	}
	lim := callbench.Limits{Duration: opts.duration, MaxOps: opts.maxCalls}
	run := rand.Text()[:8] // request ids of this run, unused by any other
	var rows []callbench.Row
	for _, n := range opts.callers {
		floor, err := callbench.Run(ctx, n, lim, store.floor)
		if err != nil {
			return nil, err
		}
		fr := callbench.Row{Store: store.kind, Kind: "floor", Result: floor}
		fr.Compare(floor)
		rows = append(rows, fr)
		for _, kind := range kinds {
			op := benchCall(clients[kind], kind, fmt.Sprintf("bench-%s-%s-%d", run, kind, n))
			res, err := callbench.Run(ctx, n, lim, op)
			if err != nil {
				return nil, err
			}
			row := callbench.Row{Store: store.kind, Kind: kind, Result: res}
			row.Compare(floor)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// benchCall returns the operation of one governed call of kind, checking
// its answer: an allowed call returns the file, a denied one is denied.
func benchCall(client toolgatev1.ToolGatewayClient, kind, idPrefix string) callbench.Op {
	tool, args := "workspace.readFile", map[string]any{"path": "bench.txt"}
	if kind == "deny" {
		tool, args = "workspace.createFile", map[string]any{"path": "denied.txt", "content": "x"}
	}
	argStruct, _ := structpb.NewStruct(args) // constant, always convertible
	return func(ctx context.Context, _, seq int) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		resp, err := client.RunTool(ctx, &toolgatev1.RunToolRequest{
			RequestId: fmt.Sprintf("%s-%d", idPrefix, seq), ToolId: tool, Args: argStruct,
		})
		if err != nil {
			return err
		}
		decision := resp.GetPolicyCheck().GetDecision()
		switch {
		case kind != "deny" && (decision != "allow" || !resp.GetOk() || resp.GetToolResult().GetStdout() != benchContent):
			return fmt.Errorf("allowed call answered decision %q, ok %v", decision, resp.GetOk())
		case kind == "deny" && (decision != "deny" || resp.GetOk()):
			return fmt.Errorf("denied call answered decision %q, ok %v", decision, resp.GetOk())
		}
		return nil
	}
}

// openBenchStore prepares the store raw names (a fresh folder under work
// when empty) and its floor.
func openBenchStore(ctx context.Context, raw, work string) (benchStore, error) {
	if raw == "" {
		raw = "file://" + filepath.Join(work, "evidence")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return benchStore{}, fmt.Errorf("--evidence: %w", err)
	}
	switch u.Scheme {
	case "file":
		return fileBenchStore(raw, u)
	case "s3":
		return s3BenchStore(ctx, u)
	}
	return benchStore{}, fmt.Errorf("--evidence %q: want file:// or s3://", u.Redacted())
}

// fileBenchStore keeps the floor's files in a fresh folder beside the
// store's, on the same file system.
func fileBenchStore(raw string, u *url.URL) (benchStore, error) {
	dir := filepath.Clean(u.Path)
	if u.Host != "" || !filepath.IsAbs(dir) {
		return benchStore{}, fmt.Errorf("--evidence %q: want file:///absolute/folder", raw)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return benchStore{}, err
	}
	floorDir, err := os.MkdirTemp(filepath.Dir(dir), ".toolgate-bench-floor-")
	if err != nil {
		return benchStore{}, err
	}
	data := []byte(`{"request_id":"floor","detail":"` + strings.Repeat("a", 200) + `"}` + "\n")
	var n atomic.Int64 // names unique across the rows of a run
	floor := func(context.Context, int, int) error {
		return durableFile(floorDir, fmt.Sprintf("f%d", n.Add(1)), data)
	}
	return benchStore{kind: "file", gatewayURL: raw, floor: floor, close: func() error { return os.RemoveAll(floorDir) }}, nil
}

// durableFile is the file store's floor: one small file created, written
// and fsynced, and its folder fsynced so that its entry survives a crash.
func durableFile(dir, name string, data []byte) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// s3BenchStore puts the gateway's evidence and the floor's objects under
// fresh prefixes of the one given, on a loopback endpoint only.
func s3BenchStore(ctx context.Context, u *url.URL) (benchStore, error) {
	endpoint, err := url.Parse(u.Query().Get("endpoint"))
	if err != nil || endpoint.Host == "" {
		return benchStore{}, fmt.Errorf("--evidence %q: an S3 store needs endpoint=http://127.0.0.1:PORT (the benchmark runs on loopback only)", u.Redacted())
	}
	if !loopbackHost(endpoint.Hostname()) {
		return benchStore{}, fmt.Errorf("--evidence: endpoint %q is not a loopback address; the benchmark runs on loopback only", endpoint.Host)
	}
	run := "bench-" + strings.ToLower(rand.Text()[:10])
	withPrefix := func(p string) string {
		v := *u
		v.Path = "/" + path.Join(strings.Trim(u.Path, "/"), run, p)
		return v.String()
	}
	floorStore, err := storeurl.Open(ctx, withPrefix("floor"))
	if err != nil {
		return benchStore{}, fmt.Errorf("--evidence: %w", err)
	}
	data := []byte(`{"request_id":"floor","detail":"` + strings.Repeat("a", 200) + `"}` + "\n")
	var n atomic.Int64 // keys unique across the rows of a run
	floor := func(ctx context.Context, _, _ int) error {
		return floorStore.Put(ctx, fmt.Sprintf("floor/f%d.json", n.Add(1)), data)
	}
	return benchStore{kind: "s3", gatewayURL: withPrefix("gateway"), floor: floor, close: floorStore.Close}, nil
}

// loopbackHost reports whether host names this machine: localhost or a
// loopback address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startBenchGateway builds a gateway as serve does, on storeURL, and
// serves it on a loopback port; it returns a client and what stops both.
func startBenchGateway(ctx context.Context, work, storeURL string, callers int, std stdio) (toolgatev1.ToolGatewayClient, func(), error) {
	ws, policies := filepath.Join(work, "workspace"), filepath.Join(work, "policies")
	for _, d := range []string{ws, policies} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "bench.txt"), []byte(benchContent), 0o640); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(policies, "policy.default.cedar"), []byte(benchPolicy), 0o640); err != nil {
		return nil, nil, err
	}
	// The shell never runs here (the policy allows only the read), so
	// the driver needs no sandbox, and a host without user namespaces can
	// run the benchmark too.
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
instance: %s
admin: {listen: "off"}
policies: {dir: %q, reload_interval: -1s}
evidence:
  url: %q
  spool_dir: %q
  signing_key: {file: %q, create: true}
limits: {max_concurrent_calls: %d}
drivers:
  workspace: {type: workspace, root: %q, sandbox: none}
`, "bench-"+strings.ToLower(rand.Text()[:8]), policies, storeURL, filepath.Join(work, "spool"),
		filepath.Join(work, "signing.key"), max(64, callers), ws)
	cfgFile := filepath.Join(work, "bench.yaml")
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		return nil, nil, err
	}
	cfg, err := config.LoadConfig(cfgFile)
	if err != nil {
		return nil, nil, err
	}
	// The gateway's own log lines (one per call) would measure the
	// terminal; only its warnings and errors are shown.
	log := slog.New(slog.NewTextHandler(std.Err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, closer, err := gateway.Build(ctx, cfg, std.Getenv, log)
	if err != nil {
		return nil, nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closer.Close()
		return nil, nil, err
	}
	srv, _ := g.NewServer()
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { g.RunSpoolFlusher(bg, spoolFlushInterval) })
	wg.Go(func() { _ = srv.Serve(g.LimitListener(lis)) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	stop := func() {
		if conn != nil {
			conn.Close()
		}
		srv.GracefulStop()
		stopBG()
		wg.Wait()
		closer.Close()
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return toolgatev1.NewToolGatewayClient(conn), stop, nil
}

// benchReport is bench's JSON output.
type benchReport struct {
	Machine benchMachine    `json:"machine"`
	Rows    []callbench.Row `json:"rows"`
}

type benchMachine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Version   string `json:"toolgate_version"`
}

func writeBench(w io.Writer, opts benchOptions, rows []callbench.Row) error {
	m := benchMachine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Version: gateway.Version}
	if opts.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(benchReport{Machine: m, Rows: rows})
	}
	if _, err := fmt.Fprintf(w, "toolgate %s, %s %s/%s, %d CPUs, %v a row at most\n\n", m.Version, m.GoVersion, m.OS, m.Arch, m.CPUs, opts.duration); err != nil {
		return err
	}
	return callbench.WriteTable(w, rows)
}

// startProfiles starts the CPU profile and the mutex and block profiles'
// sampling when dir is set; the returned function writes them.
func startProfiles(dir string) (func() error, error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	// The execution trace is what shows where a call waits off the CPU:
	// `go tool trace -pprof=syscall` (fsync, PUTs), `-pprof=sched` (waiting
	// for a core), `-pprof=sync` (locks and channels).
	tr, err := os.Create(filepath.Join(dir, "trace.out"))
	if err != nil {
		pprof.StopCPUProfile()
		cpu.Close()
		return nil, err
	}
	if err := trace.Start(tr); err != nil {
		pprof.StopCPUProfile()
		cpu.Close()
		tr.Close()
		return nil, err
	}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	return func() error {
		pprof.StopCPUProfile()
		trace.Stop()
		errs := []error{cpu.Close(), tr.Close()}
		for _, name := range []string{"mutex", "block"} {
			f, err := os.Create(filepath.Join(dir, name+".pprof"))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, pprof.Lookup(name).WriteTo(f, 0), f.Close())
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
		return errors.Join(errs...)
	}, nil
}
