package main

// The hostile-input suite of the admin listener and its metrics: a real
// `toolgate serve`, scraped over HTTP as Prometheus and load balancers
// would, and attacked as someone on the host (or a web page in its
// browser) would.

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

var adminAddrPattern = regexp.MustCompile(`msg="admin serving" addr=(\S+)`)

// adminURL is the base URL of srv's admin listener, from its log.
func adminURL(t *testing.T, srv *server) string {
	t.Helper()
	m := adminAddrPattern.FindStringSubmatch(srv.log.String())
	if m == nil {
		t.Fatalf("the server logged no admin address:\n%s", srv.log.String())
	}
	return "http://" + m[1]
}

// adminGet sends method to url with an optional Host header and returns
// the status and body.
func adminDo(t *testing.T, method, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape returns the exposition text of srv's /metrics.
func scrape(t *testing.T, srv *server) string {
	t.Helper()
	code, body := adminDo(t, http.MethodGet, adminURL(t, srv)+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	return body
}

// series returns the sample lines of metric name in an exposition text.
func series(text, name string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			out = append(out, line)
		}
	}
	return out
}

// sampleValue is the value of the sample line of name whose labels
// include every fragment of labels (`decision="allow"` …), or "" when
// there is none.
func sampleValue(text, name string, labels ...string) string {
	for _, line := range series(text, name) {
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if ok {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// writeMetricsConfig writes toolgate.yaml in dir, a workspace gateway with
// one API key (in $TOOLGATE_METRICS_KEY) and extra YAML appended.
func writeMetricsConfig(t *testing.T, dir, extra string) {
	t.Helper()
	cfg := `
listen: 127.0.0.1:0
auth:
  keys:
    - caller: alice
      env: TOOLGATE_METRICS_KEY
evidence:
  url: file://./evidence
  signing_key: none
drivers:
  workspace:
    type: workspace
    root: ./ws
` + extra
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// metricsKey is the API key of the suite's caller alice.
const metricsKey = "tg-metrics-key-5f0c2b7e9a1d4c36"

// metricsEnv hands metricsKey to the processes that read it from
// $TOOLGATE_METRICS_KEY.
var metricsEnv = []string{"TOOLGATE_METRICS_KEY=" + metricsKey}

// asAlice is a context carrying alice's key.
func asAlice() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+metricsKey)
}

// runCall makes one RunTool call as alice.
func runCall(t *testing.T, c toolgatev1.ToolGatewayClient, id, tool string, args map[string]any) (*toolgatev1.RunToolResponse, error) {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	return c.RunTool(asAlice(), &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
}

// TestHostileAdminListenerAddress: the admin listener has no
// authentication and its metrics name tools and rules, so an address
// other hosts can reach is refused unless the operator says so, and it
// may not share a port with the gRPC listener.
func TestHostileAdminListenerAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra string
		args        []string
		want        string
	}{
		{"an admin listener on every interface is refused without allow_non_loopback",
			"", []string{"--admin-listen", "0.0.0.0:0"}, "admin.listen \"0.0.0.0:0\" is not a loopback address"},
		{"an admin listener on a public address in the file is refused",
			"admin: {listen: \"192.0.2.1:9464\"}\n", []string{"--admin-listen", ""}, "admin.listen \"192.0.2.1:9464\" is not a loopback address"},
		{"an admin listener on the gRPC listener's port is refused",
			"admin: {listen: \"127.0.0.1:47123\"}\n", []string{"--listen", "127.0.0.1:47123", "--admin-listen", "127.0.0.1:47123"},
			"the gRPC listener's address"},
		{"an admin address that is not host:port is refused",
			"", []string{"--admin-listen", "metrics"}, "admin.listen \"metrics\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tourDir(t)
			writeMetricsConfig(t, dir, tc.extra)
			stderr := serveMustRefuseEnv(t, dir, metricsEnv, append([]string{"--config", "toolgate.yaml"}, tc.args...)...)
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("refused, but stderr does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
	t.Run("an admin address another process holds stops serve and says how to choose another", func(t *testing.T) {
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		dir := tourDir(t)
		writeMetricsConfig(t, dir, "")
		stderr := serveMustRefuseEnv(t, dir, metricsEnv, "--config", "toolgate.yaml", "--admin-listen", held.Addr().String())
		for _, want := range []string{"address already in use", "admin.listen", "--admin-listen ADDR|off"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("refused, but stderr does not say %q:\n%s", want, stderr)
			}
		}
	})
	t.Run("check config points at the admin.listen line", func(t *testing.T) {
		dir := tourDir(t)
		writeMetricsConfig(t, dir, "admin:\n  listen: 0.0.0.0:9464\n")
		_, stderr, code := runToolEnv(t, dir, metricsEnv, "check", "config", "toolgate.yaml")
		if code != exitFailure || !regexp.MustCompile(`toolgate\.yaml:15: admin\.listen "0\.0\.0\.0:9464" is not a loopback`).MatchString(stderr) {
			t.Fatalf("check config: exit %d, want 1 and the problem on admin.listen's line (15):\n%s", code, stderr)
		}
	})
	t.Run("allow_non_loopback lets the operator serve it on every interface", func(t *testing.T) {
		dir := tourDir(t)
		writeMetricsConfig(t, dir, "admin: {allow_non_loopback: true}\n")
		srv := startServerEnv(t, dir, metricsEnv, "--config", "toolgate.yaml", "--admin-listen", "0.0.0.0:0")
		if !strings.Contains(srv.log.String(), `msg="admin serving" addr=[::]:`) {
			t.Fatalf("the admin listener is not on every interface:\n%s", srv.log.String())
		}
	})
	t.Run("off turns the admin listener off", func(t *testing.T) {
		dir := tourDir(t)
		writeMetricsConfig(t, dir, "admin: {listen: off}\n")
		srv := startServerEnv(t, dir, metricsEnv, "--config", "toolgate.yaml", "--admin-listen", "")
		if strings.Contains(srv.log.String(), "admin serving") {
			t.Fatalf("admin.listen: off, and an admin listener started:\n%s", srv.log.String())
		}
	})
}

// TestHostileAdminRequests: the admin listener answers GET and HEAD on its
// three paths and nothing else, and only to loopback host names, so that a
// web page cannot read it through a DNS name rebound to 127.0.0.1.
func TestHostileAdminRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all") permit (principal, action, resource);`)
	srv := startServer(t, dir)
	base := adminURL(t, srv)
	for _, tc := range []struct {
		name, method, path, host string
		code                     int
	}{
		{"a POST to /metrics is refused", http.MethodPost, "/metrics", "", http.StatusMethodNotAllowed},
		{"a DELETE of /readyz is refused", http.MethodDelete, "/readyz", "", http.StatusMethodNotAllowed},
		{"a PUT to /healthz is refused", http.MethodPut, "/healthz", "", http.StatusMethodNotAllowed},
		{"the root is not found", http.MethodGet, "/", "", http.StatusNotFound},
		{"pprof is not served", http.MethodGet, "/debug/pprof/", "", http.StatusNotFound},
		{"a path below /metrics is not found", http.MethodGet, "/metrics/x", "", http.StatusNotFound},
		{"a rebound DNS name cannot read the metrics", http.MethodGet, "/metrics", "evil.example:9464", http.StatusForbidden},
		{"a rebound DNS name cannot probe readiness", http.MethodGet, "/readyz", "evil.example", http.StatusForbidden},
		{"HEAD of /metrics is answered", http.MethodHead, "/metrics", "", http.StatusOK},
		{"localhost is a loopback name", http.MethodGet, "/healthz", "localhost:9464", http.StatusOK},
		{"liveness answers 200", http.MethodGet, "/healthz", "", http.StatusOK},
		{"readiness answers 200 while serving", http.MethodGet, "/readyz", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := adminDo(t, tc.method, base+tc.path, tc.host)
			if code != tc.code {
				t.Fatalf("%s %s (Host %q): %d, want %d\n%s", tc.method, tc.path, tc.host, code, tc.code, body)
			}
		})
	}
	if _, body := adminDo(t, http.MethodGet, base+"/readyz", ""); body != "SERVING\n" {
		t.Errorf("/readyz body %q, want SERVING", body)
	}
}

// TestHostileMetricsLeakNothing: calls whose arguments carry a secret and
// a marker, made with an API key, leave neither the marker, the secret,
// the key nor the request ids anywhere in /metrics; an unknown tool id is
// collapsed to "other".
func TestHostileMetricsLeakNothing(t *testing.T) {
	t.Parallel()
	const (
		marker   = "zq-metrics-marker-7d41"
		secret   = "AKIAZ7Q3EXAMPLE9KEYZ"
		unknown  = "evil.tool-zq-unknown"
		reqIDTag = "zq-req-"
	)
	dir := t.TempDir()
	writePolicy(t, dir, `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`)
	writeMetricsConfig(t, dir, "")
	srv := startServerEnv(t, dir, metricsEnv, "--config", "toolgate.yaml")
	c := dial(t, srv.addr)
	for i, call := range []struct{ tool, path string }{
		{"workspace.readFile", marker + ".txt"},
		{"workspace.shell", secret},
		{unknown, marker},
	} {
		// Denied, failed or run: every outcome goes through the metrics.
		runCall(t, c, fmt.Sprintf("%s%d", reqIDTag, i), call.tool, map[string]any{
			"path": call.path, "command": "echo " + marker + " " + secret, "token": secret,
		})
	}
	text := scrape(t, srv)
	for _, leak := range []string{marker, secret, metricsKey, reqIDTag, unknown, "alice"} {
		if strings.Contains(text, leak) {
			t.Errorf("/metrics holds %q", leak)
		}
	}
	if v := sampleValue(text, "toolgate_calls_total", `tool="other"`); v != "1" {
		t.Errorf("calls of an unknown tool under tool=\"other\": %q, want 1", v)
	}
}

// TestHostileMetricsCardinality: a flood of calls with distinct unknown
// tool ids and random request ids, as a caller probing the gateway sends,
// does not grow toolgate_calls_total: every unknown id is one series.
func TestHostileMetricsCardinality(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all") permit (principal, action, resource in Driver::"workspace");`)
	// The evidence of 5,000 calls stays in memory: the flood is about
	// labels, not the disk.
	srv := startServer(t, dir, "--evidence", "mem://")
	c := dial(t, srv.addr)
	before := len(series(scrape(t, srv), "toolgate_calls_total"))
	const flood, workers = 5000, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < flood; i += workers {
				id := rand.Text()
				c.RunTool(context.Background(), &toolgatev1.RunToolRequest{
					RequestId: id, ToolId: fmt.Sprintf("probe.%d.%s", i, id[:8]),
				})
			}
		})
	}
	wg.Wait()
	text := scrape(t, srv)
	after := series(text, "toolgate_calls_total")
	if len(after)-before > 2 {
		t.Fatalf("%d distinct unknown tool ids grew toolgate_calls_total from %d to %d series:\n%s",
			flood, before, len(after), strings.Join(after, "\n"))
	}
	total := 0
	for _, line := range after {
		if strings.Contains(line, `tool="other"`) {
			var v int
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			total += v
		}
	}
	if total != flood {
		t.Errorf("calls counted under tool=\"other\": %d, want %d", total, flood)
	}
}

