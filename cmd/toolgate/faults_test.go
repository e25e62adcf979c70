package main

// The fault suite: real gateway processes, a real MinIO, a real TPMJS
// executor fake and a real filesystem on loopback, broken the ways
// production breaks them (the store killed, frozen or refusing a write, the
// executor down, the gateway SIGKILLed, the disk full). Each test names the
// finding of issue 12 it covers and asserts what a caller or an auditor
// would notice: how often the tool ran (a count file in the workspace),
// what each caller was told, and what `toolgate evidence verify` says once
// the recovery sweep has run.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The suite's tests run one at a time, not in parallel: a store operation
// that outlasts faultOpTimeout is itself a fault (the artifact is
// spooled), and tests running beside them slow MinIO past it, adding
// faults a test did not plan. Those reach a race of the gateway's own: an
// artifact spooled for a request that recovery then finalises is flushed
// after its manifest and makes verify report the request tampered.
//
// Timings of the suite. Every tool of the suite runs well under
// faultCallTimeout, the cap of every driver; interrupted_after is above
// that cap, as the gateway requires, and short enough for the sweep to
// settle every request within faultSettle.
const (
	faultOpTimeout        = time.Second
	faultSweepInterval    = 200 * time.Millisecond
	faultInterruptedAfter = 6 * time.Second
	// A sandboxed shell under -race on two loaded cores can take seconds
	// to start; the cap must not cut the suite's tools short.
	faultCallTimeout = 5 * time.Second
	// faultSettle bounds every wait for the sweep or a recovered store.
	faultSettle = 30 * time.Second
	// faultPoll is the pause between two tries of eventually; with
	// faultSettle it bounds the calls a wait makes.
	faultPoll = 250 * time.Millisecond
	// faultCallDeadline is the deadline of a caller that does not leave.
	faultCallDeadline = 20 * time.Second
)

const faultPolicy = `@id("everything") permit (principal, action, resource);`

// faultGateway writes the configuration of a suite gateway named name:
// evidence at url with its spool in spool, the suite's sweep and
// interrupted_after, a store deadline of opTimeout, the workspace ./ws with
// its calls capped at faultCallTimeout, and more appended (further drivers,
// indented by two, then top-level keys).
func faultGateway(t *testing.T, dir, name, url, spool string, opTimeout time.Duration, more string) string {
	t.Helper()
	cfg := fmt.Sprintf(`instance: %s
evidence:
  url: %q
  spool_dir: %s
  op_timeout: %s
  sweep_interval: %s
  interrupted_after: %s
drivers:
  workspace:
    type: workspace
    root: ./ws
    default_timeout: %s
%s`, name, url, spool, opTimeout, faultSweepInterval, faultInterruptedAfter, faultCallTimeout, more)
	file := name + ".yaml"
	if err := os.WriteFile(filepath.Join(dir, file), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// countRequest is a workspace.shell call that appends a line to <id>.count
// in the workspace and then runs then (if any) and prints "done": the
// file's lines are how many times the tool started, its modification time
// when it last started.
func countRequest(t *testing.T, id, then string) *toolgatev1.RunToolRequest {
	t.Helper()
	cmd := "echo ran >> " + id + ".count; "
	if then != "" {
		cmd += then + "; "
	}
	return shellRequest(t, id, cmd+"echo done")
}

// runsOf is how many times the tool of countRequest(id) started.
func runsOf(t *testing.T, dir, id string) int {
	t.Helper()
	return lines(t, filepath.Join(dir, "ws", id+".count"))
}

// answer is what one RunTool call got.
type answer struct {
	resp *toolgatev1.RunToolResponse
	err  error
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("%v %q", status.Code(a.err), status.Convert(a.err).Message())
	}
	out := a.resp.GetToolResult().GetStdout()
	if len(out) > 60 {
		out = out[:30] + "…" + out[len(out)-30:]
	}
	return fmt.Sprintf("ok=%v exit=%d stdout=%q", a.resp.GetOk(), a.resp.GetToolResult().GetExitCode(), out)
}

// callWithin calls RunTool with a caller deadline of d.
func callWithin(c toolgatev1.ToolGatewayClient, req *toolgatev1.RunToolRequest, d time.Duration) answer {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.RunTool(ctx, req)
	return answer{resp, err}
}

// eventually calls fn every faultPoll until it returns nil, and fails the
// test with what and fn's last error if that takes longer than timeout.
func eventually(t testing.TB, timeout time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (still so after %v): %v", what, timeout, err)
		}
		time.Sleep(faultPoll)
	}
}

// retryUntilAnswered retries req until the gateway answers it with a
// response: a retry may first get ABORTED while the sweep has yet to close
// a stale attempt, or UNAVAILABLE while the store recovers.
func retryUntilAnswered(t *testing.T, what string, c toolgatev1.ToolGatewayClient, req *toolgatev1.RunToolRequest) *toolgatev1.RunToolResponse {
	t.Helper()
	var got *toolgatev1.RunToolResponse
	eventually(t, faultSettle, what, func() error {
		a := callWithin(c, req, faultCallDeadline)
		got = a.resp
		return a.err
	})
	return got
}

