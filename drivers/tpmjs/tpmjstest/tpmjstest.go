// Package tpmjstest provides a fake TPMJS executor for tests of the tpmjs
// driver and of the gateway end to end.
//
// The fake serves the executor protocol over a real HTTP server on
// loopback and reproduces the behaviour of the three executors in use,
// quirks included (see [Personality]): the Node templates of protocol 1.0,
// the Deno executor of protocol 1.1 and the Deno form of the Vercel
// template, which answers plain strings without codes. Tools are Go functions registered per
// package and export name; a set of built-in tools in [Package] covers the
// usual cases. Faults are injected with [Executor.SetDelay],
// [Executor.SetHealthDelay], [Executor.SetFlaky] and [Executor.SetBody],
// and [Executor.Requests] returns what the fake received, so a test can
// prove that nothing at all was sent.
package tpmjstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Personality selects which real executor the fake imitates.
type Personality int

const (
	// NodeV10 imitates the Node templates of protocol 1.0 (the Railway
	// template): "error" is an object {code, message}; every execution
	// result, failures included, is HTTP 200; a bad request is 400 and a
	// wrong API key 401 with a body that has no executionTimeMs; only
	// /execute-tool checks the key; a missing version means "latest"; a
	// package that is not registered fails the simulated npm install with
	// PACKAGE_NOT_FOUND; a tool that runs longer than the maximum
	// execution time is killed and reported as TOOL_EXECUTION_ERROR
	// "Script exited with code null", never as EXECUTION_TIMEOUT; a tool
	// that returns nil comes back as the string "{}". Routes are served
	// with and without an "/api" prefix.
	NodeV10 Personality = iota + 1
	// DenoV11 imitates the Deno executor of protocol 1.1: "error" is a
	// string next to errorStage, errorCode and retryable; version is
	// required; load failures use status codes (404 TOOL_NOT_FOUND, 400
	// INVALID_TOOL and TOOL_CONFIGURATION_REQUIRED, 500
	// PACKAGE_IMPORT_FAILED), a tool that throws is 200
	// TOOL_EXECUTION_FAILED; every route but /health checks the key and
	// answers 401 AUTHENTICATION_REQUIRED with executionTimeMs 0; there is
	// no /info (404) and no execution time limit; a tool that returns nil
	// yields an answer without "output".
	DenoV11
	// DenoVercel imitates the Deno form of the Vercel template, the
	// executor most Deno deployments run: every failure is a plain string
	// "error" without any code or stage, told apart only by its text and
	// status: 404 `Export "X" not found in module` (with
	// availableExports), 400 for a factory that cannot be initialized or
	// an export without execute, 500 for an import failure and also for a
	// tool that throws (the bare message); 401 {"error": "Unauthorized"}
	// without executionTimeMs; a missing version means "latest". /health
	// answers {"status", "version", "info": {"runtime": "deno", …}}; there
	// is no /info. The executor has no time limit of its own; with
	// WithMaxExecutionTime the hosting platform cuts a call off at that
	// limit with 504 and the plain-text FUNCTION_INVOCATION_TIMEOUT page.
	// Routes are served with and without an "/api" prefix.
	DenoVercel
)

// String returns the personality's name.
func (p Personality) String() string {
	switch p {
	case NodeV10:
		return "NodeV10"
	case DenoV11:
		return "DenoV11"
	case DenoVercel:
		return "DenoVercel"
	}
	return fmt.Sprintf("Personality(%d)", int(p))
}

// Package is the package of the built-in tools, registered on every fake.
const Package = "@toolgate/fake-tools"

