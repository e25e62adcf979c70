package tpmjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/toolgate/toolgate/drivers"
)

// Defaults applied by New to zero Config fields.
const (
	defaultHealthTimeout    = time.Second
	defaultCallTimeout      = 120 * time.Second
	defaultProbeInterval    = 30 * time.Second
	defaultMaxResponseBytes = 10 << 20
	defaultName             = "tpmjs"
)

// advertisedMargin is how much earlier than the executor's advertised
// maximum execution time the driver ends a call: the executor's own kill
// arrives as an ordinary failure on some executors, so the driver's
// deadline must come first to report a timeout, and to report whose limit
// it was. For short advertised limits the margin is a quarter of the limit.
const advertisedMargin = 5 * time.Second

// Wire constants.
const (
	protocolVersion  = "1.0"
	defaultVersion   = "latest"
	userAgent        = "toolgate-tpmjs-driver"
	maxTraceResponse = 64 << 10 // bytes of a response body kept in a trace
)

// errCallDeadline is the cause of a call context that ran out of the
// driver's own time limit.
var errCallDeadline = errors.New("tpmjs call time limit reached")

// errClosed is returned by Run after Close.
var errClosed = errors.New("driver is closed")

// Config configures a Driver. Zero fields take the documented defaults.
type Config struct {
	// Name is the driver's name in the gateway configuration, used in logs
	// and error messages. Default "tpmjs".
	Name string
	// URL is the executor's base URL, http or https, without credentials,
	// query or fragment. A path is kept as a prefix: "https://host/api"
	// calls "https://host/api/execute-tool".
	URL string
	// APIKey is sent as "Authorization: Bearer <APIKey>" when not empty.
	APIKey string
	// HealthTimeout bounds each /health and /info probe. Default 1s.
	HealthTimeout time.Duration
	// CallTimeout bounds each call. Default 120s. Once /info advertised a
	// maximum execution time, calls are also capped at that time minus a
	// margin of 5s (a quarter of it for limits under 20s), so the driver's
	// timeout always comes before the executor's own kill.
	CallTimeout time.Duration
	// ProbeInterval is the time between two probes after Start. Default 30s.
	ProbeInterval time.Duration
	// MaxResponseBytes caps the body of an /execute-tool answer. Default
	// 10 MiB.
	MaxResponseBytes int64
	// Trace, when set, receives every /execute-tool exchange.
	Trace drivers.TraceWriter
	// HTTPClient, when set, is used instead of the driver's own client. Its
	// redirect policy is replaced: the driver never follows redirects.
	HTTPClient *http.Client
	// Logger receives the driver's logs. Default: logs are discarded.
	Logger *slog.Logger
}

// Driver runs TPMJS tools on one executor. It implements drivers.Driver and
// is safe for concurrent use.
type Driver struct {
	name                           string
	baseURL                        string // for messages: "the executor at URL"
	executeURL, healthURL, infoURL string
	apiKey                         string
	healthTimeout, callTimeout     time.Duration
	probeInterval                  time.Duration
	maxResponse                    int64
	margin                         time.Duration // advertisedMargin; tests change it
	trace                          drivers.TraceWriter
	client                         *http.Client
	ownTransport                   *http.Transport // closed by Close; nil for Config.HTTPClient
	reportsConns                   bool            // client's transport reports connections to httptrace
	proxyHost                      string          // the proxy between the driver and the executor, "" for none
	log                            *slog.Logger

	mu               sync.Mutex
	healthEngine     string        // engine name from /health, "" until known
	infoEngine       string        // engine name from /info, "" until known; wins over healthEngine
	advertisedMax    time.Duration // from /info, 0 until known
	executorProtocol string        // protocolVersion from /health or /info, "" until known
	probed           probeState    // the last /health probe, for Health
	started          bool
	closed           bool
	stopProbes       context.CancelFunc
	wg               sync.WaitGroup // the probe loop
}

var _ drivers.Driver = (*Driver)(nil)