// settled waits until `toolgate evidence verify --all` reports no request
// of the store at url incomplete: the recovery sweep has finalised every
// request the faults left behind. The spool is not consulted; the
// evidence has to reach the store. s is the same store, read to say, of
// each request still incomplete, what its attempts are.
func settled(t *testing.T, finding, dir string, env []string, url string, s evidence.Store) {
	t.Helper()
	eventually(t, faultSettle, finding+": after the sweep, `toolgate evidence verify --all` still reports a request incomplete or tampered", func() error {
		out, stderr, code := runToolEnv(t, dir, env, "evidence", "verify", "--evidence", url, "--all", "--spool", "none")
		if code == exitFailure {
			return fmt.Errorf("the evidence contradicts itself (verify exit 1):\n%s%s", out, stderr)
		}
		if code != exitOK {
			return fmt.Errorf("verify exit %d:\n%s%s", code, out, stderr)
		}
		var incomplete []string
		for line := range strings.Lines(out) {
			// A request without a manifest stored within the log grace is
			// reported in flight ("pending ID: in flight: …"), older
			// ones incomplete: neither is settled.
			rest, ok := strings.CutPrefix(line, "incomplete ")
			if inFlight, isPending := strings.CutPrefix(line, "pending "); isPending && strings.Contains(line, ": in flight:") {
				rest, ok = inFlight, true
			}
			if ok {
				id, _, _ := strings.Cut(rest, ":")
				incomplete = append(incomplete, strings.TrimSpace(line)+"\n    "+storedState(t, s, id))
			}
		}
		if len(incomplete) > 0 {
			return fmt.Errorf("%d incomplete:\n%s", len(incomplete), strings.Join(incomplete, "\n"))
		}
		return nil
	})
}

// storedState says what s holds of request id: its artifacts and
// attempts, and whether verify should have called it not dispatched.
func storedState(t *testing.T, s evidence.Store, id string) string {
	t.Helper()
	st := inspect(t, s, id)
	names := make([]string, len(st.keys))
	for i, k := range st.keys {
		names[i] = strings.TrimPrefix(k, evidence.RequestPrefix(id))
	}
	attempts, err := evidence.ReadAttempts(context.Background(), s, id, st.keys)
	if err != nil {
		return fmt.Sprintf("artifacts %v; attempts unreadable: %v", names, err)
	}
	var states []string
	for _, a := range attempts {
		states = append(states, fmt.Sprintf("%d:%s", a.Number, a.State))
	}
	note := "the sweep left it unfinished"
	if evidence.NeverDispatched(attempts) {
		note = "every attempt is closed not dispatched: verify should say not-dispatched, not incomplete"
	}
	return fmt.Sprintf("artifacts %v; attempts %v; %s", names, states, note)
}

// stored is what a store holds of one request.
type stored struct {
	keys     []string
	claimed  bool
	response *evidence.ResponseRecord // nil without response.json
	outcome  string                   // the manifest's outcome; "" without a manifest
	results  []evidence.ToolResultRecord
}

// inspect reads what s holds of request id.
func inspect(t *testing.T, s evidence.Store, id string) stored {
	t.Helper()
	ctx := context.Background()
	keys, err := s.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		t.Fatalf("list %s: %v", id, err)
	}
	st := stored{keys: keys}
	read := func(key string, v any) {
		data, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s is not JSON: %v\n%s", key, err, data)
		}
	}
	for _, k := range keys {
		switch path.Base(k) {
		case evidence.ArtifactRequest:
			st.claimed = true
		case evidence.ArtifactResponse:
			st.response = &evidence.ResponseRecord{}
			read(k, st.response)
		case evidence.ArtifactManifest:
			var m evidence.Manifest
			read(k, &m)
			st.outcome = m.Outcome
		case evidence.ArtifactToolResult:
			var r evidence.ToolResultRecord
			read(k, &r)
			st.results = append(st.results, r)
		}
	}
	return st
}

// noFalseTimeout fails the test if a tool result of id records exit 124, a
// tool timeout, although the tool never started (runs is 0): the driver
// was handed a call whose deadline had already passed (finding 4). A tool
// that did start may really time out on a loaded machine.
func noFalseTimeout(t *testing.T, finding, id string, st stored, runs int) {
	t.Helper()
	if runs > 0 {
		return
	}
	for _, r := range st.results {
		if r.ExitCode == 124 {
			t.Errorf("%s: %s: tool_result.json records exit 124 (a tool timeout) for a tool that never started", finding, id)
		}
	}
}

// sameStory fails the test if a later answer to a request tells a
// different story than the first caller was told: a caller told an error
// must never see a response replayed later (the reply waits for
// response.json to be durable, so a response stored afterwards was not
// durable when the first caller was answered), and a caller given a
// response must get exactly it again.
func sameStory(t *testing.T, what string, first, later answer) {
	t.Helper()
	switch {
	case first.err != nil && later.err == nil:
		t.Errorf("%s: the first caller was told %v, yet a retry replays a response (%v): the caller and the evidence disagree", what, first, later)
	case first.err == nil && later.err != nil:
		t.Errorf("%s: the first caller got a response (%v), a retry got %v", what, first, later)
	case first.err == nil && !proto.Equal(first.resp, later.resp):
		t.Errorf("%s: a retry got a different response than the first caller:\nfirst: %v\nretry: %v", what, first.resp, later.resp)
	}
}

