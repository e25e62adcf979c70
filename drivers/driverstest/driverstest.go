// Package driverstest is a conformance kit for drivers: Run checks the
// invariants of the Executor Driver Contract (specs/executor-driver-
// contract-v0.md) and of package drivers against any driver, given a way to
// build it and a few calls whose outcome is known.
//
// The invariants, each a subtest:
//
//   - engine: Engine names the engine, in printable text, the same on every
//     call.
//   - args-unmodified: a call's arguments reach the downstream exactly as
//     given (quotes, shell metacharacters, non-ASCII, line ends), and Run
//     leaves the caller's Args as they were.
//   - result-encodes: a Result's Data and Evidence, and the evidence of an
//     error (drivers.ErrorEvidence), encode as JSON, the form the gateway
//     records them in.
//   - deadline: a call whose context's deadline passes, or has passed
//     before Run, ends within Grace of it and does not claim success. A
//     driver whose downstream runs a call to its end whether or not the
//     client waits (Suite.OwnDeadline) is held to its own bound instead,
//     drivers.Bounded's MaxRunTime: recording a timeout at the caller's
//     deadline would be false.
//   - cancel: a call whose context is cancelled while the downstream runs
//     it ends within Grace and does not claim success.
//   - failure-is-a-result: a tool that ran and failed is a Result with a
//     non-zero exit code, not an error (the contract: only a broken
//     exchange "throws").
//   - unknown-target: a target the driver does not serve never succeeds.
//   - unreachable: a downstream that cannot be reached is an error, never
//     a Result.
//   - hostile-output: whatever the downstream answers (garbage, huge,
//     deeply nested, control bytes), Run neither panics nor hangs past its
//     deadline, and what it returns encodes.
//   - concurrent: calls on one driver from many goroutines each get their
//     own answer (run under -race, the check covers data races too).
//
// The kit waits on conditions, never on guessed delays: a cancel is sent
// once the downstream reports the call begun (Subject.Begun), and the
// bounds it asserts are the contract's (Grace past a deadline), not speed
// goals.
package driverstest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/toolgate/toolgate/drivers"
)

// DefaultGrace is how long past its deadline or cancellation a Run may
// take when Suite.Grace is zero: enough for a sandbox to be killed and
// cleaned up on a loaded machine.
const DefaultGrace = 10 * time.Second

// EchoValue is the value the args-unmodified invariant sends: every kind
// of character a driver might be tempted to quote, clean or re-encode.
const EchoValue = "quote \" single ' dollar $HOME back \\ tab \t newline \n glob * semicolon ; " +
	"non-ASCII \u00fcn\u00efc\u00f6d\u00e9 \u6f22\u5b57 emoji \U0001F600 percent %s %2F"

// Subject is one driver under test.
type Subject struct {
	Driver drivers.Driver
	// Begun, when set, reports how many calls the downstream has begun to
	// run; the cancel invariant cancels a call once the count grows. When
	// nil the call is cancelled as soon as Run was started.
	Begun func() int
}

// Hostile is a downstream answering hostile output.
type Hostile struct {
	Name string
	// New builds a driver whose downstream answers Call with the hostile
	// output.
	New  func(t *testing.T) Subject
	Call drivers.Call
}

// Suite describes a driver and the calls whose outcome is known.
type Suite struct {
	// New builds a fresh driver; each invariant gets its own. A driver
	// that is an io.Closer is closed when the test ends.
	New func(t *testing.T) Subject
	// Echo returns a call that succeeds and whose downstream hands back
	// value, received as an argument; Echoed finds it in the Result.
	Echo   func(value string) drivers.Call
	Echoed func(res drivers.Result) (string, bool)
	// Slow is a call that runs longer than any test unless stopped.
	Slow drivers.Call
	// Failing is a call of a tool that runs and fails.
	Failing drivers.Call
	// Unknown is a call of a target the driver does not serve; nil for a
	// driver that serves every target (a runner of code, whatever the
	// catalog names it).
	Unknown *drivers.Call
	// Unreachable, when set, builds a driver whose downstream cannot be
	// reached. A driver without a downstream (a local folder) leaves it
	// nil.
	Unreachable func(t *testing.T) Subject
	// Hostile are downstreams answering hostile output.
	Hostile []Hostile
	// Deadline is the deadline of the deadline invariant's call (default
	// 500ms); Grace how long past it Run may take (default DefaultGrace).
	Deadline, Grace time.Duration
	// OwnDeadline says that once a call may have reached the downstream,
	// the driver ends it by its own time limit rather than the context's
	// deadline (the downstream runs on regardless, so the caller's
	// deadline is not the tool's end). The driver must then be
	// drivers.Bounded, and the deadline invariant holds a sent call to
	// MaxRunTime.
	OwnDeadline bool
	// Concurrency is the number of concurrent calls (default 8).
	Concurrency int
}