// TestHostileReadinessDuringShutdown: once SIGTERM arrives the gateway
// drains, and /readyz says 503 so that a load balancer sends no new
// calls, while the call in flight finishes.
func TestHostileReadinessDuringShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	srv := startServer(t, dir)
	base := adminURL(t, srv)
	if code, _ := adminDo(t, http.MethodGet, base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz before shutdown: %d", code)
	}
	done := make(chan int, 1)
	go func() {
		_, _, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "drain-1",
			"--tool", "workspace.shell", "--args", `{"command": "sleep 3; echo finished"}`)
		done <- code
	}()
	waitForFile(t, filepath.Join(dir, "toolgate-evidence", "requests", "drain-1", "policy_decision.json"), "the call never started")
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, body = adminDo(t, http.MethodGet, base+"/readyz", ""); code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz during the drain: %d %q, want 503", code, body)
		}
	}
	if body != "NOT_SERVING\n" {
		t.Errorf("/readyz body during the drain %q, want NOT_SERVING", body)
	}
	if code, _ := adminDo(t, http.MethodGet, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz during the drain: %d, want 200 (the process is alive)", code)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("the call in flight: exit %d", code)
	}
	select {
	case <-srv.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit after the drain")
	}
}

// TestHostileMetricsMoveAsAUserExpects: what an operator watching the
// dashboard sees after an allowed call, a denied one, a rejected policy
// change and calls beyond max_concurrent_calls.
func TestHostileMetricsMoveAsAUserExpects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `
@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");
@id("shells") permit (principal, action, resource == Tool::"workspace.shell");
@id("no_deletes") forbid (principal, action, resource == Tool::"workspace.deleteFile");
`)
	writeMetricsConfig(t, dir, "policies: {reload_interval: 100ms}\nlimits: {max_concurrent_calls: 1}\n")
	srv := startServerEnv(t, dir, metricsEnv, "--config", "toolgate.yaml")
	c := dial(t, srv.addr)
	if err := os.MkdirAll(filepath.Join(dir, "ws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws", "a.txt"), []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, err := runCall(t, c, "ok-1", "workspace.readFile", map[string]any{"path": "a.txt"}); err != nil || !resp.GetOk() {
		t.Fatalf("allowed read: %v, %v", resp, err)
	}
	if resp, err := runCall(t, c, "no-1", "workspace.deleteFile", map[string]any{"path": "a.txt"}); err != nil || resp.GetOk() {
		t.Fatalf("denied delete: %v, %v", resp, err)
	}

	// Two shells at once under max_concurrent_calls: 1.
	slow := make(chan error, 1)
	go func() {
		_, err := runCall(t, c, "slow-1", "workspace.shell", map[string]any{"command": "sleep 2"})
		slow <- err
	}()
	waitForFile(t, filepath.Join(dir, "evidence", "requests", "slow-1", "policy_decision.json"), "the slow call never started")
	inFlight := sampleValue(scrape(t, srv), "toolgate_calls_in_flight")
	if _, err := runCall(t, c, "busy-1", "workspace.shell", map[string]any{"command": "true"}); err == nil {
		t.Fatal("a second call ran beside the first under max_concurrent_calls: 1")
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}

	// A policy change that does not parse is rejected; the watcher counts it.
	writePolicy(t, dir, "permit (principal action resource);\n")
	var text string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		text = scrape(t, srv)
		if v := sampleValue(text, "toolgate_policy_reloads_total", `result="rejected"`); v != "" && v != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rejected reload counted:\n%s", strings.Join(series(text, "toolgate_policy_reloads_total"), "\n"))
		}
	}
	for _, want := range []struct {
		name   string
		labels []string
		value  string
	}{
		{"toolgate_calls_total", []string{`decision="allow"`, `outcome="ran"`, `rule_id="reads"`, `tool="workspace.readFile"`}, "1"},
		{"toolgate_calls_total", []string{`decision="deny"`, `outcome="denied"`, `rule_id="no_deletes"`, `tool="workspace.deleteFile"`}, "1"},
		{"toolgate_calls_total", []string{`decision=""`, `outcome="error"`, `tool="workspace.shell"`}, "1"},
		{"toolgate_limit_hits_total", []string{`limit="max_concurrent_calls"`}, "1"},
		{"toolgate_frontdoor_requests_total", []string{`door="grpc"`}, "4"},
		{"toolgate_call_duration_seconds_count", []string{`outcome="ran"`}, "2"},
		{"toolgate_stage_duration_seconds_count", []string{`stage="auth"`}, ""},
		{"toolgate_build_info", []string{`version="`}, "1"},
		{"toolgate_calls_in_flight", nil, "0"},
		{"go_goroutines", nil, ""},
	} {
		got := sampleValue(text, want.name, want.labels...)
		if got == "" || (want.value != "" && got != want.value) {
			t.Errorf("%s%v = %q, want %q", want.name, want.labels, got, want.value)
		}
	}
	if inFlight != "1" {
		t.Errorf("toolgate_calls_in_flight while a call ran = %q, want 1", inFlight)
	}
}

// TestHostileFrontDoorRequestsCountedByDoor: requests to a door's routes
// count under the door's name (the TPMJS door answers every path), and
// probing random paths adds no series: the label is the door, never the
// path.
func TestHostileFrontDoorRequestsCountedByDoor(t *testing.T) {
	t.Parallel()
	base, _, srv := tpmjsDoorGateway(t)
	count := func() int {
		var n int
		fmt.Sscan(sampleValue(scrape(t, srv), "toolgate_frontdoor_requests_total", `door="tpmjs"`), &n)
		return n
	}
	before := count()
	if before < 1 {
		t.Fatalf("the door's /health probes were not counted: %d", before)
	}
	for range 3 {
		adminDo(t, http.MethodGet, base+"/health", "")
	}
	for i := range 20 {
		adminDo(t, http.MethodGet, fmt.Sprintf("%s/probe-%d", base, i), "")
	}
	if got := count(); got != before+23 {
		t.Errorf("tpmjs requests went from %d to %d, want +23", before, got)
	}
	if n := len(series(scrape(t, srv), "toolgate_frontdoor_requests_total")); n != 1 {
		t.Errorf("toolgate_frontdoor_requests_total has %d series, want 1 (tpmjs)", n)
	}
}