// New checks cfg and returns a Driver. It does not contact the executor;
// Start begins the probes.
func New(cfg Config) (*Driver, error) {
	d := &Driver{
		name:          cfg.Name,
		apiKey:        cfg.APIKey,
		healthTimeout: cfg.HealthTimeout,
		callTimeout:   cfg.CallTimeout,
		probeInterval: cfg.ProbeInterval,
		maxResponse:   cfg.MaxResponseBytes,
		margin:        advertisedMargin,
		trace:         cfg.Trace,
		log:           cfg.Logger,
	}
	if d.name == "" {
		d.name = defaultName
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	base, err := parseBaseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("tpmjs %s: Config.URL: %w", d.name, err)
	}
	prefix := strings.TrimSuffix(base.String(), "/")
	d.baseURL = prefix
	d.executeURL, d.healthURL, d.infoURL = prefix+"/execute-tool", prefix+"/health", prefix+"/info"

	for _, f := range []struct {
		field string
		value *time.Duration
		def   time.Duration
	}{
		{"HealthTimeout", &d.healthTimeout, defaultHealthTimeout},
		{"CallTimeout", &d.callTimeout, defaultCallTimeout},
		{"ProbeInterval", &d.probeInterval, defaultProbeInterval},
	} {
		if *f.value < 0 {
			return nil, fmt.Errorf("tpmjs %s: Config.%s must not be negative, got %v", d.name, f.field, *f.value)
		}
		if *f.value == 0 {
			*f.value = f.def
		}
	}
	if d.maxResponse < 0 {
		return nil, fmt.Errorf("tpmjs %s: Config.MaxResponseBytes must not be negative, got %d", d.name, d.maxResponse)
	}
	if d.maxResponse == 0 {
		d.maxResponse = defaultMaxResponseBytes
	}
	for i := 0; i < len(d.apiKey); i++ {
		// The key itself is never part of a message.
		if c := d.apiKey[i]; c <= ' ' || c > '~' {
			return nil, fmt.Errorf("tpmjs %s: Config.APIKey may only contain visible ASCII characters", d.name)
		}
	}
	if d.apiKey != "" && base.Scheme == "http" && !loopback(base.Hostname()) {
		d.log.Warn("tpmjs API key is sent over plain http", "driver", d.name, "host", base.Host)
	}

	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		d.client = &c
	} else {
		d.ownTransport = http.DefaultTransport.(*http.Transport).Clone()
		d.ownTransport.MaxIdleConnsPerHost = 32
		d.client = &http.Client{Transport: d.ownTransport}
	}
	// A redirected POST would turn into a GET of another URL; an executor
	// that redirects is misconfigured and its answer is reported as such.
	d.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	d.reportsConns = reportsConns(d.client)
	d.proxyHost = proxyHost(d.client, d.executeURL)
	return d, nil
}

// parseBaseURL checks the executor's base URL.
func parseBaseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		return nil, errors.New("has no host")
	case u.User != nil:
		return nil, errors.New("must not contain credentials; use the API key setting")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, errors.New("must not have a query or fragment")
	}
	return u, nil
}

// loopback reports whether host names the local machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start probes the executor's /health and /info now and then every
// ProbeInterval in the background, until ctx ends or Close is called. Probes
// never delay calls: Run uses whatever the probes learned so far. Calling
// Start again, or after Close, does nothing.
func (d *Driver) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.closed {
		return
	}
	d.started = true
	ctx, d.stopProbes = context.WithCancel(ctx)
	d.wg.Add(1)
	go d.probeLoop(ctx)
}

// Engine names the executor for engine_ref: "tpmjs" until a probe learned
// more, then "tpmjs:NAME/VERSION" from /info, or from /health when /info
// is unavailable (for example "tpmjs:railway-executor/1.0.0" or
// "tpmjs:deno-executor/1.1.0").
func (d *Driver) Engine() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.infoEngine != "":
		return d.infoEngine
	case d.healthEngine != "":
		return d.healthEngine
	}
	return engineUnknown
}

// Close stops the probes and releases idle connections. Calls in flight
// finish; later calls return an error.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	stop := d.stopProbes
	d.mu.Unlock()
	if stop != nil {
		stop()
	}
	d.wg.Wait()
	if d.ownTransport != nil {
		d.ownTransport.CloseIdleConnections()
	}
	return nil
}

// wireRequest is the body of POST /execute-tool.
type wireRequest struct {
	PackageName string            `json:"packageName"`
	Version     string            `json:"version"`
	Name        string            `json:"name"`
	Params      map[string]any    `json:"params"`
	Env         map[string]string `json:"env"`
}

