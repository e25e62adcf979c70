package execbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/drivers"
)

// Timing of a session.
const (
	// hostGrace is added to the execution's time limit before the host
	// cancels: the runner enforces the limit itself and should be the one
	// to report it.
	hostGrace = 100 * time.Millisecond
	// startAllowance is how long a runner may take to acknowledge execute
	// with started, on top of the time limit, before the host gives up: a
	// runner process started for the call needs up to 1.5 s before it
	// reads anything.
	startAllowance = 5 * time.Second
)

// maxPendingRefusals bounds the refusals (answers to tool calls over the
// limit) waiting to be written: beyond it the session stops reading from a
// runner that sends calls faster than it reads their answers.
const maxPendingRefusals = 64

// errMessageTooLarge reports a runner message over Config.MaxMessageBytes.
var errMessageTooLarge = errors.New("runner message exceeds the size limit")

// transport carries the messages of one session.
type transport interface {
	// send writes one message. Calls are serialized by the session. The
	// error wraps errNothingSent only when no byte of msg can have reached
	// the runner.
	send(msg []byte) error
	// recv reads the next message; it fails once the transport is closed
	// or broken, wrapping errMessageTooLarge for a message over the limit.
	recv() ([]byte, error)
	// close ends the session and unblocks send and recv. force skips any
	// polite shutdown. The error, if any, tells how the runner ended.
	close(force bool) error
}

// session is one execution on one transport.
type session struct {
	d     *Driver
	id    string
	tr    transport
	cat   catalog
	tools drivers.ToolCaller
	log   *slog.Logger
	opts  runOptions

	// startAllowance is the package constant; tests shorten it.
	startAllowance time.Duration

	sendMu sync.Mutex
	wg     sync.WaitGroup // nested calls and asynchronous sends

	// cancelling is set once the host sent cancel; from then on every
	// tool call is answered with a timeout, so that guest code cannot
	// carry on with results arriving after its time ran out.
	cancelling atomic.Bool

	// nestedDeadline (Unix nanoseconds) is when the execution runs out of
	// time: no nested call starts after it.
	nestedDeadline atomic.Int64
	// ctxDeadline is ctx's deadline, zero when it has none.
	ctxDeadline time.Time

	// Touched by the session loop only.
	served    map[string]bool
	counts    map[string]int
	started   bool
	cancelled string // why the host cancelled: "" until it did
	admitted  int    // tool calls answered by the host, at most d.maxNested
	refused   int    // tool calls refused for the limit
	pending   [][]byte
	jobs      chan nestedJob // admitted tool calls, for the workers
	workers   int

	mu     sync.Mutex
	nested []*nestedRecord
}

// nestedRecord is the evidence of one guest tool call.
type nestedRecord struct {
	callID, provider, safeName string
	toolID, requestID          string
	ok                         bool
	code                       string
}

// nestedJob is one admitted tool call, waiting for a worker.
type nestedJob struct {
	rec            *nestedRecord
	early          *toolOutcome // the answer, when the host calls no tool
	callID, toolID string
	input          any
}

// inbound is one read from the transport.
type inbound struct {
	msg []byte
	err error
}