// Export names of the built-in tools in Package.
const (
	// EchoTool returns {"params": params, "env": env}.
	EchoTool = "echoTool"
	// CaughtErrorTool succeeds with output {"error": true, "message": M},
	// like published tools that catch their own failures; M is
	// params["message"] or a default text.
	CaughtErrorTool = "caughtErrorTool"
	// SleepTool sleeps params["ms"] milliseconds (default 1000), then
	// returns {"slept_ms": ms}. It stops early when the request ends.
	SleepTool = "sleepTool"
	// FailTool throws params["message"] or a default text.
	FailTool = "failTool"
	// NullTool returns nothing (JavaScript undefined).
	NullTool = "nullTool"
	// InvalidTool is an export without an execute function.
	InvalidTool = "invalidTool"
	// FactoryTool is a factory that cannot be initialized without
	// configuration.
	FactoryTool = "factoryTool"
	// CrashTool makes the executor itself fail.
	CrashTool = "crashTool"
)

// Errors a ToolFunc returns to simulate failures outside the tool's own
// execution.
var (
	// ErrInvalidTool simulates an export that has no execute function.
	ErrInvalidTool = errors.New("export has no execute function")
	// ErrNeedsConfiguration simulates a factory export that cannot be
	// initialized without configuration.
	ErrNeedsConfiguration = errors.New("factory needs configuration")
	// ErrExecutorInternal simulates a failure of the executor itself.
	ErrExecutorInternal = errors.New("executor internal error")
)

// ToolFunc is a registered tool: it receives the request's params and env
// and returns the tool's output, or an error the tool throws.
type ToolFunc func(params map[string]any, env map[string]string) (output any, err error)

// toolFunc is a tool that can observe the end of its request.
type toolFunc func(ctx context.Context, params map[string]any, env map[string]string) (any, error)

// Received is one request the fake received.
type Received struct {
	Method string
	Path   string
	// Header holds every header as received, Authorization included.
	Header http.Header
	Body   []byte
}

// Option configures an Executor.
type Option func(*Executor)

// WithAPIKey makes the executor require "Authorization: Bearer key". By
// default authentication is off and skipped entirely, as the real
// executors do when they have no key.
func WithAPIKey(key string) Option {
	return func(e *Executor) { e.apiKey = key }
}

// WithMaxExecutionTime sets the maximum execution time of a NodeV10
// executor: advertised in /info as maxExecutionTimeMs and enforced by
// killing the tool (default 120s). On DenoVercel it is the hosting
// platform's limit (advertised nowhere, default none). DenoV11 has neither
// and ignores it.
func WithMaxExecutionTime(d time.Duration) Option {
	return func(e *Executor) { e.maxExec = d }
}

// WithVersion sets the implementationVersion (and the /info version) the
// executor reports. Defaults: "1.0.0" for NodeV10, "1.1.0" for DenoV11.
func WithVersion(v string) Option {
	return func(e *Executor) { e.version = v }
}

// Limits of the fake.
const (
	maxRequestBody = 32 << 20
	maxRecorded    = 10000 // requests kept for Requests; later ones are only served
)

// Executor is a fake TPMJS executor serving on URL until the test ends.
type Executor struct {
	// URL is the executor's base URL, for example "http://127.0.0.1:34567".
	URL string

	personality Personality
	apiKey      string
	maxExec     time.Duration
	version     string
	started     time.Time

	mu          sync.Mutex
	tools       map[string]map[string]toolFunc // package → export → tool
	delay       time.Duration
	healthDelay time.Duration
	flaky       int
	canned      *cannedBody
	received    []Received
}

// cannedBody is the answer SetBody installed.
type cannedBody struct {
	raw    string
	status int
}

