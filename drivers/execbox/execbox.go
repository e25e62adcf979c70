package execbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os/exec"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/drivers"
)

// Defaults applied by New to zero Config fields.
const (
	defaultName        = "execbox"
	defaultTimeout     = 30 * time.Second
	defaultMemoryLimit = 64 << 20
	defaultMaxLogLines = 1000
	defaultMaxLogChars = 64000
	defaultMaxMessage  = 4 << 20
	defaultCancelGrace = 250 * time.Millisecond
	// defaultMaxNestedCalls is far above what a useful program makes and
	// far below what a flood costs: each nested call is a full pass
	// through the gateway with its own evidence.
	defaultMaxNestedCalls = 256
	// defaultMaxNestedInFlight keeps a guest's parallel calls parallel
	// without letting one execution occupy the gateway.
	defaultMaxNestedInFlight = 8
)

// Bounds on Config fields.
const (
	maxPool       = 64
	minMaxMessage = 1 << 10
)

// Upper bounds of Config.MaxNestedCalls and Config.MaxNestedInFlight.
const (
	MaxNestedCallsBound    = 10000
	MaxNestedInFlightBound = 64
)

// maxExecutionID bounds a request id used as the execution id.
const maxExecutionID = 128

// errClosed is returned by Run after Close.
var errClosed = errors.New("driver is closed")

// Config configures a Driver. Exactly one of URL and Command selects the
// transport; zero fields take the documented defaults.
type Config struct {
	// Name is the driver's name in the gateway configuration, used in logs
	// and error messages. Default "execbox".
	Name string

	// URL is a runner's WebSocket endpoint, ws:// or wss://. Every
	// execution opens its own connection and sends one JSON text frame
	// per message.
	URL string
	// Command starts a runner process speaking one JSON object per line
	// on stdin and stdout, one process per execution. Command[0] is looked
	// up in PATH by New.
	Command []string
	// Pool is the number of runner processes kept started ahead of
	// executions (stdio only; at most 64). 0 starts a process per call.
	Pool int

	// Timeout is the time limit of an execution; a call's timeoutMs may
	// lower it, never raise it. Default 30s.
	Timeout time.Duration
	// MemoryLimitBytes is the runner's memory limit. Default 64 MiB.
	MemoryLimitBytes int64
	// MaxLogLines and MaxLogChars limit the guest's console output.
	// Defaults 1000 lines and 64000 characters.
	MaxLogLines, MaxLogChars int

	// MaxMessageBytes caps every message from the runner (and every
	// encoded tool result sent to it). A larger runner message ends the
	// execution as a serialization_error (exit 4) naming the limit.
	// Default 4 MiB, at least 1 KiB.
	MaxMessageBytes int
	// CancelGrace is how long the runner has to finish after the host sent
	// cancel before the transport is closed under it. Default 250ms.
	CancelGrace time.Duration

	// MaxNestedCalls caps the tool calls one execution may make. Calls
	// beyond it are answered to the guest with tool_error naming the limit
	// and never reach Call.Tools; the evidence counts them. Default 256,
	// at most MaxNestedCallsBound.
	MaxNestedCalls int
	// MaxNestedInFlight caps the tool calls of one execution that run at
	// once; the others wait their turn. Default 8, at most
	// MaxNestedInFlightBound.
	MaxNestedInFlight int

	// Logger receives the driver's logs. Default: logs are discarded.
	Logger *slog.Logger
}

// Driver runs guest JavaScript on execbox runners. It implements
// drivers.Driver and is safe for concurrent use.
type Driver struct {
	// described is what Describe answers for every target, built once.
	described drivers.Target

	name        string
	url         string   // WebSocket transport
	cmd         *command // stdio transport
	pool        *pool    // nil unless Config.Pool > 0
	timeout     time.Duration
	memory      int64
	maxLogLines int
	maxLogChars int
	maxMessage  int
	cancelGrace time.Duration
	maxNested   int // tool calls per execution
	maxInFlight int // tool calls per execution running at once
	log         *slog.Logger

	// startAllowance is the package constant; tests shorten it.
	startAllowance time.Duration

	mu     sync.Mutex
	closed bool
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Sealed = (*Driver)(nil)
)