// run plays the session: it sends execute, serves tool calls until done
// arrives, and enforces the time limit. It returns a Go error only when the
// transport broke before done, or when ctx was cancelled rather than timed
// out.
func (s *session) run(ctx context.Context, execute []byte, limit time.Duration) (drivers.Result, error) {
	s.served = map[string]bool{}
	s.counts = map[string]int{}
	// Nested calls end when the session says so (cancelTools), never on
	// their own when ctx ends: the runner must hear of the cancel before
	// it hears of the failures it causes.
	toolCtx, cancelTools := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTools()
	s.ctxDeadline, _ = ctx.Deadline()
	s.setNestedDeadline(limit + hostGrace + s.startAllowance)
	// Admitted calls never exceed the channel's capacity, so the loop
	// never blocks on it.
	s.jobs = make(chan nestedJob, s.d.maxNested)
	refusals := make(chan []byte)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for msg := range refusals {
			s.send(msg)
		}
	}()

	incoming := make(chan inbound)
	stopReading := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			b, err := s.tr.recv()
			select {
			case incoming <- inbound{b, err}:
			case <-stopReading:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// execute is written without blocking the loop, which must stay free
	// to enforce the time limit against a runner that does not read.
	executeSent := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		executeSent <- s.sendErr(execute)
	}()
	executeC := (<-chan error)(executeSent)

	deadline := time.NewTimer(limit + hostGrace + s.startAllowance)
	defer deadline.Stop()
	grace := time.NewTimer(s.d.cancelGrace)
	grace.Stop() // armed by beginCancel
	defer grace.Stop()
	var graceC <-chan time.Time
	ctxDone := ctx.Done()

	var (
		out       *outcome
		brokenErr error
		tooLarge  error
		unsent    error // execute provably never reached the runner
		forced    bool
	)
	beginCancel := func(reason string) {
		s.cancelled = reason
		s.cancelling.Store(true)
		ctxDone = nil
		deadline.Stop()
		b, _ := json.Marshal(cancelMessage{Type: "cancel", ID: s.id})
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.send(b)
			// Nested calls end after the cancel went out, so that the
			// runner hears of the cancel before it hears of their
			// failures.
			cancelTools()
		}()
		grace.Reset(s.d.cancelGrace)
		graceC = grace.C
	}

loop:
	for {
		// Refusals go out through their own writer; while too many wait,
		// the runner is not read, so a flood backs up in the runner.
		inC := incoming
		var outC chan<- []byte
		var next []byte
		if len(s.pending) > 0 {
			outC, next = refusals, s.pending[0]
		}
		if len(s.pending) >= maxPendingRefusals {
			inC = nil
		}
		select {
		case outC <- next:
			s.pending[0] = nil
			s.pending = s.pending[1:]
		case in := <-inC:
			if in.err != nil {
				if s.cancelled != "" {
					// The runner went away after being told to stop:
					// that is how some runners stop.
					break loop
				}
				if errors.Is(in.err, errMessageTooLarge) {
					// The runner is still talking: what it tried to send
					// (a result, logs, a tool input) cannot cross the
					// boundary. That is the guest's failure, not an
					// outage; the runner is cut off below.
					s.counts["too_large"]++
					tooLarge = in.err
					break loop
				}
				brokenErr = in.err
				break loop
			}
			if out = s.handle(toolCtx, in.msg, limit, deadline); out != nil {
				break loop
			}
		case err := <-executeC:
			executeC = nil
			if errors.Is(err, errNothingSent) {
				unsent = err
				break loop
			}
		case <-deadline.C:
			beginCancel("timeout")
		case <-ctxDone:
			beginCancel("context")
		case <-graceC:
			forced = true
			break loop
		}
	}

	close(stopReading)
	cancelTools()
	// Calls still queued are answered as cancelled, without a tool.
	close(s.jobs)
	close(refusals)
	closeErr := s.tr.close(forced || out == nil)
	s.wg.Wait()
	<-readerDone

	if executeC != nil {
		// The loop ended first; the write has finished by now.
		if err := <-executeC; errors.Is(err, errNothingSent) {
			unsent = err
		}
	}
	if err := s.notDispatched(unsent, closeErr); err != nil {
		return drivers.Result{}, err
	}
	if brokenErr != nil {
		err := fmt.Errorf("runner session %s ended before done: %w", s.id, brokenErr)
		if closeErr != nil {
			err = fmt.Errorf("runner session %s ended before done: %w (%v)", s.id, brokenErr, closeErr)
		}
		return drivers.Result{}, s.withEvidence(err)
	}
	switch {
	case tooLarge != nil:
		return s.result(&outcome{code: codeSerialization, durationMs: -1, message: fmt.Sprintf(
			"%v: a guest result, log or tool input this large cannot cross the boundary; the runner was stopped", tooLarge)}), nil
	case s.cancelled == "":
		return s.result(out), nil
	case s.cancelled == "context" && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		err := fmt.Errorf("runner session %s cancelled: %w", s.id, ctx.Err())
		if cause := context.Cause(ctx); cause != ctx.Err() {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
		return drivers.Result{}, s.withEvidence(err)
	}
	// Once the host cancelled, the execution has run out of time whatever
	// the runner says next: a done within the grace only contributes its
	// logs, and its message when it reports the timeout itself.
	limitText := fmt.Sprintf("its time limit of %d ms", limit.Milliseconds())
	if s.cancelled == "context" {
		limitText = "the gateway's deadline for the call"
	}
	timedOut := &outcome{code: codeTimeout, durationMs: -1}
	switch {
	case out != nil && out.code == codeTimeout:
		timedOut = out
	case out != nil:
		timedOut.logs, timedOut.durationMs = out.logs, out.durationMs
		timedOut.message = fmt.Sprintf("execution exceeded %s; the runner finished after cancel", limitText)
	case forced:
		timedOut.message = fmt.Sprintf("execution exceeded %s; the runner did not stop within %v of cancel and was cut off", limitText, s.d.cancelGrace)
	default:
		timedOut.message = fmt.Sprintf("execution exceeded %s; the runner closed the session after cancel", limitText)
	}
	return s.result(timedOut), nil
}