// New starts a fake executor with personality p. The server is closed when
// the test ends.
func New(t testing.TB, p Personality, opts ...Option) *Executor {
	t.Helper()
	e := &Executor{personality: p, started: time.Now(), tools: map[string]map[string]toolFunc{}}
	switch p {
	case NodeV10:
		e.version, e.maxExec = "1.0.0", 120*time.Second
	case DenoV11:
		e.version = "1.1.0"
	case DenoVercel:
		e.version = "1.0.0"
	default:
		t.Fatalf("tpmjstest: unknown personality %v", p)
	}
	for _, o := range opts {
		o(e)
	}
	if p == DenoV11 {
		e.maxExec = 0
	}
	e.registerBuiltins()
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

// RegisterTool registers fn as the export export of package pkg, replacing
// any earlier registration. A package is "installable" once it has a tool.
// A ToolFunc cannot observe the end of its request: one that blocks keeps
// its goroutine until it returns.
func (e *Executor) RegisterTool(pkg, export string, fn ToolFunc) {
	e.register(pkg, export, func(_ context.Context, params map[string]any, env map[string]string) (any, error) {
		return fn(params, env)
	})
}

func (e *Executor) register(pkg, export string, fn toolFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tools[pkg] == nil {
		e.tools[pkg] = map[string]toolFunc{}
	}
	e.tools[pkg][export] = fn
}

// SetDelay makes every later /execute-tool request wait d before it is
// handled (after the checks of the request), like a slow npm install.
func (e *Executor) SetDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.delay = d
}

// SetHealthDelay makes /health and /info wait d before they answer, like
// the Node executor busy with an install.
func (e *Executor) SetHealthDelay(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.healthDelay = d
}

// SetFlaky makes the next n /execute-tool requests fail: the connection is
// reset without an answer.
func (e *Executor) SetFlaky(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flaky = n
}

// SetBody makes every later /execute-tool request answered with the raw
// body and status, before any check: an HTML error page, a truncated or a
// huge body. A status of 0 restores normal answers.
func (e *Executor) SetBody(raw string, status int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if status == 0 {
		e.canned = nil
		return
	}
	e.canned = &cannedBody{raw: raw, status: status}
}

// Requests returns the requests received so far, in order (at most the
// first 10000).
func (e *Executor) Requests() []Received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Received(nil), e.received...)
}

// serve is the fake's HTTP handler.
func (e *Executor) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	e.mu.Lock()
	if len(e.received) < maxRecorded {
		e.received = append(e.received, Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	}
	e.mu.Unlock()

	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, X-TPMJS-Protocol-Version")
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusOK)
		return
	}
	path := r.URL.Path
	if e.personality == NodeV10 || e.personality == DenoVercel {
		path = strings.TrimPrefix(path, "/api")
	}
	if r.Method == http.MethodPost && path == "/execute-tool" && e.fault(w) {
		return
	}
	switch e.personality {
	case NodeV10:
		e.serveNode(w, r, path, body)
	case DenoV11:
		e.serveDeno(w, r, path, body)
	case DenoVercel:
		e.serveVercel(w, r, path, body)
	}
}

// fault applies SetFlaky and SetBody and reports whether it answered.
func (e *Executor) fault(w http.ResponseWriter) bool {
	e.mu.Lock()
	flaky := e.flaky > 0
	if flaky {
		e.flaky--
	}
	canned := e.canned
	e.mu.Unlock()
	switch {
	case flaky:
		resetConnection(w)
		return true
	case canned != nil:
		ct := "application/json"
		if strings.HasPrefix(strings.TrimSpace(canned.raw), "<") {
			ct = "text/html; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(canned.status)
		_, _ = io.WriteString(w, canned.raw)
		return true
	}
	return false
}

// resetConnection drops the client's connection with a TCP reset.
func resetConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// serveNode routes a request like the Node template.
func (e *Executor) serveNode(w http.ResponseWriter, r *http.Request, path string, body []byte) {
	switch {
	case r.Method == http.MethodGet && path == "/health":
		if e.waitHealth(r.Context()) {
			writeJSON(w, http.StatusOK, map[string]any{
				"status": "ok", "protocolVersion": "1.0", "implementationVersion": e.version,
				"runtime": "node", "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
			})
		}
	case r.Method == http.MethodGet && path == "/info":
		if e.waitHealth(r.Context()) {
			writeJSON(w, http.StatusOK, map[string]any{
				"name": "Railway Executor", "version": e.version, "protocolVersion": "1.0",
				"capabilities": map[string]any{
					"isolation": "process", "executionModes": []string{"sync"},
					"maxExecutionTimeMs": e.maxExec.Milliseconds(), "maxRequestBodyBytes": 10485760,
					"supportsStreaming": false, "supportsCallbacks": false, "supportsCaching": false,
				},
				"runtime": map[string]any{"platform": "linux", "nodeVersion": "v20.10.0"},
			})
		}
	case r.Method == http.MethodPost && path == "/execute-tool":
		e.nodeExecute(w, r, body)
	case r.Method == http.MethodGet && path == "/":
		writeJSON(w, http.StatusOK, map[string]any{"name": "TPMJS Railway Executor", "version": e.version, "protocolVersion": "1.0"})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "Not found"})
	}
}