// faultProxy is an HTTP reverse proxy on a loopback port of its own, in
// front of a real server (MinIO, a TPMJS executor). A test takes it down,
// so that connections to its port are refused as by a host that is down,
// brings it back on the same port, and makes it refuse chosen requests
// with 503 ServiceUnavailable, as a failing store does, or hold them and
// deliver them late, as a store that takes a write but answers too late.
type faultProxy struct {
	addr   string
	target *url.URL

	mu     sync.Mutex
	srv    *http.Server
	refuse func(*http.Request) bool
	late   func(*http.Request) bool
	lateBy time.Duration
	landed int // late requests delivered so far
}

// newFaultProxy starts a proxy to target, up, until the test ends.
func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{addr: l.Addr().String(), target: u}
	p.serve(l)
	t.Cleanup(p.down)
	return p
}

// URL is the proxy's base URL.
func (p *faultProxy) URL() string { return "http://" + p.addr }

func (p *faultProxy) serve(l net.Listener) {
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(p.target)
		r.Out.Host = r.In.Host // S3 signatures cover the Host header
	}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		refuse, late, lateBy := p.refuse, p.late, p.lateBy
		p.mu.Unlock()
		if late != nil && late(r) {
			p.deliverLate(w, r, lateBy)
			return
		}
		if refuse != nil && refuse(r) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>refused by the fault suite</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(l)
}

// down closes the listener and every connection: connections are refused.
func (p *faultProxy) down() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// up listens on the proxy's port again.
func (p *faultProxy) up(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("fault proxy: listen on %s again: %v", p.addr, err)
	}
	p.serve(l)
}

// deliverLate holds r for d and then sends it to the target whether or not
// its client still waits, so that a write the client gave up on lands all
// the same.
func (p *faultProxy) deliverLate(w http.ResponseWriter, r *http.Request, d time.Duration) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	time.Sleep(d)
	out := r.Clone(context.WithoutCancel(r.Context()))
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	resp, err := http.DefaultTransport.RoundTrip(out)
	p.mu.Lock()
	p.landed++
	p.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// setLate makes the proxy deliver the requests fn selects d late (nil:
// none).
func (p *faultProxy) setLate(fn func(*http.Request) bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.late, p.lateBy = fn, d
}

// lateDelivered is how many late requests the proxy has delivered.
func (p *faultProxy) lateDelivered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.landed
}

// setRefuse makes the proxy refuse the requests fn selects (nil: none).
func (p *faultProxy) setRefuse(fn func(*http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = fn
}

// putsOf selects S3 writes of the named artifact, of any attempt.
func putsOf(artifact string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/"+artifact)
	}
}

// s3URL is the evidence URL of bucket on the S3 endpoint endpoint.
func s3URL(bucket, endpoint string) string {
	return fmt.Sprintf("s3://%s/?endpoint=%s&region=%s&path_style=true", bucket, endpoint, evidencetest.Region)
}

// executions counts the /execute-tool requests a fake executor received.
func executions(e *tpmjstest.Executor) int {
	n := 0
	for _, r := range e.Requests() {
		if strings.HasSuffix(r.Path, "/execute-tool") {
			n++
		}
	}
	return n
}

// firstAttemptNotDispatched fails the test unless the request's first
// attempt is on record as not dispatched and its last as dispatched: the
// failed attempt was closed honestly, and the retry opened another.
func firstAttemptNotDispatched(t *testing.T, finding string, s evidence.Store, id string) {
	t.Helper()
	st := inspect(t, s, id)
	attempts, err := evidence.ReadAttempts(context.Background(), s, id, st.keys)
	if err != nil {
		t.Fatalf("%s: %s: read attempts: %v", finding, id, err)
	}
	if len(attempts) < 2 || attempts[0].State != evidence.NotDispatched || attempts[len(attempts)-1].State != evidence.Dispatched {
		t.Errorf("%s: %s: attempts %+v, want the first closed %s and the last %s", finding, id, attempts, evidence.NotDispatched, evidence.Dispatched)
	}
}