// handle acts on one runner message and returns the outcome once done
// arrived.
func (s *session) handle(ctx context.Context, b []byte, limit time.Duration, deadline *time.Timer) *outcome {
	m := decodeRunnerMessage(b)
	switch {
	case m.kind == kindMalformed:
		s.ignored(m.kind.String(), "execbox runner sent a malformed message; ignored", "bytes", len(b), "reason", m.reason)
		return nil
	case m.kind == kindUnknown:
		s.ignored(m.kind.String(), "execbox runner sent a message of unknown type; ignored", "type", m.typ)
		return nil
	case !m.matches(s.id):
		s.ignored("wrong_id", "execbox runner sent a message for another execution; ignored", "type", m.typ, "message_id", cleanName(m.id))
		return nil
	}
	s.counts[m.kind.String()]++
	switch m.kind {
	case kindStarted:
		if !s.started && s.cancelled == "" {
			// The runner has the program: the time limit runs from here.
			deadline.Reset(limit + hostGrace)
			s.setNestedDeadline(limit + hostGrace)
		}
		s.started = true
	case kindToolCall:
		s.toolCall(ctx, &m)
	case kindDone:
		return &m.done
	}
	return nil
}

// maxLoggedPerKind bounds the log lines one session writes about ignored
// messages of one kind; the evidence counts them all.
const maxLoggedPerKind = 5

// ignored counts an ignored message and logs the first few of its kind.
func (s *session) ignored(kind, msg string, args ...any) {
	s.counts[kind]++
	if n := s.counts[kind]; n <= maxLoggedPerKind {
		if n == maxLoggedPerKind {
			args = append(args, "further", "not logged")
		}
		s.log.Warn(msg, args...)
	}
}

// toolCall serves one tool_call: at most once per callId, at most
// d.maxNested per execution, by at most d.maxInFlight workers, so that the
// guest's parallel calls run in parallel but a fan-out cannot open a
// goroutine, or a pass through the gateway, per call.
func (s *session) toolCall(ctx context.Context, m *runnerMessage) {
	if s.served[m.callID] {
		s.ignored("duplicate_call_id", "execbox runner repeated a callId; ignored", "call_id", cleanName(m.callID))
		return
	}
	if s.admitted >= s.d.maxNested {
		s.refuse(m.callID)
		return
	}
	s.admitted++
	s.served[m.callID] = true
	rec := &nestedRecord{callID: m.callID, provider: m.provider, safeName: m.tool}
	s.mu.Lock()
	s.nested = append(s.nested, rec)
	s.mu.Unlock()

	toolID, known := s.cat.byName[[2]string{m.provider, m.tool}]
	var early *toolOutcome
	switch {
	case s.cancelled != "":
		early = &toolOutcome{code: codeTimeout, message: "execution cancelled"}
	case !known || s.tools == nil:
		early = &toolOutcome{code: codeInternal, message: fmt.Sprintf("unknown tool %s.%s", cleanName(m.provider), cleanName(m.tool))}
	case m.inputErr != nil:
		early = &toolOutcome{toolID: toolID, code: codeSerialization, message: fmt.Sprintf("input for tool %s is %v", toolID, m.inputErr)}
	}
	if early == nil {
		rec.toolID = toolID
	}
	s.jobs <- nestedJob{rec: rec, early: early, callID: m.callID, toolID: toolID, input: m.input}
	if s.workers < s.d.maxInFlight {
		s.workers++
		s.wg.Add(1)
		go s.worker(ctx)
	}
}

