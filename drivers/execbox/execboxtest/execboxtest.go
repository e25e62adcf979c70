// Package execboxtest provides a scripted fake execbox runner for tests of
// the execbox driver and of the gateway, over both of the driver's
// transports: WebSocket and stdio.
//
// The fake runs no JavaScript. After execute arrives it plays a Script, a
// list of Steps such as Started, CallTool, AwaitResult and Done, which
// stands for what guest code would make a runner do. It reproduces the
// observed behaviour of real runners where it matters to a host:
//
//   - an execute without "options" is never answered;
//   - a second execute on a session is rejected at once with a done
//     carrying internal_error and the second execute's id;
//   - while a step waits (AwaitResult, DoneFromResult, Sleep), a cancel for
//     the session ends the script with a done reporting timeout; Hang and
//     IgnoreCancel do not react to cancel, like a runner stuck in guest
//     code.
//
// A Script is plain data, so the stdio runner can play it in another
// process: [StdioCommand] writes the script to a temporary file and returns
// a command that re-executes the current test binary on it. The test
// binary must therefore hand control to the runner before running tests:
//
//	func TestMain(m *testing.M) {
//		execboxtest.MaybeRunStdioRunner()
//		os.Exit(m.Run())
//	}
//
// Re-executing the test binary needs no toolchain at test time and keeps the
// runner in step with the code under test. The script travels in a file
// named on the command line, not in the environment, because the driver
// passes runner processes only a few variables of its own environment.
//
// Each session records the messages it received; [Runner.Sessions] returns
// them, for the stdio runner by reading the transcript files its processes
// wrote.
package execboxtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Message is one protocol message as the fake runner received it, decoded
// with numbers as json.Number. A line or frame that is not a JSON object is
// recorded as {"raw": text}.
type Message map[string]any

// Type returns the message's "type", or "" when it has none.
func (m Message) Type() string {
	s, _ := m["type"].(string)
	return s
}

// Step operations.
const (
	opStarted         = "started"
	opCallTool        = "call_tool"
	opAwaitResult     = "await_result"
	opLog             = "log"
	opDone            = "done"
	opDoneUndefined   = "done_undefined"
	opFail            = "fail"
	opDoneFromResult  = "done_from_result"
	opSleep           = "sleep"
	opHang            = "hang"
	opIgnoreCancel    = "ignore_cancel"
	opCrash           = "crash"
	opRaw             = "raw"
	opOversized       = "oversized"
	opRepeat          = "repeat"
	opExitBeforeFirst = "exit_before_execute_once"
	opFreshCallIDs    = "fresh_call_ids"
)

// Step is one action of a Script. Build steps with the functions of this
// package.
type Step struct {
	op             string
	callID         string
	provider, tool string
	input          any
	noInput        bool
	text, message  string
	duration       time.Duration
	count          int
	steps          []Step
}

// Script is what the fake runner does after execute, in order.
type Script []Step

// Started sends started.
func Started() Step { return Step{op: opStarted} }

// CallTool sends a tool_call for the tool safeName of provider with input.
// It does not wait for the answer; see AwaitResult.
func CallTool(callID, provider, safeName string, input any) Step {
	return Step{op: opCallTool, callID: callID, provider: provider, tool: safeName, input: input}
}

// CallToolWithoutInput sends a tool_call without an "input" field, as a
// real runner does for a guest call with no argument.
func CallToolWithoutInput(callID, provider, safeName string) Step {
	return Step{op: opCallTool, callID: callID, provider: provider, tool: safeName, noInput: true}
}

// AwaitResult waits for the tool_result of callID, which Session.Result
// then returns. A cancel meanwhile ends the script with a timeout done.
func AwaitResult(callID string) Step { return Step{op: opAwaitResult, callID: callID} }

// Log adds a console line to the logs of the final done.
func Log(line string) Step { return Step{op: opLog, text: line} }

// Done sends a successful done with result.
func Done(result any) Step { return Step{op: opDone, input: result} }