// TestFaultExecutorDownRetryRunsOnce covers finding 1 for a driver that
// fails before dispatch: the TPMJS executor refuses connections, the
// caller is told UNAVAILABLE and nothing ran; once the executor is back,
// the same request retried runs, once, and its evidence says what
// happened.
func TestFaultExecutorDownRetryRunsOnce(t *testing.T) {
	const finding = "finding 1 (executor refuses connections)"
	exec := tpmjstest.New(t, tpmjstest.NodeV10)
	executor := newFaultProxy(t, exec.URL)
	executor.down()
	dir := t.TempDir()
	writePolicy(t, dir, faultPolicy)
	url := "file://./evidence"
	cfg := faultGateway(t, dir, "gw", url, "./spool", faultOpTimeout, fmt.Sprintf(`  tpmjs:
    type: tpmjs
    url: %s
    call_timeout: %s
tools:
  fake.echo: {driver: tpmjs, package: %q, version: "1.0.0", export: %s}
`, executor.URL(), faultCallTimeout, tpmjstest.Package, tpmjstest.EchoTool))
	gw := startServer(t, dir, "--config", cfg)
	client := dial(t, gw.addr)
	args, err := structpb.NewStruct(map[string]any{"message": "once"})
	if err != nil {
		t.Fatal(err)
	}
	req := &toolgatev1.RunToolRequest{RequestId: "exec-down", ToolId: "fake.echo", Args: args}

	first := callWithin(client, req, faultCallDeadline)
	if status.Code(first.err) != codes.Unavailable {
		t.Fatalf("%s: call with the executor down = %v, want UNAVAILABLE", finding, first)
	}
	if !strings.Contains(first.String(), "nothing was executed") {
		t.Errorf("%s: call with the executor down = %v, want it to say nothing was executed", finding, first)
	}
	if n := executions(exec); n != 0 {
		t.Fatalf("%s: the executor received %d executions while it was down", finding, n)
	}

	executor.up(t)
	retry := callWithin(client, req, faultCallDeadline)
	if retry.err != nil || !retry.resp.GetOk() {
		t.Fatalf("%s: the same request retried once the executor is back = %v, want it run", finding, retry)
	}
	replay := callWithin(client, req, faultCallDeadline)
	if replay.err != nil || !proto.Equal(replay.resp, retry.resp) {
		t.Fatalf("%s: a further retry = %v, want the stored response", finding, replay)
	}
	if n := executions(exec); n != 1 {
		t.Fatalf("%s: the executor received %d executions, want exactly one", finding, n)
	}
	store, err := evidence.NewFileStore(filepath.Join(dir, "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	firstAttemptNotDispatched(t, finding, store, req.RequestId)
	settled(t, finding, dir, nil, url, store)
}

// TestFaultStoreFailsBeforeDispatchRetryRunsOnce covers finding 1 for the
// store: it fails before anything ran (killed before the claim, refusing
// the policy decision, refusing the dispatch marker, frozen past the
// caller's deadline). The caller is told the call did not run, the tool
// did not start, and once the store is back the same request retried runs
// exactly once.
func TestFaultStoreFailsBeforeDispatchRetryRunsOnce(t *testing.T) {
	m, direct, dir, bucket := faultBucket(t, "audit", "")
	proxy := newFaultProxy(t, m.Endpoint)
	// The store deadline is longer than the frozen-store caller's, so that
	// the caller leaves while the gateway still waits for the store.
	const opTimeout = 4 * time.Second
	straight := startServerEnv(t, dir, m.Env(), "--config", faultGateway(t, dir, "gw-direct", direct, "./spool-direct", opTimeout, ""))
	proxied := startServerEnv(t, dir, m.Env(), "--config", faultGateway(t, dir, "gw-proxied", s3URL("audit", proxy.URL()), "./spool-proxied", opTimeout, ""))
	viaDirect, viaProxy := dial(t, straight.addr), dial(t, proxied.addr)

	tests := []struct {
		name     string
		finding  string
		client   toolgatev1.ToolGatewayClient
		deadline time.Duration
		inject   func(testing.TB)
		recover  func(testing.TB)
		// want is the code the first caller gets.
		want codes.Code
		// closed is set when the first attempt must be on record as
		// not dispatched.
		closed bool
		// busy is how long the gateway may go on with the call after
		// the first caller left.
		busy time.Duration
	}{
		{"store killed before the claim", "finding 1 (store down)", viaDirect, faultCallDeadline,
			m.Kill, m.Start, codes.Unavailable, false, 0},
		{"store refuses the policy decision", "finding 1 (decision write failed)", viaProxy, faultCallDeadline,
			func(testing.TB) { proxy.setRefuse(putsOf(evidence.ArtifactPolicyDecision)) },
			func(testing.TB) { proxy.setRefuse(nil) }, codes.Unavailable, true, 0},
		{"store refuses the dispatch marker", "finding 1 (dispatch marker write failed)", viaProxy, faultCallDeadline,
			func(testing.TB) { proxy.setRefuse(putsOf(evidence.ArtifactDispatch)) },
			func(testing.TB) { proxy.setRefuse(nil) }, codes.Unavailable, false, 0},
		// The marker lands after the gateway gave up on it: the caller,
		// whose own deadline is far off, is told UNAVAILABLE, not that its
		// deadline passed, and the attempt is closed after its marker.
		{"store takes the dispatch marker after its op timeout", "finding 1 (dispatch marker write timed out)", viaProxy, faultCallDeadline,
			func(testing.TB) { proxy.setLate(putsOf(evidence.ArtifactDispatch), opTimeout+time.Second) },
			func(t testing.TB) {
				eventually(t, faultSettle, "the late dispatch marker never reached the store", func() error {
					if proxy.lateDelivered() == 0 {
						return errors.New("not delivered yet")
					}
					return nil
				})
				proxy.setLate(nil, 0)
			}, codes.Unavailable, true, 0},
		{"store frozen past the caller's deadline", "finding 1(c) (caller deadline passed before dispatch)", viaDirect, 1500 * time.Millisecond,
			m.Freeze, func(t testing.TB) { time.Sleep(1500 * time.Millisecond); m.Thaw(t) }, codes.DeadlineExceeded, false, 2 * time.Second},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("pre-%d", i)
			req := countRequest(t, id, "")
			tc.inject(t)
			first := callWithin(tc.client, req, tc.deadline)
			tc.recover(t)
			if status.Code(first.err) != tc.want {
				t.Errorf("%s: first call = %v, want %v", tc.finding, first, tc.want)
			}
			if tc.want == codes.Unavailable && !strings.Contains(first.String(), "nothing was executed") {
				t.Errorf("%s: first call = %v, want it to say nothing was executed", tc.finding, first)
			}
			time.Sleep(tc.busy)
			if n := runsOf(t, dir, id); n != 0 {
				t.Fatalf("%s: the tool started %d time(s) although the caller was told it did not run", tc.finding, n)
			}
			noFalseTimeout(t, tc.finding, id, inspect(t, bucket, id), 0)

			resp := retryUntilAnswered(t, tc.finding+": the same request retried after recovery never ran", tc.client, req)
			if !resp.GetOk() || resp.GetToolResult().GetStdout() != "done\n" {
				t.Fatalf("%s: retry answered %v, want the tool's output", tc.finding, resp)
			}
			again := callWithin(tc.client, req, faultCallDeadline)
			if again.err != nil || !proto.Equal(again.resp, resp) {
				t.Fatalf("%s: a further retry = %v, want the stored response", tc.finding, again)
			}
			if n := runsOf(t, dir, id); n != 1 {
				t.Fatalf("%s: the tool ran %d times, want exactly once", tc.finding, n)
			}
			st := inspect(t, bucket, id)
			noFalseTimeout(t, tc.finding, id, st, 1)
			if tc.closed {
				firstAttemptNotDispatched(t, tc.finding, bucket, id)
			}
		})
	}
	settled(t, "finding 1", dir, m.Env(), direct, bucket)
}

