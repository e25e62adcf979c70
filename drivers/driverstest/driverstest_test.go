package driverstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
)

// fake is an in-memory driver. Its flaw, when set, breaks one invariant
// on purpose, so the kit can be shown to catch it.
type fake struct {
	flaw  string
	begun atomic.Int64
	// last is shared by all calls: the racy flaw echoes through it.
	last string
}

func (f *fake) Engine() string {
	if f.flaw == "empty-engine" {
		return ""
	}
	return "fake/1.0"
}

func (f *fake) Run(ctx context.Context, call drivers.Call) (drivers.Result, error) {
	if f.flaw == "mutates-args" {
		call.Args["value"] = "changed"
	}
	switch call.Target {
	case "echo":
		v, _ := call.Args["value"].(string)
		if f.flaw == "racy" {
			f.last = v
			runtime.Gosched()
			v = f.last
		}
		if f.flaw == "unencodable" {
			return drivers.Result{Stdout: v, Data: map[string]any{"f": func() {}}}, nil
		}
		return drivers.Result{Stdout: v}, nil
	case "sleep":
		f.begun.Add(1)
		if f.flaw == "ignores-context" {
			time.Sleep(time.Second)
			return drivers.Result{}, nil
		}
		<-ctx.Done()
		return drivers.Result{}, ctx.Err()
	case "fail":
		if f.flaw == "failure-as-error" {
			return drivers.Result{}, errors.New("the tool failed")
		}
		return drivers.Result{ExitCode: 1, Stderr: "the tool failed"}, nil
	case "garbage":
		if f.flaw == "panics-on-hostile" {
			var m map[string]any
			m["x"] = 1
		}
		return drivers.Result{ExitCode: 1, Stderr: "\x00\xff garbage"}, nil
	}
	if f.flaw == "unknown-succeeds" {
		return drivers.Result{}, nil
	}
	return drivers.Result{}, fmt.Errorf("target %q: %w", call.Target, drivers.ErrUnknownTarget)
}

// fakeSuite is the suite of a fake with flaw.
func fakeSuite(flaw string) Suite {
	newFake := func(*testing.T) Subject {
		f := &fake{flaw: flaw}
		return Subject{Driver: f, Begun: func() int { return int(f.begun.Load()) }}
	}
	call := func(target string, args map[string]any) drivers.Call {
		return drivers.Call{RequestID: "r1", ToolID: "fake." + target, Target: target, Args: args}
	}
	unknown := call("nosuch", nil)
	return Suite{
		New:      newFake,
		Echo:     func(v string) drivers.Call { return call("echo", map[string]any{"value": v}) },
		Echoed:   func(res drivers.Result) (string, bool) { return res.Stdout, res.Stdout != "" },
		Slow:     call("sleep", nil),
		Failing:  call("fail", nil),
		Unknown:  &unknown,
		Hostile:  []Hostile{{Name: "garbage", New: newFake, Call: call("garbage", nil)}},
		Deadline: 50 * time.Millisecond,
		Grace:    300 * time.Millisecond,
	}
}

func TestAFaithfulDriverPasses(t *testing.T) {
	t.Parallel()
	Run(t, fakeSuite(""))
}

// TestFlawedDriver runs the kit against the flawed fake named by
// DRIVERSTEST_FLAW; TestTheKitCatchesFlaws runs it in a child process and
// expects it to fail.
func TestFlawedDriver(t *testing.T) {
	t.Parallel()
	flaw := os.Getenv("DRIVERSTEST_FLAW")
	if flaw == "" {
		return // only meaningful in the child process
	}
	Run(t, fakeSuite(flaw))
}

func TestTheKitCatchesFlaws(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ flaw, invariant string }{
		{"empty-engine", "engine"},
		{"mutates-args", "args-unmodified"},
		{"unencodable", "result-encodes"},
		{"ignores-context", "deadline"},
		{"ignores-context", "cancel"},
		{"failure-as-error", "failure-is-a-result"},
		{"unknown-succeeds", "unknown-target"},
		{"panics-on-hostile", "hostile-output"},
		{"racy", "concurrent"},
	} {
		t.Run(tc.flaw+"/"+tc.invariant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFlawedDriver$", "-test.count=1")
			cmd.Env = append(os.Environ(), "DRIVERSTEST_FLAW="+tc.flaw)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the kit passed a driver with flaw %s:\n%s", tc.flaw, out)
			}
			if want := "--- FAIL: TestFlawedDriver/" + tc.invariant; !strings.Contains(string(out), want) {
				t.Errorf("the kit did not fail %s for flaw %s:\n%s", tc.invariant, tc.flaw, out)
			}
		})
	}
}