// DoneUndefined sends a successful done without "result", as a runner does
// for a program that evaluates to undefined.
func DoneUndefined() Step { return Step{op: opDoneUndefined} }

// Fail sends a failed done with the error code and message, which need not
// be one of the protocol's codes.
func Fail(code, message string) Step { return Step{op: opFail, text: code, message: message} }

// DoneFromResult finishes like a guest that returns the awaited result of
// callID: a done with its result, or a failed done with its error.
func DoneFromResult(callID string) Step { return Step{op: opDoneFromResult, callID: callID} }

// Sleep waits for d. A cancel meanwhile ends the script with a timeout
// done.
func Sleep(d time.Duration) Step { return Step{op: opSleep, duration: d} }

// Hang never answers again, whatever arrives, until the host closes the
// transport.
func Hang() Step { return Step{op: opHang} }

// IgnoreCancel waits for d whatever arrives, then goes on with the script.
func IgnoreCancel(d time.Duration) Step { return Step{op: opIgnoreCancel, duration: d} }

// Crash ends the session abruptly: the WebSocket connection is dropped
// without a close frame, the stdio runner process exits with status 3.
func Crash() Step { return Step{op: opCrash} }

// Raw sends text as one message exactly as given: malformed JSON, forged
// codes, wrong ids, repeated callIds, a second done. For the stdio runner a
// line break in text splits it into several lines.
func Raw(text string) Step { return Step{op: opRaw, text: text} }

// Oversized sends one well-formed message of an unknown type that is n
// bytes long.
func Oversized(n int) Step { return Step{op: opOversized, count: n} }

// Repeat plays steps n times. Every call id inside gets the suffix "-i" for
// the i-th round (from 1), so that each round's calls are distinct.
func Repeat(n int, steps ...Step) Step { return Step{op: opRepeat, count: n, steps: steps} }

// ExitBeforeExecuteOnce, as the first step of a stdio script, makes the
// first runner process started for the script exit before reading execute;
// later processes play the rest of the script. It lets a test kill a pooled
// runner while it waits. It does nothing elsewhere.
func ExitBeforeExecuteOnce() Step { return Step{op: opExitBeforeFirst} }

// FreshCallIDs makes every later call id of the session unique to it: each
// gets the suffix "-" and 16 random hex digits, new for every session, as a
// real runner's call ids (UUIDs) are new on every execution. A host that
// runs the same script twice therefore sees different call ids; it learns
// them from the tool_call messages, as a host does. AwaitResult and
// DoneFromResult name the call ids of the script, as CallTool does.
func FreshCallIDs() Step { return Step{op: opFreshCallIDs} }