// TestFaultGatewayKilledMidWrite covers finding 2: the gateway is SIGKILLed
// during a burst of calls on MinIO, so requests are left at every stage;
// restarted under the same name, its sweep finalises them. Afterwards no
// request is incomplete, no tool ran twice, and a retry of every request
// gets what its evidence says: the stored response if one is stored,
// ABORTED if it was dispatched without one, a fresh run if it never was.
func TestFaultGatewayKilledMidWrite(t *testing.T) {
	const finding = "finding 2 (gateway killed mid-write)"
	m, url, dir, bucket := faultBucket(t, "audit", "")
	cfg := shortLease(t, dir, faultGateway(t, dir, "gw", url, "./spool-gw", faultOpTimeout, ""))
	gw := startServerEnv(t, dir, m.Env(), "--config", cfg)
	client := dial(t, gw.addr)

	const ids, callersPerID = 32, 2
	reqs := make([]*toolgatev1.RunToolRequest, ids)
	for i := range reqs {
		reqs[i] = countRequest(t, fmt.Sprintf("kill-%02d", i), "sleep 0.2")
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// The burst is spread out, so that the kill finds calls at every
		// stage: claimed, decided, running, writing their results.
		for _, req := range reqs {
			for range callersPerID {
				wg.Go(func() { callWithin(client, req, faultCallDeadline) })
			}
			time.Sleep(40 * time.Millisecond)
		}
	})
	started := func() int {
		n := 0
		for _, req := range reqs {
			if runsOf(t, dir, req.RequestId) > 0 {
				n++
			}
		}
		return n
	}
	eventually(t, faultSettle, finding+": the burst never got going", func() error {
		if n := started(); n < ids/4 {
			return fmt.Errorf("%d of %d tools started", n, ids)
		}
		return nil
	})
	if err := gw.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-gw.done
	wg.Wait()
	unfinished := 0
	for _, req := range reqs {
		if st := inspect(t, bucket, req.RequestId); st.claimed && st.outcome == "" {
			unfinished++
		}
	}
	if unfinished == 0 {
		t.Fatalf("%s: the kill landed after every call had finished; the test proved nothing", finding)
	}
	t.Logf("the kill left %d of %d requests without a manifest", unfinished, ids)

	gw = startServerEnv(t, dir, m.Env(), "--config", cfg)
	client = dial(t, gw.addr)
	settled(t, finding, dir, m.Env(), url, bucket)
	for _, req := range reqs {
		id := req.RequestId
		st := inspect(t, bucket, id)
		before := runsOf(t, dir, id)
		if before > 1 {
			t.Errorf("%s: %s: the tool ran %d times", finding, id, before)
		}
		noFalseTimeout(t, finding, id, st, before)
		retry := callWithin(client, req, faultCallDeadline)
		after := runsOf(t, dir, id)
		switch {
		case st.response != nil:
			if retry.err != nil || retry.resp.GetOk() != st.response.OK || retry.resp.GetToolResult().GetStdout() != st.response.ToolResult.Stdout {
				t.Errorf("%s: %s: response.json is stored (ok=%v), yet a retry got %v", finding, id, st.response.OK, retry)
			}
			if after != before {
				t.Errorf("%s: %s: replaying the stored response ran the tool again", finding, id)
			}
		case st.outcome != "":
			if status.Code(retry.err) != codes.Aborted {
				t.Errorf("%s: %s: the manifest says %s without a response, yet a retry got %v, want ABORTED", finding, id, st.outcome, retry)
			}
			if after != before {
				t.Errorf("%s: %s: a request dispatched before the kill ran again", finding, id)
			}
		default:
			if retry.err != nil || !retry.resp.GetOk() || after != 1 || before != 0 {
				t.Errorf("%s: %s: never dispatched (%d artifacts), yet a retry got %v and the tool ran %d then %d times, want one fresh run",
					finding, id, len(st.keys), retry, before, after)
			}
		}
	}
	settled(t, finding, dir, m.Env(), url, bucket)
}