// exchange is what happened to one POST /execute-tool.
type exchange struct {
	status  int    // HTTP status, 0 when no answer arrived
	body    []byte // the response body as read, at most MaxResponseBytes+1 bytes
	result  drivers.Result
	facts   answerFacts
	limit   time.Duration // the driver's own time limit of the call
	err     error         // the exchange broke before an answer arrived: Run returns it
	problem string        // what went wrong with the exchange itself, for the trace
}

// Run calls the tool call.Target of the package call.Package at
// call.Version ("" meaning "latest") with call.Args as params and call.Env
// as env. Package, version and export name are validated before anything
// is sent; an invalid one is a Result with exit code ExitInvalidRequest.
//
// Run returns an error when the executor could not be reached or the
// connection broke before an answer arrived (refused, reset, DNS or TLS
// failure), and when ctx was cancelled. Everything the executor answered,
// and running out of time once the request had a connection, is a Result;
// see the package documentation for the mapping. An error from a call that
// never got a connection, so that nothing of it was sent, is marked
// drivers.ErrNotDispatched.
func (d *Driver) Run(ctx context.Context, call drivers.Call) (drivers.Result, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		// Nothing was sent: the call may run elsewhere.
		return drivers.Result{}, drivers.NotDispatched(fmt.Errorf("tpmjs %s: %w; nothing was sent", d.name, errClosed))
	}

	version := call.Version
	if version == "" {
		version = defaultVersion
	}
	if err := validateCall(call.Package, version, call.Target); err != nil {
		r := failure(ExitInvalidRequest, codeInvalidRequest, err.Error())
		r.Evidence = map[string]any{"sent": false}
		return r, nil
	}
	req := wireRequest{PackageName: call.Package, Version: version, Name: call.Target, Params: call.Args, Env: call.Env}
	if req.Params == nil {
		req.Params = map[string]any{}
	}
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return failure(ExitInvalidRequest, codeInvalidRequest, fmt.Sprintf("params cannot be encoded as JSON: %v", err)), nil
	}

	start := time.Now()
	ex := d.post(ctx, body)
	d.record(call, start, body, ex)
	if ex.err == nil {
		ex.result.Evidence = d.evidence(req, ex)
	}
	return ex.result, ex.err
}

// evidence is what Result.Evidence records of one exchange: what was
// actually sent (a registry id's version is the driver's, not the
// caller's), and what the executor answered about itself.
func (d *Driver) evidence(req wireRequest, ex exchange) map[string]any {
	ev := map[string]any{
		"sent":             true,
		"package":          req.PackageName,
		"version":          req.Version,
		"export":           req.Name,
		"protocol_version": protocolVersion,
		"time_limit_ms":    ex.limit.Milliseconds(),
	}
	if ex.status != 0 {
		ev["executor_status"] = ex.status
	}
	if ex.facts.executionTimeMs != "" {
		ev["execution_time_ms"] = ex.facts.executionTimeMs
	}
	if ex.facts.format != "" {
		ev["error_format"] = ex.facts.format
	}
	d.mu.Lock()
	if d.executorProtocol != "" {
		ev["executor_protocol_version"] = d.executorProtocol
	}
	d.mu.Unlock()
	return ev
}

// validateCall checks the fields that executors paste into shell commands,
// import URLs and generated code.
func validateCall(pkg, version, export string) error {
	if err := ValidatePackageName(pkg); err != nil {
		return err
	}
	if err := ValidateVersion(version); err != nil {
		return err
	}
	return ValidateExportName(export)
}

// callLimit is the driver's own time limit for one call and what set it,
// for the timeout message.
func (d *Driver) callLimit() (time.Duration, string) {
	d.mu.Lock()
	advertised := d.advertisedMax
	d.mu.Unlock()
	limit, why := d.callTimeout, "the driver's time limit"
	if advertised > 0 {
		margin := min(d.margin, advertised/4)
		if advertised-margin < limit {
			limit = advertised - margin
			why = fmt.Sprintf("the driver's time limit, %v before the executor's advertised maxExecutionTimeMs %d",
				margin, advertised.Milliseconds())
		}
	}
	return limit, why
}