// nodeExecute handles POST /execute-tool like the Node template.
func (e *Executor) nodeExecute(w http.ResponseWriter, r *http.Request, body []byte) {
	start := time.Now()
	fail := func(status int, code, message string, timed bool) {
		resp := map[string]any{"success": false, "error": map[string]any{"code": code, "message": message}}
		if timed {
			resp["executionTimeMs"] = time.Since(start).Milliseconds()
		}
		writeJSON(w, status, resp)
	}
	if e.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+e.apiKey {
		fail(http.StatusUnauthorized, "UNAUTHORIZED", "Invalid or missing API key", false)
		return
	}
	req, err := decodeRequest(body)
	if err != nil {
		fail(http.StatusBadRequest, "INVALID_REQUEST", "Invalid JSON body", false)
		return
	}
	if req.packageName == "" || req.name == "" {
		fail(http.StatusBadRequest, "INVALID_REQUEST", "Missing required fields: packageName, name", false)
		return
	}
	version := req.version
	if version == "" {
		version = "latest"
	}
	spec := req.packageName + "@" + version
	if !e.wait(r.Context(), e.currentDelay()) {
		return
	}
	fn, known := e.lookup(req.packageName, req.name)
	if !known {
		fail(http.StatusOK, "PACKAGE_NOT_FOUND", fmt.Sprintf(
			"npm install failed for %s: Command failed: npm install --no-save --omit=dev --no-audit --no-fund %s\n"+
				"npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/%s - Not found",
			spec, spec, req.packageName), true)
		return
	}
	if fn == nil {
		fail(http.StatusOK, "TOOL_NOT_FOUND", fmt.Sprintf("Tool %q not found in package %q", req.name, req.packageName), true)
		return
	}
	res := runTool(r.Context(), fn, req, e.maxExec)
	switch {
	case res.abandoned:
	case res.timedOut:
		// The child process is killed by a signal: its exit code is null.
		fail(http.StatusOK, "TOOL_EXECUTION_ERROR", "Script exited with code null", true)
	case errors.Is(res.err, ErrInvalidTool), errors.Is(res.err, ErrNeedsConfiguration):
		fail(http.StatusOK, "TOOL_INVALID", fmt.Sprintf("Tool %q does not have an execute() function", req.name), true)
	case errors.Is(res.err, ErrExecutorInternal):
		fail(http.StatusOK, "INTERNAL_ERROR", res.err.Error(), true)
	case res.err != nil:
		fail(http.StatusOK, "TOOL_EXECUTION_ERROR", res.err.Error(), true)
	default:
		output := res.output
		if output == nil {
			// JSON.stringify({__tpmjs_result__: undefined}) is "{}", which
			// the template then returns as the raw stdout text.
			output = "{}"
		}
		writeJSON(w, http.StatusOK, map[string]any{"success": true, "output": output, "executionTimeMs": time.Since(start).Milliseconds()})
	}
}