// refuse answers a tool call over the execution's limit. It is counted, not
// recorded one by one, and its answer waits in s.pending for the loop.
func (s *session) refuse(callID string) {
	s.refused++
	if s.refused == 1 {
		s.log.Warn("execbox guest reached the limit of nested calls; further calls are refused", "max_nested_calls", s.d.maxNested)
	}
	msg, _, _ := encodeToolResult(callID, toolOutcome{code: codeTool, message: fmt.Sprintf(
		"tool call refused: this execution reached its limit of %d nested tool calls (max_nested_calls)", s.d.maxNested)}, s.d.maxMessage)
	s.pending = append(s.pending, msg)
}

// worker serves admitted tool calls until the session closes the queue.
func (s *session) worker(ctx context.Context) {
	defer s.wg.Done()
	for j := range s.jobs {
		s.serveCall(ctx, j)
	}
}

// serveCall runs one admitted tool call, unless the execution has run out
// of time: then no tool is called and the guest is told so. The call's
// context ends with the session, and carries the execution's deadline plus
// the cancel grace as a backstop, so that the tool knows its time.
func (s *session) serveCall(ctx context.Context, j nestedJob) {
	deadline := time.Unix(0, s.nestedDeadline.Load())
	if j.early == nil && (ctx.Err() != nil || s.cancelling.Load() || !time.Now().Before(deadline)) {
		j.early = &toolOutcome{toolID: j.toolID, code: codeTimeout, message: "execution cancelled"}
	}
	if j.early != nil {
		s.finishCall(j.rec, *j.early)
		return
	}
	callCtx, cancel := context.WithDeadline(ctx, deadline.Add(s.d.cancelGrace))
	defer cancel()
	nr := s.tools.CallTool(callCtx, j.callID, j.toolID, j.input)
	s.mu.Lock()
	j.rec.requestID = nr.RequestID
	s.mu.Unlock()
	s.finishCall(j.rec, toolOutcome{toolID: j.toolID, ok: nr.OK, result: nr.Result, code: nr.Code, message: nr.Message})
}

// setNestedDeadline moves the time after which no nested call starts to
// d from now, or to ctx's deadline when that is earlier.
func (s *session) setNestedDeadline(d time.Duration) {
	at := time.Now().Add(d)
	if !s.ctxDeadline.IsZero() && s.ctxDeadline.Before(at) {
		at = s.ctxDeadline
	}
	s.nestedDeadline.Store(at.UnixNano())
}

// finishCall answers a tool call and records what the guest was told.
func (s *session) finishCall(rec *nestedRecord, o toolOutcome) {
	if s.cancelling.Load() {
		o = toolOutcome{toolID: o.toolID, code: codeTimeout, message: "execution cancelled"}
	}
	msg, ok, code := encodeToolResult(rec.callID, o, s.d.maxMessage)
	s.mu.Lock()
	rec.ok, rec.code = ok, code
	s.mu.Unlock()
	s.send(msg)
}

// send writes one message; writes are serialized. A failed write is only
// logged: a broken transport also ends the read side, which ends the
// session.
func (s *session) send(msg []byte) {
	s.sendErr(msg)
}