// post sends one request body to /execute-tool and maps the answer.
//
// ctx's deadline bounds the call only until it is sent: an executor runs a
// tool to its end whether or not its client still waits, so once a byte
// may have left, the end of ctx's time is not the end of the tool, and
// the driver waits for the answer until its own limit. Cancelling ctx
// abandons the call at any time (an error, never a Result).
func (d *Driver) post(ctx context.Context, body []byte) exchange {
	limit, why := d.callLimit()
	var conn connWatch
	sent, abandon := context.WithCancelCause(context.WithoutCancel(ctx))
	defer abandon(nil)
	stop := context.AfterFunc(ctx, func() {
		// A transport that does not report connections may have sent
		// the call at any time.
		if errors.Is(ctx.Err(), context.Canceled) || d.reportsConns && !conn.got.Load() {
			abandon(context.Cause(ctx))
		}
	})
	defer stop()
	if ctx.Err() != nil {
		abandon(context.Cause(ctx)) // at once, not when AfterFunc's goroutine runs
	}
	callCtx, cancel := context.WithTimeoutCause(sent, limit, errCallDeadline)
	defer cancel()
	ex := d.exchange(ctx, callCtx, &conn, body, limit, why)
	ex.limit = limit
	return ex
}

// exchange sends body within callCtx and reads the answer. A failure before
// the request got a connection is an error marked drivers.ErrNotDispatched,
// never a timeout Result: the executor never saw the call.
func (d *Driver) exchange(ctx, callCtx context.Context, conn *connWatch, body []byte, budget time.Duration, why string) exchange {
	req, err := http.NewRequestWithContext(conn.context(callCtx), http.MethodPost, d.executeURL, bytes.NewReader(body))
	if err != nil {
		err = drivers.NotDispatched(fmt.Errorf("tpmjs %s: build request: %w; nothing was sent", d.name, err))
		return exchange{err: err, problem: err.Error()}
	}
	d.setHeaders(req.Header)
	req.Header.Set("Content-Type", "application/json")
	// The executor continues the call's trace: traceparent (and
	// tracestate) of the span in ctx, the gateway's driver stage.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))

	if err := callCtx.Err(); err != nil {
		// Whatever the transport, a request never handed to it was
		// never sent.
		err = d.notSent(ctx, callCtx, context.Cause(callCtx))
		return exchange{err: err, problem: err.Error()}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		if d.reportsConns && !conn.got.Load() {
			err = d.notSent(ctx, callCtx, err)
			return exchange{err: err, problem: err.Error()}
		}
		if ex, done := d.interrupted(ctx, callCtx, budget, why); done {
			return ex
		}
		err = fmt.Errorf("tpmjs %s: POST %s: %w", d.name, d.executeURL, err)
		return exchange{err: err, problem: err.Error()}
	}
	defer resp.Body.Close()

	ex := exchange{status: resp.StatusCode}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		ex.result = failure(ExitExecutorError, codeInvalidResponse, fmt.Sprintf("HTTP %d: redirect to %s not followed",
			resp.StatusCode, orDefault(excerpt([]byte(resp.Header.Get("Location")), maxExcerpt), "nowhere")))
		ex.problem = ex.result.Stderr
		return ex
	}
	if resp.ContentLength > d.maxResponse {
		ex.result = d.oversized(resp.StatusCode)
		ex.problem = ex.result.Stderr
		return ex
	}
	// Read one byte beyond the limit to tell a body of exactly the limit
	// from a larger one, and never more.
	ex.body, err = io.ReadAll(io.LimitReader(resp.Body, d.maxResponse+1))
	switch {
	case err != nil:
		if iex, done := d.interrupted(ctx, callCtx, budget, why); done {
			iex.status, iex.body = ex.status, ex.body
			return iex
		}
		ex.result = failure(ExitExecutorError, codeInvalidResponse,
			fmt.Sprintf("HTTP %d: the body broke off after %d bytes: %v", resp.StatusCode, len(ex.body), err))
		ex.problem = ex.result.Stderr
	case int64(len(ex.body)) > d.maxResponse:
		ex.result = d.oversized(resp.StatusCode)
		ex.problem = ex.result.Stderr
	default:
		ex.result, ex.facts = parseAnswer(resp.StatusCode, ex.body)
	}
	return ex
}