// smallDisk mounts a tmpfs of size bytes at dir until the test ends: a real
// filesystem that fills up. Mounting needs root, which CI has.
func smallDisk(t *testing.T, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs at %s (the disk-full test needs root): %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fillDisk fills the filesystem of dir up to leave free bytes, and returns
// the function that frees the space again.
func fillDisk(t *testing.T, dir string, leave int64) (free func()) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatalf("create the filler: %v", err)
	}
	defer f.Close()
	if n := int64(st.Bavail)*st.Bsize - leave; n > 0 {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatalf("fill the disk: %v", err)
		}
	}
	return func() {
		if err := os.Remove(filler); err != nil {
			t.Fatalf("free the disk: %v", err)
		}
	}
}

// TestFaultDiskFullSpoolOnSameDisk covers finding 3: the evidence folder and
// the spool share a small real filesystem, which fills up, to a different
// level each time, while a tool runs. Whatever the first caller is told,
// no retry, while the disk is full or after it has been freed, tells a
// different story, the tool runs once, and after the sweep nothing is
// incomplete.
func TestFaultDiskFullSpoolOnSameDisk(t *testing.T) {
	const finding = "finding 3 (disk full, spool on the same disk)"
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk")
	smallDisk(t, disk, 4<<20)
	writePolicy(t, dir, faultPolicy)
	url := "file://./disk/evidence"
	gw := startServer(t, dir, "--config", faultGateway(t, dir, "gw", url, "./disk/spool", faultOpTimeout, ""))
	client := dial(t, gw.addr)
	store, err := evidence.NewFileStore(filepath.Join(disk, "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// The tool's output is ~40 KB, not very compressible, so that the
	// levels fall between the sizes of its artifacts.
	for _, leave := range []int64{0, 8 << 10, 32 << 10, 128 << 10} {
		t.Run(fmt.Sprintf("%d bytes left", leave), func(t *testing.T) {
			id := fmt.Sprintf("full-%d", leave)
			req := countRequest(t, id, "sleep 0.5; seq 100000 108000")
			res := make(chan answer, 1)
			go func() { res <- callWithin(client, req, faultCallDeadline) }()
			eventually(t, faultSettle, finding+": the tool never started", func() error {
				if runsOf(t, dir, id) == 0 {
					return fmt.Errorf("no run of %s", id)
				}
				return nil
			})
			free := fillDisk(t, disk, leave)
			first := <-res
			t.Logf("the first caller was told %v", first)
			sameStory(t, finding+": retry while the disk is full", first, callWithin(client, req, faultCallDeadline))
			free()
			settled(t, finding, dir, nil, url, store)
			sameStory(t, finding+": retry after the disk was freed and the sweep ran", first, callWithin(client, req, faultCallDeadline))
			if n := runsOf(t, dir, id); n != 1 {
				t.Errorf("%s: the tool ran %d times, want once", finding, n)
			}
		})
	}
}

// TestFaultFrozenStoreVsCallerDeadline covers finding 4: MinIO is frozen
// for longer than the callers' 2–3 s deadlines (and shorter than the
// store deadline), with two calls in flight
// and eight arriving. The callers leave; after the store thaws, no tool
// started after its caller's deadline, no tool result records a timeout
// for a tool that never ran, nothing is incomplete after the sweep, and a
// request whose tool never started runs once when retried (finding 1(c)).
func TestFaultFrozenStoreVsCallerDeadline(t *testing.T) {
	const finding = "finding 4 (frozen store vs the caller's deadline)"
	m, url, dir, bucket := faultBucket(t, "audit", "")
	// The store stays frozen longer than every caller's deadline but
	// shorter than the store deadline: the callers leave while the gateway
	// still waits for the store, which then answers.
	const opTimeout, frozen = 4 * time.Second, 3500 * time.Millisecond
	gw := startServerEnv(t, dir, m.Env(), "--config", faultGateway(t, dir, "gw", url, "./spool-gw", opTimeout, ""))
	client := dial(t, gw.addr)

	type call struct {
		req      *toolgatev1.RunToolRequest
		deadline time.Time
		answer   answer
	}
	var calls []*call
	var wg sync.WaitGroup
	send := func(id, then string, within time.Duration) {
		c := &call{req: countRequest(t, id, then), deadline: time.Now().Add(within)}
		calls = append(calls, c)
		wg.Go(func() { c.answer = callWithin(client, c.req, within) })
	}
	for i := range 2 {
		send(fmt.Sprintf("inflight-%d", i), "sleep 1", 2500*time.Millisecond)
	}
	eventually(t, faultSettle, finding+": the in-flight tools never started", func() error {
		for _, c := range calls {
			if runsOf(t, dir, c.req.RequestId) == 0 {
				return fmt.Errorf("%s has not started", c.req.RequestId)
			}
		}
		return nil
	})
	m.Freeze(t)
	thawAt := time.Now().Add(frozen)
	for i := range 8 {
		send(fmt.Sprintf("arriving-%d", i), "", 2*time.Second+time.Duration(i)*125*time.Millisecond)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Until(thawAt))
	m.Thaw(t)
	wg.Wait()
	settled(t, finding, dir, m.Env(), url, bucket)

	// A tool starts some milliseconds after its dispatch; a start this
	// much after the caller's deadline was dispatched after it.
	const slack = time.Second
	for _, c := range calls {
		id := c.req.RequestId
		runs := runsOf(t, dir, id)
		st := inspect(t, bucket, id)
		noFalseTimeout(t, finding, id, st, runs)
		if runs > 1 {
			t.Errorf("%s: %s: the tool ran %d times", finding, id, runs)
		}
		if runs > 0 {
			fi, err := os.Stat(filepath.Join(dir, "ws", id+".count"))
			if err != nil {
				t.Fatal(err)
			}
			if late := fi.ModTime().Sub(c.deadline); late > slack {
				t.Errorf("%s: %s: the tool started %v after its caller's deadline had passed (the caller was told %v)", finding, id, late.Round(time.Millisecond), c.answer)
			}
		}
		if c.answer.err == nil {
			continue // answered in time; nothing to retry
		}
		switch {
		case st.response != nil:
			retry := callWithin(client, c.req, faultCallDeadline)
			if retry.err != nil || retry.resp.GetToolResult().GetStdout() != st.response.ToolResult.Stdout {
				t.Errorf("%s: %s: response.json is stored, yet a retry got %v", finding, id, retry)
			}
		case runs == 0:
			resp := retryUntilAnswered(t, "finding 1(c): "+id+": a request whose tool never started is never run by a retry", client, c.req)
			if !resp.GetOk() || runsOf(t, dir, id) != 1 {
				t.Errorf("finding 1(c): %s: retry answered %v and the tool ran %d times, want one run", id, resp, runsOf(t, dir, id))
			}
		}
	}
	settled(t, finding, dir, m.Env(), url, bucket)
}

// faultBucket starts a MinIO with one bucket, and a test folder holding
// the fault suite's policy: what every fault test stands on.
func faultBucket(t *testing.T, bucket, prefix string) (m *evidencetest.MinIO, url, dir string, store evidence.Store) {
	t.Helper()
	m = evidencetest.StartMinIO(t)
	m.CreateBucket(t, bucket, false)
	url = m.URL(bucket, prefix)
	dir = t.TempDir()
	writePolicy(t, dir, faultPolicy)
	return m, url, dir, openBucket(t, m, url)
}

// replicas are two gateways, gw-a and gw-b, sharing one bucket of a real
// MinIO, each with its own spool.
type replicas struct {
	minio  *evidencetest.MinIO
	url    string
	dir    string
	bucket evidence.Store
	a, b   toolgatev1.ToolGatewayClient
}

func startReplicas(t *testing.T) replicas {
	t.Helper()
	var r replicas
	r.minio, r.url, r.dir, r.bucket = faultBucket(t, "shared", "toolgate")
	m := r.minio
	a := startServerEnv(t, r.dir, m.Env(), "--config", faultGateway(t, r.dir, "gw-a", r.url, "./spool-gw-a", faultOpTimeout, ""))
	b := startServerEnv(t, r.dir, m.Env(), "--config", faultGateway(t, r.dir, "gw-b", r.url, "./spool-gw-b", faultOpTimeout, ""))
	r.a, r.b = dial(t, a.addr), dial(t, b.addr)
	return r
}

// TestFaultOneRequestIDTwoReplicas: at-most-once through the faults. 64
// callers send one request_id to two gateways sharing one bucket while the
// store is frozen, or killed, mid-call. The tool runs at most once; every
// caller who got a response got the same one; after recovery both
// replicas tell the same story; and if nothing ran, the id is still
// usable and runs once.
func TestFaultOneRequestIDTwoReplicas(t *testing.T) {
	r := startReplicas(t)
	m, url, dir, bucket := r.minio, r.url, r.dir, r.bucket
	clients := []toolgatev1.ToolGatewayClient{r.a, r.b}

	tests := []struct {
		name            string
		inject, recover func(testing.TB)
	}{
		{"store frozen mid-call", m.Freeze, m.Thaw},
		{"store killed mid-call", m.Kill, m.Start},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			finding := "at-most-once (" + tc.name + ")"
			id := fmt.Sprintf("one-%d", i)
			req := countRequest(t, id, "sleep 0.5")
			const callers = 64
			answers := make([]answer, callers)
			var wg sync.WaitGroup
			for n := range callers {
				wg.Go(func() { answers[n] = callWithin(clients[n%2], req, faultCallDeadline) })
			}
			waitForKey(t, bucket, evidence.Key(id, evidence.ArtifactPolicyDecision))
			tc.inject(t)
			time.Sleep(2 * time.Second)
			tc.recover(t)
			wg.Wait()
			if n := runsOf(t, dir, id); n > 1 {
				t.Fatalf("%s: the tool ran %d times for one request_id", finding, n)
			}
			var got *toolgatev1.RunToolResponse
			for n, ans := range answers {
				switch {
				case ans.err == nil && got == nil:
					got = ans.resp
				case ans.err == nil && !proto.Equal(ans.resp, got):
					t.Errorf("%s: caller %d got a different response: %v, another got %v", finding, n, ans.resp, got)
				case ans.err != nil && status.Code(ans.err) != codes.Aborted && status.Code(ans.err) != codes.Unavailable:
					t.Errorf("%s: caller %d: %v, want a response, ABORTED or UNAVAILABLE", finding, n, ans)
				}
			}
			settled(t, finding, dir, m.Env(), url, bucket)
			if runsOf(t, dir, id) == 0 {
				got = retryUntilAnswered(t, finding+": nothing ran, yet the request id can no longer be run", clients[0], req)
			}
			final := []answer{callWithin(clients[0], req, faultCallDeadline), callWithin(clients[1], req, faultCallDeadline)}
			for r, ans := range final {
				if got != nil {
					sameStory(t, fmt.Sprintf("%s: replica %d after recovery", finding, r), answer{resp: got}, ans)
				}
			}
			if final[0].err != nil && final[1].err != nil && status.Code(final[0].err) != status.Code(final[1].err) {
				t.Errorf("%s: the replicas disagree after recovery: %v / %v", finding, final[0], final[1])
			}
			if (final[0].err == nil) != (final[1].err == nil) {
				t.Errorf("%s: the replicas disagree after recovery: %v / %v", finding, final[0], final[1])
			}
			if n := runsOf(t, dir, id); n > 1 || (got != nil && n != 1) {
				t.Fatalf("%s: the tool ran %d times; a caller got a response: %v", finding, n, got != nil)
			}
		})
	}
}