// stepWire is the form of a Step in a script file.
type stepWire struct {
	Op       string        `json:"op"`
	CallID   string        `json:"callId,omitempty"`
	Provider string        `json:"provider,omitempty"`
	Tool     string        `json:"tool,omitempty"`
	Input    any           `json:"input,omitempty"`
	NoInput  bool          `json:"noInput,omitempty"`
	Text     string        `json:"text,omitempty"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	Count    int           `json:"count,omitempty"`
	Steps    []stepWire    `json:"steps,omitempty"`
}

func toWire(steps []Step) []stepWire {
	if len(steps) == 0 {
		return nil
	}
	out := make([]stepWire, len(steps))
	for i, st := range steps {
		out[i] = stepWire{Op: st.op, CallID: st.callID, Provider: st.provider, Tool: st.tool, Input: st.input,
			NoInput: st.noInput, Text: st.text, Message: st.message, Duration: st.duration, Count: st.count,
			Steps: toWire(st.steps)}
	}
	return out
}

func fromWire(steps []stepWire) []Step {
	if len(steps) == 0 {
		return nil
	}
	out := make([]Step, len(steps))
	for i, w := range steps {
		out[i] = Step{op: w.Op, callID: w.CallID, provider: w.Provider, tool: w.Tool, input: w.Input,
			noInput: w.NoInput, text: w.Text, message: w.Message, duration: w.Duration, count: w.Count,
			steps: fromWire(w.Steps)}
	}
	return out
}

// encodeScript and decodeScript carry a script to a stdio runner process.
func encodeScript(sc Script) ([]byte, error) { return json.Marshal(toWire(sc)) }

func decodeScript(b []byte) (Script, error) {
	var w []stepWire
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return nil, err
	}
	return fromWire(w), nil
}

// Play plays the script on s. It returns when the script is over: all
// steps played, or ended early by a cancel, a crash or a closed transport.
func (sc Script) Play(s *Session) {
	s.play(sc, "")
}

// conn is one side of a runner transport.
type conn interface {
	send(msg []byte) error
	recv() ([]byte, error)
}

// Session is the fake runner's side of one session.
type Session struct {
	c      conn
	record func(raw []byte) // transcript writer of a stdio runner, or nil
	stop   <-chan struct{}  // the runner is shutting down

	sendMu sync.Mutex

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change below
	received  []Message
	execute   Message
	start     time.Time
	results   map[string]Message
	cancelled bool
	closed    bool
	crashed   bool
	logs      []string
	// fresh is appended to every call id once FreshCallIDs played.
	fresh string
}

// newSession starts reading c.
func newSession(c conn, record func([]byte), stop <-chan struct{}) *Session {
	s := &Session{c: c, record: record, stop: stop, changed: make(chan struct{}), results: map[string]Message{}}
	go s.read()
	return s
}

// read records every message and reacts to execute, tool_result and
// cancel.
func (s *Session) read() {
	for {
		b, err := s.c.recv()
		if err != nil {
			s.update(func() { s.closed = true })
			return
		}
		if s.record != nil {
			s.record(b)
		}
		m := decodeMessage(b)
		var reject string
		s.update(func() {
			s.received = append(s.received, m)
			switch m.Type() {
			case "execute":
				if s.execute == nil {
					s.execute, s.start = m, time.Now()
				} else {
					// Like a real runner: one execution per session.
					reject, _ = m["id"].(string)
					if reject == "" {
						reject = "?"
					}
				}
			case "tool_result":
				if id, ok := m["callId"].(string); ok {
					s.results[id] = m
				}
			case "cancel":
				if s.execute != nil && m["id"] == s.execute["id"] {
					s.cancelled = true
				}
			}
		})
		if reject != "" {
			go s.Send(map[string]any{"type": "done", "id": reject, "ok": false, "durationMs": 0, "logs": []string{},
				"error": map[string]any{"code": "internal_error", "message": "an execution is already active"}})
		}
	}
}

// decodeMessage decodes a received message for the record.
func decodeMessage(b []byte) Message {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m Message
	if err := dec.Decode(&m); err != nil || m == nil {
		return Message{"raw": string(b)}
	}
	return m
}

// update changes the session's state under its lock and wakes waiters.
func (s *Session) update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait waits until cond, called under the session's lock, holds, at most d
// (0: no limit). It reports whether cond held.
func (s *Session) wait(cond func() bool, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		s.mu.Lock()
		ok, changed := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		case <-s.stop:
			return false
		}
	}
}

// Execute returns the execute message of the session, or nil when none
// arrived.
func (s *Session) Execute() Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execute
}

// Received returns every message received so far, in order.
func (s *Session) Received() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.received...)
}

// Result returns the tool_result received for callID.
func (s *Session) Result(callID string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.results[callID]
	return m, ok
}

// Cancelled reports whether the host cancelled the session's execution.
func (s *Session) Cancelled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// Send encodes msg as JSON and sends it as one message.
func (s *Session) Send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return s.SendRaw(b)
}

// SendRaw sends b as one message exactly as given.
func (s *Session) SendRaw(b []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.c.send(b)
}

// serve waits for execute and plays the script, unless the execute has no
// options: a real runner never answers that.
func (s *Session) serve(play func(*Session)) {
	s.wait(func() bool { return s.execute != nil || s.closed }, 0)
	exec := s.Execute()
	if exec == nil {
		return
	}
	if _, ok := exec["options"].(map[string]any); !ok {
		s.wait(func() bool { return s.closed }, 0)
		return
	}
	play(s)
}

// id returns the execution id.
func (s *Session) id() any { return s.Execute()["id"] }

// play plays steps; suffix is appended to call ids (see Repeat). It
// reports whether the script may go on.
func (s *Session) play(steps []Step, suffix string) bool {
	for _, st := range steps {
		if !s.step(st, suffix) {
			return false
		}
	}
	return true
}

// step plays one step and reports whether the script may go on.
func (s *Session) step(st Step, suffix string) bool {
	s.mu.Lock()
	callID := st.callID + suffix + s.fresh
	s.mu.Unlock()
	switch st.op {
	case opStarted:
		s.Send(map[string]any{"type": "started", "id": s.id()})
	case opCallTool:
		m := map[string]any{"type": "tool_call", "callId": callID, "providerName": st.provider, "safeToolName": st.tool}
		if !st.noInput {
			m["input"] = st.input
		}
		s.Send(m)
	case opAwaitResult:
		return s.await(callID)
	case opLog:
		s.mu.Lock()
		s.logs = append(s.logs, st.text)
		s.mu.Unlock()
	case opDone:
		s.done(map[string]any{"ok": true, "result": st.input})
	case opDoneUndefined:
		s.done(map[string]any{"ok": true})
	case opFail:
		s.done(map[string]any{"ok": false, "error": map[string]any{"code": st.text, "message": st.message}})
	case opDoneFromResult:
		if !s.await(callID) {
			return false
		}
		r, _ := s.Result(callID)
		if r["ok"] == true {
			s.done(map[string]any{"ok": true, "result": r["result"]})
		} else {
			s.done(map[string]any{"ok": false, "error": r["error"]})
		}
	case opSleep:
		if s.wait(func() bool { return s.cancelled || s.closed }, st.duration) {
			return s.cancelledDone()
		}
	case opHang:
		s.wait(func() bool { return s.closed }, 0)
		return false
	case opIgnoreCancel:
		if s.wait(func() bool { return s.closed }, st.duration) {
			return false
		}
	case opCrash:
		s.mu.Lock()
		s.crashed = true
		s.mu.Unlock()
		return false
	case opRaw:
		s.SendRaw([]byte(st.text))
	case opOversized:
		const head, tail = `{"type":"padding","pad":"`, `"}`
		pad := max(st.count-len(head)-len(tail), 0)
		s.SendRaw([]byte(head + strings.Repeat("x", pad) + tail))
	case opRepeat:
		for i := 1; i <= st.count; i++ {
			if !s.play(st.steps, suffix+"-"+strconv.Itoa(i)) {
				return false
			}
		}
	case opExitBeforeFirst:
	case opFreshCallIDs:
		var b [8]byte
		rand.Read(b[:])
		s.mu.Lock()
		s.fresh = "-" + hex.EncodeToString(b[:])
		s.mu.Unlock()
	default:
		// Only a damaged script file has other steps; stop there.
		return false
	}
	return true
}

// await waits for the tool_result of callID; see AwaitResult.
func (s *Session) await(callID string) bool {
	s.wait(func() bool {
		_, ok := s.results[callID]
		return ok || s.cancelled || s.closed
	}, 0)
	if s.Cancelled() {
		// Cancel rejects the pending await, even when the result came
		// along with it.
		return s.cancelledDone()
	}
	_, ok := s.Result(callID)
	return ok
}

// cancelledDone answers a cancel like a conforming runner and ends the
// script, or ends it because the transport closed.
func (s *Session) cancelledDone() bool {
	if s.Cancelled() {
		s.done(map[string]any{"ok": false, "error": map[string]any{"code": "timeout", "message": "Execution timed out"}})
	}
	return false
}

// done sends a done with the fields of m, the logs so far and the
// duration.
func (s *Session) done(m map[string]any) {
	s.mu.Lock()
	m["type"], m["id"] = "done", s.execute["id"]
	m["durationMs"] = time.Since(s.start).Milliseconds()
	m["logs"] = append([]string{}, s.logs...)
	s.mu.Unlock()
	s.Send(m)
}