// Run checks every invariant against the driver s describes.
func Run(t *testing.T, s Suite) {
	t.Helper()
	s = s.withDefaults()
	for _, inv := range []struct {
		name  string
		check func(*testing.T, Suite)
	}{
		{"engine", checkEngine},
		{"args-unmodified", checkArgsUnmodified},
		{"result-encodes", checkResultEncodes},
		{"deadline", checkDeadline},
		{"cancel", checkCancel},
		{"failure-is-a-result", checkFailure},
		{"unknown-target", checkUnknown},
		{"unreachable", checkUnreachable},
		{"hostile-output", checkHostile},
		{"concurrent", checkConcurrent},
	} {
		t.Run(inv.name, func(t *testing.T) {
			t.Parallel()
			inv.check(t, s)
		})
	}
}

func (s Suite) withDefaults() Suite {
	if s.Deadline <= 0 {
		s.Deadline = 500 * time.Millisecond
	}
	if s.Grace <= 0 {
		s.Grace = DefaultGrace
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 8
	}
	return s
}

// subject builds a driver with newSubject and closes it when t ends.
func subject(t *testing.T, newSubject func(*testing.T) Subject) Subject {
	t.Helper()
	sub := newSubject(t)
	if sub.Driver == nil {
		t.Fatal("the suite built a nil driver")
	}
	if c, ok := sub.Driver.(io.Closer); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	return sub
}

// outcome is what one Run returned, or that it panicked.
type outcome struct {
	res     drivers.Result
	err     error
	panic   any
	elapsed time.Duration
}

// succeeded reports whether the outcome claims the tool succeeded.
func (o outcome) succeeded() bool { return o.panic == nil && o.err == nil && o.res.ExitCode == 0 }

func (o outcome) String() string {
	switch {
	case o.panic != nil:
		return fmt.Sprintf("panic %v", o.panic)
	case o.err != nil:
		return fmt.Sprintf("error %v after %v", o.err, o.elapsed)
	}
	return fmt.Sprintf("exit %d stdout %.200q stderr %.200q after %v", o.res.ExitCode, o.res.Stdout, o.res.Stderr, o.elapsed)
}

// run calls d.Run, turning a panic into an outcome.
func run(ctx context.Context, d drivers.Driver, call drivers.Call) (o outcome) {
	start := time.Now()
	defer func() {
		o.elapsed = time.Since(start)
		if p := recover(); p != nil {
			o.panic = p
		}
	}()
	o.res, o.err = d.Run(ctx, call)
	return o
}

// runBounded runs call with a context ending at deadline and fails t when
// Run outlives it by more than grace.
func runBounded(t *testing.T, d drivers.Driver, call drivers.Call, deadline, grace time.Duration) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	o := run(ctx, d, call)
	if o.elapsed > deadline+grace {
		t.Errorf("Run took %v, past its deadline %v by more than %v", o.elapsed, deadline, grace)
	}
	return o
}

func checkEngine(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	first := d.Engine()
	if first == "" {
		t.Fatal("Engine is empty")
	}
	if i := strings.IndexFunc(first, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("Engine %q holds a character that is not printable", first)
	}
	o := runBounded(t, d, s.Echo("engine"), s.Grace, s.Grace)
	if o.panic != nil {
		t.Fatalf("Run: %v", o)
	}
	if again := d.Engine(); again != first {
		t.Errorf("Engine changed from %q to %q", first, again)
	}
}

func checkArgsUnmodified(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	call := s.Echo(EchoValue)
	before := deepCopy(t, call.Args)
	o := runBounded(t, d, call, s.Grace, s.Grace)
	if !o.succeeded() {
		t.Fatalf("the echo call did not succeed: %v", o)
	}
	if got, ok := s.Echoed(o.res); !ok || got != EchoValue {
		t.Errorf("the downstream received %q (found %v), want %q", got, ok, EchoValue)
	}
	if after := deepCopy(t, call.Args); !reflect.DeepEqual(before, after) {
		t.Errorf("Run changed the caller's args:\nbefore %v\nafter  %v", before, after)
	}
}