// New checks cfg and returns a Driver. A WebSocket runner is not contacted;
// with Config.Pool, runner processes start in the background at once.
func New(cfg Config) (*Driver, error) {
	d := &Driver{
		name:           cfg.Name,
		timeout:        cfg.Timeout,
		memory:         cfg.MemoryLimitBytes,
		maxLogLines:    cfg.MaxLogLines,
		maxLogChars:    cfg.MaxLogChars,
		maxMessage:     cfg.MaxMessageBytes,
		cancelGrace:    cfg.CancelGrace,
		maxNested:      cfg.MaxNestedCalls,
		maxInFlight:    cfg.MaxNestedInFlight,
		log:            cfg.Logger,
		startAllowance: startAllowance,
	}
	if d.name == "" {
		d.name = defaultName
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	fail := func(format string, args ...any) (*Driver, error) {
		return nil, fmt.Errorf("execbox %s: %s", d.name, fmt.Sprintf(format, args...))
	}

	switch {
	case cfg.URL != "" && len(cfg.Command) > 0:
		return fail("Config.URL and Config.Command are exclusive; set one transport")
	case cfg.URL == "" && len(cfg.Command) == 0:
		return fail("one of Config.URL and Config.Command is required")
	case cfg.Pool < 0 || cfg.Pool > maxPool:
		return fail("Config.Pool must be between 0 and %d, got %d", maxPool, cfg.Pool)
	case cfg.Pool > 0 && cfg.URL != "":
		return fail("Config.Pool applies to Config.Command only")
	}
	if cfg.URL != "" {
		if err := checkURL(cfg.URL); err != nil {
			return fail("Config.URL: %v", err)
		}
		d.url = cfg.URL
	}

	for _, f := range []struct {
		field string
		value *time.Duration
		def   time.Duration
	}{
		{"Timeout", &d.timeout, defaultTimeout},
		{"CancelGrace", &d.cancelGrace, defaultCancelGrace},
	} {
		if *f.value < 0 {
			return fail("Config.%s must not be negative, got %v", f.field, *f.value)
		}
		if *f.value == 0 {
			*f.value = f.def
		}
	}
	if d.timeout < time.Millisecond {
		return fail("Config.Timeout must be at least 1ms, got %v", d.timeout)
	}
	for _, f := range []struct {
		field string
		value *int
		def   int
	}{
		{"MaxLogLines", &d.maxLogLines, defaultMaxLogLines},
		{"MaxLogChars", &d.maxLogChars, defaultMaxLogChars},
		{"MaxMessageBytes", &d.maxMessage, defaultMaxMessage},
		{"MaxNestedCalls", &d.maxNested, defaultMaxNestedCalls},
		{"MaxNestedInFlight", &d.maxInFlight, defaultMaxNestedInFlight},
	} {
		if *f.value < 0 {
			return fail("Config.%s must not be negative, got %d", f.field, *f.value)
		}
		if *f.value == 0 {
			*f.value = f.def
		}
	}
	if d.maxMessage < minMaxMessage {
		return fail("Config.MaxMessageBytes must be at least %d, got %d", minMaxMessage, d.maxMessage)
	}
	if d.maxNested > MaxNestedCallsBound {
		return fail("Config.MaxNestedCalls must be at most %d, got %d", MaxNestedCallsBound, d.maxNested)
	}
	if d.maxInFlight > MaxNestedInFlightBound {
		return fail("Config.MaxNestedInFlight must be at most %d, got %d", MaxNestedInFlightBound, d.maxInFlight)
	}
	if d.memory < 0 {
		return fail("Config.MemoryLimitBytes must not be negative, got %d", d.memory)
	}
	if d.memory == 0 {
		d.memory = defaultMemoryLimit
	}

	if len(cfg.Command) > 0 {
		if cfg.Command[0] == "" {
			return fail("Config.Command[0] is empty")
		}
		path, err := exec.LookPath(cfg.Command[0])
		if err != nil {
			return fail("Config.Command: %v", err)
		}
		d.cmd = &command{
			path:       path,
			args:       append([]string(nil), cfg.Command[1:]...),
			env:        runnerEnv(),
			maxMessage: d.maxMessage,
			log:        d.log.With("driver", d.name),
		}
		if cfg.Pool > 0 {
			d.pool = newPool(d.cmd, cfg.Pool, d.log.With("driver", d.name))
		}
	}
	d.described = drivers.Target{InputSchema: d.InputSchema("")}
	return d, nil
}

// checkURL checks a runner's WebSocket URL.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme != "ws" && u.Scheme != "wss":
		return fmt.Errorf("scheme must be ws or wss, got %q", u.Scheme)
	case u.Host == "":
		return errors.New("has no host")
	case u.User != nil:
		return errors.New("must not contain credentials")
	case u.Fragment != "":
		return errors.New("must not have a fragment")
	}
	return nil
}