// serveDeno routes a request like the Deno executor.
func (e *Executor) serveDeno(w http.ResponseWriter, r *http.Request, path string, body []byte) {
	switch {
	case r.Method == http.MethodGet && path == "/health":
		if e.waitHealth(r.Context()) {
			writeJSON(w, http.StatusOK, map[string]any{
				"status": "ok", "protocolVersion": "1.1", "implementationVersion": e.version,
				"timestamp":     time.Now().UTC().Format(time.RFC3339Nano),
				"uptimeSeconds": int(time.Since(e.started).Seconds()), "cacheSize": 0, "maxCacheSize": 200,
				"denoVersion": "2.1.4", "v8Version": "13.0.245.12", "httpImports": true,
			})
		}
	case e.apiKey != "" && strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") != e.apiKey:
		denoFail(w, http.StatusUnauthorized, "Unauthorized", "request", "AUTHENTICATION_REQUIRED", false, 0)
	case r.Method == http.MethodPost && path == "/execute-tool":
		e.denoExecute(w, r, body)
	case r.Method == http.MethodGet && path == "/info":
		// Not a route of the Deno executor; only the delay of a busy
		// executor applies.
		if e.waitHealth(r.Context()) {
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "Not found"})
		}
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "Not found"})
	}
}

// denoExecute handles POST /execute-tool like the Deno executor.
func (e *Executor) denoExecute(w http.ResponseWriter, r *http.Request, body []byte) {
	start := time.Now()
	elapsed := func() int64 { return time.Since(start).Milliseconds() }
	req, err := decodeRequest(body)
	if err != nil {
		denoFail(w, http.StatusBadRequest, "Request body must be valid JSON: "+err.Error(), "request", "INVALID_REQUEST", false, elapsed())
		return
	}
	if !req.complete {
		denoFail(w, http.StatusBadRequest, "Missing required fields: packageName, name, version", "request", "INVALID_REQUEST", false, elapsed())
		return
	}
	if !e.wait(r.Context(), e.currentDelay()) {
		return
	}
	fn, known := e.lookup(req.packageName, req.name)
	if !known {
		denoFail(w, http.StatusInternalServerError,
			fmt.Sprintf("Import 'https://esm.sh/%s@%s' failed: 404 Not Found", req.packageName, req.version),
			"load", "PACKAGE_IMPORT_FAILED", true, elapsed())
		return
	}
	if fn == nil {
		denoFail(w, http.StatusNotFound, "Tool not found", "load", "TOOL_NOT_FOUND", false, elapsed())
		return
	}
	res := runTool(r.Context(), fn, req, 0)
	switch {
	case res.abandoned:
	case errors.Is(res.err, ErrNeedsConfiguration):
		denoFail(w, http.StatusBadRequest, fmt.Sprintf("Tool %q is a factory function but couldn't be initialized", req.name),
			"load", "TOOL_CONFIGURATION_REQUIRED", false, elapsed())
	case errors.Is(res.err, ErrInvalidTool):
		denoFail(w, http.StatusBadRequest, "Tool missing execute function", "load", "INVALID_TOOL", false, elapsed())
	case errors.Is(res.err, ErrExecutorInternal):
		denoFail(w, http.StatusInternalServerError, res.err.Error(), "executor", "EXECUTOR_INTERNAL_ERROR", true, elapsed())
	case res.err != nil:
		// A throw inside execute() is the tool's failure, not the
		// executor's: 200 with a typed stage.
		denoFail(w, http.StatusOK, res.err.Error(), "execute", "TOOL_EXECUTION_FAILED", false, elapsed())
	default:
		resp := map[string]any{"success": true, "executionTimeMs": elapsed()}
		if res.output != nil { // Response.json drops undefined
			resp["output"] = res.output
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// denoFail writes a protocol 1.1 failure.
func denoFail(w http.ResponseWriter, status int, message, stage, code string, retryable bool, ms int64) {
	writeJSON(w, status, map[string]any{
		"success": false, "error": message, "errorStage": stage, "errorCode": code,
		"retryable": retryable, "executionTimeMs": ms,
	})
}

// request is a decoded /execute-tool body.
type request struct {
	packageName, name, version string
	complete                   bool // packageName, name and version were all strings
	params                     map[string]any
	env                        map[string]string
}

// decodeRequest decodes an /execute-tool body. Numbers stay json.Number so
// that an echo returns them digit for digit.
func decodeRequest(body []byte) (request, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return request{}, err
	}
	if raw == nil {
		raw = map[string]any{}
	}
	pkg, okPkg := raw["packageName"].(string)
	name, okName := raw["name"].(string)
	version, okVersion := raw["version"].(string)
	req := request{packageName: pkg, name: name, version: version, complete: okPkg && okName && okVersion,
		params: map[string]any{}, env: map[string]string{}}
	if p, ok := raw["params"].(map[string]any); ok {
		req.params = p
	}
	if env, ok := raw["env"].(map[string]any); ok {
		for k, v := range env {
			if s, ok := v.(string); ok {
				req.env[k] = s
			}
		}
	}
	return req, nil
}

// lookup finds a tool. known reports whether the package exists; fn is nil
// when the package has no such export.
func (e *Executor) lookup(pkg, export string) (fn toolFunc, known bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exports, known := e.tools[pkg]
	return exports[export], known
}

func (e *Executor) currentDelay() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.delay
}

// waitHealth applies the health delay and reports whether the request is
// still wanted.
func (e *Executor) waitHealth(ctx context.Context) bool {
	e.mu.Lock()
	d := e.healthDelay
	e.mu.Unlock()
	return e.wait(ctx, d)
}

// wait sleeps d unless ctx ends first, and reports whether it slept fully.
func (e *Executor) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// toolOutcome is how one tool run ended.
type toolOutcome struct {
	output    any
	err       error
	timedOut  bool // the executor's own limit killed the tool
	abandoned bool // the client went away; nothing is to be written
}

// runTool runs fn with an optional time limit, as the executor's child
// process would run.
func runTool(ctx context.Context, fn toolFunc, req request, limit time.Duration) toolOutcome {
	runCtx := ctx
	if limit > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	done := make(chan toolOutcome, 1)
	go func() {
		out, err := fn(runCtx, req.params, req.env)
		done <- toolOutcome{output: out, err: err}
	}()
	var res toolOutcome
	select {
	case res = <-done:
	case <-runCtx.Done():
	}
	switch {
	case ctx.Err() != nil:
		return toolOutcome{abandoned: true}
	case runCtx.Err() != nil:
		return toolOutcome{timedOut: true}
	}
	return res
}

// writeJSON writes v as JSON the way JavaScript's JSON.stringify would:
// without escaping <, > and &.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// registerBuiltins registers the built-in tools of Package.
func (e *Executor) registerBuiltins() {
	e.register(Package, EchoTool, func(_ context.Context, params map[string]any, env map[string]string) (any, error) {
		return map[string]any{"params": params, "env": env}, nil
	})
	e.register(Package, CaughtErrorTool, func(_ context.Context, params map[string]any, _ map[string]string) (any, error) {
		return map[string]any{"error": true, "message": stringParam(params, "message", "upstream API rejected the request")}, nil
	})
	e.register(Package, SleepTool, func(ctx context.Context, params map[string]any, _ map[string]string) (any, error) {
		ms := int64(1000)
		if n, ok := params["ms"].(json.Number); ok {
			if v, err := n.Int64(); err == nil && v >= 0 {
				ms = v
			}
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return map[string]any{"slept_ms": ms}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	e.register(Package, FailTool, func(_ context.Context, params map[string]any, _ map[string]string) (any, error) {
		return nil, errors.New(stringParam(params, "message", "the tool failed on purpose"))
	})
	e.register(Package, NullTool, func(context.Context, map[string]any, map[string]string) (any, error) {
		return nil, nil
	})
	e.register(Package, InvalidTool, func(context.Context, map[string]any, map[string]string) (any, error) {
		return nil, ErrInvalidTool
	})
	e.register(Package, FactoryTool, func(context.Context, map[string]any, map[string]string) (any, error) {
		return nil, ErrNeedsConfiguration
	})
	e.register(Package, CrashTool, func(context.Context, map[string]any, map[string]string) (any, error) {
		return nil, ErrExecutorInternal
	})
}

// stringParam returns params[key] when it is a non-empty string, else def.
func stringParam(params map[string]any, key, def string) string {
	if s, ok := params[key].(string); ok && s != "" {
		return s
	}
	return def
}

// serveVercel routes a request like the Deno form of the Vercel template.
func (e *Executor) serveVercel(w http.ResponseWriter, r *http.Request, path string, body []byte) {
	switch {
	case r.Method == http.MethodGet && path == "/health":
		if e.waitHealth(r.Context()) {
			writeJSON(w, http.StatusOK, map[string]any{
				"status": "ok", "version": e.version,
				"info": map[string]any{"runtime": "deno", "httpImports": true, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)},
			})
		}
	case r.Method == http.MethodPost && path == "/execute-tool":
		e.vercelExecute(w, r, body)
	default:
		// Vercel's own page for a route the deployment does not have.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "The page could not be found\n\nNOT_FOUND\n")
	}
}

// vercelExecute handles POST /execute-tool like the Deno form of the Vercel
// template, under the platform's time limit when one is set.
func (e *Executor) vercelExecute(w http.ResponseWriter, r *http.Request, body []byte) {
	start := time.Now()
	fail := func(status int, message string, extra map[string]any) {
		resp := map[string]any{"success": false, "error": message, "executionTimeMs": time.Since(start).Milliseconds()}
		for k, v := range extra {
			resp[k] = v
		}
		writeJSON(w, status, resp)
	}
	if e.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+e.apiKey {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"success": false, "error": "Unauthorized"})
		return
	}
	req, err := decodeRequest(body)
	if err != nil {
		// req.json() throws inside the template's catch-all.
		fail(http.StatusInternalServerError, "Unexpected end of JSON input", nil)
		return
	}
	if req.packageName == "" || req.name == "" {
		fail(http.StatusBadRequest, "Missing required fields: packageName, name", nil)
		return
	}
	version := req.version
	if version == "" {
		version = "latest"
	}
	ctx := r.Context()
	if e.maxExec > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.maxExec)
		defer cancel()
	}
	platformKill := func() bool {
		if r.Context().Err() != nil || ctx.Err() == nil {
			return false
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = io.WriteString(w, "An error occurred with your deployment\n\nFUNCTION_INVOCATION_TIMEOUT\n")
		return true
	}
	if !e.wait(ctx, e.currentDelay()) {
		platformKill()
		return
	}
	fn, known := e.lookup(req.packageName, req.name)
	switch {
	case !known:
		fail(http.StatusInternalServerError, fmt.Sprintf("Import 'https://esm.sh/%s@%s' failed: 404 Not Found", req.packageName, version), nil)
		return
	case fn == nil:
		fail(http.StatusNotFound, fmt.Sprintf("Export %q not found in module", req.name), map[string]any{"availableExports": e.exports(req.packageName)})
		return
	}
	res := runTool(ctx, fn, req, 0)
	switch {
	case res.abandoned:
		platformKill()
	case errors.Is(res.err, ErrNeedsConfiguration):
		fail(http.StatusBadRequest, fmt.Sprintf("Tool %q is a factory function but couldn't be initialized", req.name),
			map[string]any{"hint": "This tool may require specific configuration. Check package documentation."})
	case errors.Is(res.err, ErrInvalidTool):
		fail(http.StatusBadRequest, "Tool missing execute function", nil)
	case res.err != nil:
		// The template's catch-all: a throw of the tool and a failure of
		// the executor are the same answer.
		fail(http.StatusInternalServerError, res.err.Error(), nil)
	default:
		resp := map[string]any{"success": true, "executionTimeMs": time.Since(start).Milliseconds()}
		if res.output != nil {
			resp["output"] = res.output
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// exports lists the export names of a package.
func (e *Executor) exports(pkg string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.tools[pkg]))
	for name := range e.tools[pkg] {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