// deepCopy copies args by way of JSON, the form they arrive in.
func deepCopy(t *testing.T, args map[string]any) any {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("the suite's args do not encode: %v", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func checkResultEncodes(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	calls := []struct {
		name string
		call drivers.Call
	}{{"echo", s.Echo("encodes")}, {"failing", s.Failing}}
	if s.Unknown != nil {
		calls = append(calls, struct {
			name string
			call drivers.Call
		}{"unknown", *s.Unknown})
	}
	for _, c := range calls {
		o := runBounded(t, d, c.call, s.Grace, s.Grace)
		if err := encodes(o); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// encodes reports why an outcome cannot be recorded, or nil.
func encodes(o outcome) error {
	if o.panic != nil {
		return fmt.Errorf("Run panicked: %v", o.panic)
	}
	if o.err != nil {
		if _, err := json.Marshal(drivers.ErrorEvidence(o.err)); err != nil {
			return fmt.Errorf("the error's evidence does not encode: %w", err)
		}
		return nil
	}
	if _, err := json.Marshal(o.res.Data); err != nil {
		return fmt.Errorf("Data does not encode: %w", err)
	}
	if _, err := json.Marshal(o.res.Evidence); err != nil {
		return fmt.Errorf("Evidence does not encode: %w", err)
	}
	return nil
}

func checkDeadline(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	grace := s.Grace
	if s.OwnDeadline {
		b, ok := d.(drivers.Bounded)
		if !ok {
			t.Fatal("a driver that keeps its own deadline must be drivers.Bounded")
		}
		grace += b.MaxRunTime()
	}
	if o := runBounded(t, d, s.Slow, s.Deadline, grace); o.succeeded() || o.panic != nil {
		t.Errorf("a call past its deadline: %v, want an error or a failure", o)
	}
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	if o := run(ctx, d, s.Slow); o.succeeded() || o.panic != nil || o.elapsed > s.Grace {
		t.Errorf("a call whose deadline had passed: %v, want an error or a failure within %v", o, s.Grace)
	}
}

func checkCancel(t *testing.T, s Suite) {
	sub := subject(t, s.New)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	begun := 0
	if sub.Begun != nil {
		begun = sub.Begun()
	}
	done := make(chan outcome, 1)
	go func() { done <- run(ctx, sub.Driver, s.Slow) }()
	if sub.Begun != nil {
		waitBegun(t, sub.Begun, begun, s.Grace, done)
	}
	cancelled := time.Now()
	cancel()
	select {
	case o := <-done:
		if o.succeeded() || o.panic != nil {
			t.Errorf("a cancelled call: %v, want an error or a failure", o)
		}
		if waited := time.Since(cancelled); waited > s.Grace {
			t.Errorf("Run returned %v after the cancel, more than %v", waited, s.Grace)
		}
	case <-time.After(s.Grace + s.Deadline):
		t.Fatalf("Run did not return within %v of the cancel", s.Grace+s.Deadline)
	}
}

// waitBegun waits until begun exceeds before: the downstream runs the
// call. It fails t when the call ended first or nothing began within
// grace.
func waitBegun(t *testing.T, begun func() int, before int, grace time.Duration, done <-chan outcome) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(grace)
	for begun() <= before {
		select {
		case o := <-done:
			t.Fatalf("the slow call ended before it was cancelled: %v", o)
		case <-limit:
			t.Fatalf("the downstream did not begin the slow call within %v", grace)
		case <-tick.C:
		}
	}
}

func checkFailure(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	o := runBounded(t, d, s.Failing, s.Grace, s.Grace)
	if o.panic != nil || o.err != nil || o.res.ExitCode == 0 {
		t.Errorf("a tool that fails: %v, want a Result with a non-zero exit code", o)
	}
}

func checkUnknown(t *testing.T, s Suite) {
	if s.Unknown == nil {
		return // the driver serves every target
	}
	d := subject(t, s.New).Driver
	if o := runBounded(t, d, *s.Unknown, s.Grace, s.Grace); o.succeeded() || o.panic != nil {
		t.Errorf("an unknown target: %v, want an error or a failure", o)
	}
}

func checkUnreachable(t *testing.T, s Suite) {
	if s.Unreachable == nil {
		return // a driver without a downstream cannot lose it
	}
	d := subject(t, s.Unreachable).Driver
	o := runBounded(t, d, s.Echo("unreachable"), s.Grace, s.Grace)
	if o.panic != nil || o.err == nil {
		t.Errorf("an unreachable downstream: %v, want an error", o)
	}
	if err := encodes(o); err != nil {
		t.Error(err)
	}
}

func checkHostile(t *testing.T, s Suite) {
	for _, h := range s.Hostile {
		t.Run(h.Name, func(t *testing.T) {
			t.Parallel()
			d := subject(t, h.New).Driver
			o := runBounded(t, d, h.Call, s.Deadline+s.Grace, s.Grace)
			if err := encodes(o); err != nil {
				t.Error(err)
			}
		})
	}
}

func checkConcurrent(t *testing.T, s Suite) {
	d := subject(t, s.New).Driver
	var wg sync.WaitGroup
	errs := make(chan error, s.Concurrency)
	for i := range s.Concurrency {
		wg.Go(func() {
			want := fmt.Sprintf("call %d of %d: %s", i, s.Concurrency, EchoValue)
			ctx, cancel := context.WithTimeout(t.Context(), s.Grace)
			defer cancel()
			o := run(ctx, d, s.Echo(want))
			if !o.succeeded() {
				errs <- fmt.Errorf("call %d: %v", i, o)
				return
			}
			if got, ok := s.Echoed(o.res); !ok || got != want {
				errs <- fmt.Errorf("call %d got %q, want its own %q", i, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