// sendErr is send that also returns the error.
func (s *session) sendErr(msg []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	err := s.tr.send(msg)
	if err != nil {
		s.log.Debug("execbox write to runner failed", "error", err)
	}
	return err
}

// notDispatched returns the error of a session whose execute message
// provably never reached the runner (unsent is not nil), or nil. A runner
// that never got the program cannot have run any of it; the session still
// checks that no tool was called on the call's behalf, since a nested call
// that ran would make the call more than "not dispatched".
func (s *session) notDispatched(unsent, closeErr error) error {
	s.mu.Lock()
	nested := len(s.nested)
	s.mu.Unlock()
	if unsent == nil || nested > 0 || s.refused > 0 {
		return nil
	}
	err := fmt.Errorf("runner session %s: the runner took none of the execute message; nothing was sent: %w", s.id, unsent)
	if closeErr != nil {
		err = fmt.Errorf("%w (%v)", err, closeErr)
	}
	return drivers.NotDispatched(err)
}

// result maps the outcome onto a Result.
func (s *session) result(out *outcome) drivers.Result {
	r := drivers.Result{
		ExitCode: exitOK,
		Stdout:   joinLogs(out.logs, s.opts.MaxLogLines, s.opts.MaxLogChars),
		Evidence: s.evidence(out),
	}
	if out.code == "" {
		r.Data = out.data
		return r
	}
	r.ExitCode = exitCode(out.code)
	r.Stderr = out.code + ": " + out.message
	return r
}

// joinLogs renders the runner's logs one per line, applying the log limits
// again on the host side: first the line count, then the characters
// cumulatively, clipping the last line kept.
func joinLogs(logs []string, maxLines, maxChars int) string {
	if len(logs) > maxLines {
		logs = logs[:maxLines]
	}
	var b strings.Builder
	left := maxChars
	for _, line := range logs {
		if left <= 0 {
			break
		}
		if utf8.RuneCountInString(line) > left {
			runes := 0
			for pos := range line {
				if runes == left {
					line = line[:pos]
					break
				}
				runes++
			}
		}
		left -= utf8.RuneCountInString(line)
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// withEvidence attaches what the session knows to the error of a session
// that ended without a result, so that the nested calls the guest made stay
// on record (see drivers.EvidenceError).
func (s *session) withEvidence(err error) error {
	ev := s.evidence(&outcome{durationMs: -1})
	ev["ended_without_done"] = true
	return &drivers.EvidenceError{Err: err, Evidence: ev}
}

// evidence is what the session puts on record beside the result.
func (s *session) evidence(out *outcome) map[string]any {
	tools := make([]any, 0, len(s.cat.entries))
	for _, e := range s.cat.entries {
		tools = append(tools, map[string]any{"tool_id": e.toolID, "provider": e.provider, "safe_name": e.safeName})
	}
	s.mu.Lock()
	nested := make([]any, 0, len(s.nested))
	for _, n := range s.nested {
		rec := map[string]any{
			"call_id": n.callID, "tool_id": n.toolID, "request_id": n.requestID,
			"provider": cleanName(n.provider), "safe_name": cleanName(n.safeName), "ok": n.ok,
		}
		if !n.ok {
			rec["code"] = n.code
		}
		nested = append(nested, rec)
	}
	s.mu.Unlock()
	counts := make(map[string]any, len(s.counts))
	for k, v := range s.counts {
		counts[k] = v
	}
	ev := map[string]any{
		"execution_id":    s.id,
		"transport":       s.d.transportName(),
		"timeout_ms":      s.opts.TimeoutMs,
		"tools":           tools,
		"nested_calls":    nested,
		"runner_messages": counts,
		// Calls over the limit are only counted: listing each would let
		// a flood grow the evidence without bound.
		"max_nested_calls":     s.d.maxNested,
		"nested_calls_refused": s.refused,
	}
	if s.cancelled != "" {
		ev["cancelled"] = s.cancelled
	}
	if out.durationMs >= 0 {
		ev["runner_duration_ms"] = out.durationMs
	}
	return ev
}