// Engine names the runner transport for engine_ref: "execbox-ws" or
// "execbox-stdio".
func (d *Driver) Engine() string {
	return "execbox-" + d.transportName()
}

// transportName is "ws" or "stdio".
func (d *Driver) transportName() string {
	if d.url != "" {
		return "ws"
	}
	return "stdio"
}

// Sealed reports true: guest code reaches the world only through the tool
// calls the host answers through Call.Tools. An execbox runner receives
// code, options and provider metadata, never a host closure or a secret
// (the runner specification's core model), and a runner process starts
// with none of the gateway's environment. A runner deployed with network
// access for its guests breaks this, and must not be used with a gateway
// that holds calls for approval (see drivers.Sealed).
func (d *Driver) Sealed() bool { return true }

// Close stops the pooled runner processes. Executions in progress finish
// on their own transports; later calls of Run fail.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.pool != nil {
		d.pool.close()
	}
	return nil
}

// Run executes the guest program of call.Args on a runner, answering the
// guest's tool calls through call.Tools. See the package documentation for
// the arguments and for how the outcome maps onto the Result.
func (d *Driver) Run(ctx context.Context, call drivers.Call) (drivers.Result, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return drivers.Result{}, d.notSent(ctx, errClosed)
	}

	args, err := parseArgs(call.Args, d.timeout)
	if err != nil {
		return validationFailure(err), nil
	}
	var infos []drivers.ToolInfo
	if call.Tools != nil {
		infos = call.Tools.Tools()
	}
	cat, err := buildCatalog(infos, args.providers, args.allProviders)
	if err != nil {
		return validationFailure(err), nil
	}

	id := executionID(call.RequestID)
	opts := runOptions{
		TimeoutMs:        args.timeout.Milliseconds(),
		MemoryLimitBytes: d.memory,
		MaxLogLines:      d.maxLogLines,
		MaxLogChars:      d.maxLogChars,
	}
	execute, err := json.Marshal(executeMessage{Type: "execute", ID: id, Code: args.code, Options: opts, Providers: cat.manifests})
	if err != nil {
		return drivers.Result{}, fmt.Errorf("execbox %s: encode execute: %w", d.name, err)
	}
	log := d.log.With("driver", d.name, "request_id", call.RequestID, "execution_id", id)

	// Until execute leaves, nothing of the call has: a failure up to
	// there is marked not dispatched, and a call whose context already
	// ended is never started, so it cannot be reported as timed out.
	if err := ctx.Err(); err != nil {
		return drivers.Result{}, d.notSent(ctx, err)
	}
	tr, err := d.open(ctx, args.timeout)
	if err != nil {
		return drivers.Result{}, d.notSent(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		tr.close(true)
		return drivers.Result{}, d.notSent(ctx, err)
	}
	s := &session{
		d: d, id: id, tr: tr, cat: cat, tools: call.Tools, log: log, opts: opts,
		startAllowance: d.startAllowance,
	}
	res, err := s.run(ctx, execute, args.timeout)
	if err != nil {
		log.Warn("execbox execution failed", "error", err)
		return drivers.Result{}, fmt.Errorf("execbox %s: %w", d.name, err)
	}
	return res, nil
}

// open starts the transport of one session.
func (d *Driver) open(ctx context.Context, limit time.Duration) (transport, error) {
	if d.url != "" {
		// Connecting is bounded like the execution, not longer.
		dialCtx, cancel := context.WithTimeout(ctx, limit+hostGrace)
		defer cancel()
		return dialWS(dialCtx, d.url, d.maxMessage)
	}
	if d.pool != nil {
		return d.pool.get(ctx)
	}
	return d.cmd.start()
}

// validationFailure is the Result of arguments that were refused before any
// runner was contacted.
func validationFailure(err error) drivers.Result {
	return drivers.Result{ExitCode: exitValidation, Stderr: codeValidation + ": " + err.Error()}
}

// executionID is the id of the execute message: the caller's request id,
// which already names the call in logs and evidence, or a random id when
// there is none fit for the purpose.
func executionID(requestID string) string {
	if requestID != "" && len(requestID) <= maxExecutionID && utf8.ValidString(requestID) {
		return requestID
	}
	return "exec-" + rand.Text()
}

// MaxRunTime implements drivers.Bounded: the execution's time limit, the
// host's grace around it, and the time to reach a runner.
func (d *Driver) MaxRunTime() time.Duration { return 2*d.timeout + 4*hostGrace }