// TestFaultReplicaClaimFailsWhileOtherRuns: at-most-once and honest
// evidence across replicas. Replica A runs a call; the store freezes while
// A's tool runs, so A keeps the result in its spool and answers; replica B
// gets the same request_id meanwhile and cannot even claim it. B's failed
// claim must not let B's sweep finalise A's request: after the sweep the
// evidence agrees with what A's caller was told, nothing is tampered, and
// the tool ran once.
func TestFaultReplicaClaimFailsWhileOtherRuns(t *testing.T) {
	const finding = "at-most-once (a replica's claim fails while the other runs the call)"
	r := startReplicas(t)
	m, url, dir, bucket := r.minio, r.url, r.dir, r.bucket
	replicaA, replicaB := r.a, r.b

	const id = "replica-claim"
	req := countRequest(t, id, "sleep 2")
	owner := make(chan answer, 1)
	go func() { owner <- callWithin(replicaA, req, faultCallDeadline) }()
	waitForKey(t, bucket, evidence.Key(id, evidence.ArtifactDispatch))
	m.Freeze(t)
	other := callWithin(replicaB, req, faultCallDeadline)
	// A's tool ends, and A answers from its spool while the store is
	// still frozen; its manifest goes to the spool too.
	first := <-owner
	time.Sleep(2 * faultOpTimeout)
	m.Thaw(t)
	t.Logf("A's caller was told %v; B's caller %v", first, other)
	if other.err != nil && status.Code(other.err) != codes.Unavailable && status.Code(other.err) != codes.Aborted {
		t.Errorf("%s: B's caller: %v, want UNAVAILABLE or ABORTED", finding, other)
	}
	settled(t, finding, dir, m.Env(), url, bucket)
	st := inspect(t, bucket, id)
	if first.err == nil && (st.response == nil || st.outcome == evidence.OutcomeInterrupted) {
		t.Errorf("%s: A's caller got the response, yet the stored evidence has response %v and outcome %q", finding, st.response != nil, st.outcome)
	}
	for name, c := range map[string]toolgatev1.ToolGatewayClient{"A": replicaA, "B": replicaB} {
		sameStory(t, finding+": a retry on replica "+name, first, callWithin(c, req, faultCallDeadline))
	}
	if n := runsOf(t, dir, id); n != 1 {
		t.Errorf("%s: the tool ran %d times, want once", finding, n)
	}
}
