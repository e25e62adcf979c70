package execbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

// fanOut is a guest that makes n tool calls at once, awaits them all and
// finishes.
func fanOut(n int) execboxtest.Script {
	return execboxtest.Script{started(),
		execboxtest.Repeat(n, callTool("c", "tools", "echo", 1)),
		execboxtest.Repeat(n, awaitResult("c")),
		done("fanned out")}
}

func TestRunNestedCallLimit(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr.name+"/calls beyond the limit are refused to the guest and never reach the tools", func(t *testing.T) {
			tools := newTools()
			d, r := tr.start(t, fanOut(50), Config{MaxNestedCalls: 10})
			res, err := d.Run(runCtx(t), newCall(tools, nil))
			if err != nil || res.ExitCode != 0 || res.Data != "fanned out" {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			if got := len(tools.Calls()); got != 10 {
				t.Errorf("the tools received %d calls, want exactly the limit of 10", got)
			}
			results := ofType(onlySession(t, r), "tool_result")
			refused := 0
			for _, m := range results {
				if m["ok"] == true {
					continue
				}
				e, _ := m["error"].(map[string]any)
				msg, _ := e["message"].(string)
				if e["code"] != "tool_error" || !strings.Contains(msg, "limit of 10 nested tool calls (max_nested_calls)") {
					t.Errorf("refusal %v does not name the limit", m)
				}
				refused++
			}
			if len(results) != 50 || refused != 40 {
				t.Errorf("the guest got %d answers, %d refusals; want 50 and 40", len(results), refused)
			}
			if n, _ := res.Evidence["nested_calls"].([]any); len(n) != 10 {
				t.Errorf("evidence lists %d nested calls, want 10", len(n))
			}
			if res.Evidence["nested_calls_refused"] != 40 || res.Evidence["max_nested_calls"] != 10 {
				t.Errorf("evidence refused %v of max %v, want 40 of 10", res.Evidence["nested_calls_refused"], res.Evidence["max_nested_calls"])
			}
		})
	}
}

func TestRunNestedCallsInFlightAreBounded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	inFlight, peak := 0, 0
	tools := newTools()
	tools.handle = func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return drivers.NestedResult{OK: true, Result: callID}
	}
	r := execboxtest.NewWS(t, fanOut(40))
	d := newDriver(t, Config{URL: r.URL, MaxNestedInFlight: 3})
	res, err := d.Run(runCtx(t), newCall(tools, nil))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if len(tools.Calls()) != 40 {
		t.Errorf("the tools received %d calls, want all 40", len(tools.Calls()))
	}
	if peak > 3 || peak < 2 {
		t.Errorf("at most %d calls ran at once, want parallel calls bounded by 3", peak)
	}
}

func TestRunNestedCallsEndWithTheExecution(t *testing.T) {
	t.Parallel()
	// The guest keeps calling tools long after its 200 ms are over and
	// ignores cancel; each tool takes its time unless cancelled.
	var mu sync.Mutex
	var starts []time.Time
	var noDeadline int
	tools := newTools()
	tools.handle = func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
		mu.Lock()
		starts = append(starts, time.Now())
		if _, ok := ctx.Deadline(); !ok {
			noDeadline++
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
			return drivers.NestedResult{Code: "internal_error", Message: ctx.Err().Error()}
		case <-time.After(80 * time.Millisecond):
			return drivers.NestedResult{OK: true}
		}
	}
	script := execboxtest.Script{started(),
		execboxtest.Repeat(200, callTool("c", "tools", "echo", 1), ignoreCancel(5*time.Millisecond)),
		done("too late")}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			mu.Lock()
			starts, noDeadline = nil, 0
			mu.Unlock()
			d, r := tr.start(t, script, Config{CancelGrace: 300 * time.Millisecond})
			begin := time.Now()
			res, err := d.Run(runCtx(t), newCall(tools, map[string]any{"timeoutMs": 200}))
			elapsed := time.Since(begin)
			if err != nil || res.ExitCode != 124 {
				t.Fatalf("Run = %+v, %v; want a timeout", res, err)
			}
			// Limit 200ms + host grace 100ms + cancel grace 300ms; the guest's
			// 200 calls of 80ms each would take 16s.
			if elapsed > 5*time.Second {
				t.Errorf("Run returned %v after it began; want within the limit and its graces", elapsed)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(starts) == 0 {
				t.Fatal("no tool call ran before the deadline")
			}
			// The limit runs from started, which came before the first
			// call: no call may start later than 300 ms (the limit and the
			// host's grace) after that one, give or take the scheduler.
			deadline := starts[0].Add(300*time.Millisecond + 50*time.Millisecond)
			for _, s := range starts {
				if s.After(deadline) {
					t.Errorf("a nested call started %v after the first, past the execution's deadline", s.Sub(starts[0]))
				}
			}
			if noDeadline > 0 {
				t.Errorf("%d nested calls got a context without the execution's deadline", noDeadline)
			}
			late := 0
			for _, m := range ofType(onlySession(t, r), "tool_result") {
				if e, _ := m["error"].(map[string]any); e["code"] == "timeout" {
					late++
				}
			}
			if late == 0 {
				t.Error("no call after the deadline was answered with a timeout")
			}
		})
	}
}