// interrupted turns a failed exchange whose context is done into its
// outcome: running out of the driver's own time a timeout Result; the
// caller's cancellation, or its deadline passing just as the call may have
// been sent, an error, since the tool may be running still and no result
// of it is known. done is false when the context is still live and the
// failure was the network's.
func (d *Driver) interrupted(ctx, callCtx context.Context, budget time.Duration, why string) (ex exchange, done bool) {
	if callCtx.Err() == nil {
		return exchange{}, false
	}
	if !errors.Is(context.Cause(callCtx), errCallDeadline) {
		err := fmt.Errorf("tpmjs %s: call abandoned (%w) after it may have been sent; the tool may still be running at the executor",
			d.name, context.Cause(callCtx))
		return exchange{err: err, problem: err.Error()}, true
	}
	r := failure(ExitTimeout, codeTimeout, fmt.Sprintf("no complete answer from the executor within %v (%s)",
		budget.Round(time.Millisecond), why))
	return exchange{result: r, problem: r.Stderr}, true
}

// oversized is the Result of an answer larger than MaxResponseBytes.
func (d *Driver) oversized(status int) drivers.Result {
	return failure(ExitExecutorError, codeInvalidResponse,
		fmt.Sprintf("HTTP %d: the body exceeds the limit of %d bytes", status, d.maxResponse))
}

// setHeaders sets the headers every request carries.
func (d *Driver) setHeaders(h http.Header) {
	h.Set("Accept", "application/json")
	h.Set("User-Agent", userAgent)
	h.Set("X-TPMJS-Protocol-Version", protocolVersion)
	if d.apiKey != "" {
		h.Set("Authorization", "Bearer "+d.apiKey)
	}
}

// record logs one exchange and hands it to the trace writer. Neither sees
// the Authorization header; the log never sees the request body, which
// holds the env values.
func (d *Driver) record(call drivers.Call, start time.Time, body []byte, ex exchange) {
	elapsed := time.Since(start)
	if ex.err != nil {
		d.log.Warn("tpmjs call failed", "driver", d.name, "request_id", call.RequestID,
			"package", call.Package, "export", call.Target, "duration", elapsed, "error", ex.err)
	} else {
		d.log.Debug("tpmjs call", "driver", d.name, "request_id", call.RequestID,
			"package", call.Package, "export", call.Target, "status", ex.status,
			"exit_code", ex.result.ExitCode, "duration", elapsed)
	}
	if d.trace == nil {
		return
	}
	t := drivers.Trace{
		RequestID:  call.RequestID,
		Time:       start.UTC().Format(time.RFC3339Nano),
		DurationMS: elapsed.Milliseconds(),
		Method:     http.MethodPost,
		URL:        d.executeURL,
		Request:    traceRequest(body),
		Status:     ex.status,
		Response:   traceResponse(ex.body),
		Error:      ex.problem,
	}
	// drivers.Result has no field for local evidence paths, so the path
	// the writer returns cannot travel with the Result; the writer, which
	// gets the request id, knows where it put the trace.
	if _, err := d.trace.Write(t); err != nil {
		d.log.Warn("tpmjs trace not written", "driver", d.name, "request_id", call.RequestID, "error", err)
	}
}

// traceRequest decodes the request body exactly as it was sent, so the
// trace shows the wire and the trace writer may redact a copy that shares
// nothing with the caller's Call.
func traceRequest(body []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return nil
	}
	return m
}

// traceResponse returns a response body for a trace: valid UTF-8 and at
// most 64 KiB.
func traceResponse(body []byte) string {
	if len(body) <= maxTraceResponse {
		return validUTF8(string(body))
	}
	kept := cutUTF8(string(body[:maxTraceResponse+1]), maxTraceResponse)
	return validUTF8(kept) + fmt.Sprintf(" [truncated: first %d of %d bytes read]", len(kept), len(body))
}

// MaxRunTime implements drivers.Bounded: the health probe that may precede
// a call, and the call's own time limit.
func (d *Driver) MaxRunTime() time.Duration { return 2*d.healthTimeout + d.callTimeout }
