package gateway

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/evidence"
)

// nestedRequests returns the ids of the nested requests of parent that
// have evidence.
func (e *sandboxEnv) nestedRequests(parent string) []string {
	e.t.Helper()
	keys, err := e.store.List(context.Background(), "requests/"+parent+":")
	if err != nil {
		e.t.Fatal(err)
	}
	seen := map[string]bool{}
	var ids []string
	for _, k := range keys {
		id, _, _ := strings.Cut(strings.TrimPrefix(k, "requests/"), "/")
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}

// heapPeak samples the heap in use until stop is called, which returns the
// highest figure seen.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

func TestSandboxNestedFloodIsCapped(t *testing.T) {
	// A guest fans out 40,000 reads at once. Only the first 256 reach
	// the gateway's pipeline; the rest are refused to the guest with the
	// limit named, leave no evidence of their own and are counted in the
	// parent's.
	const fanOut, limit = 40000, 256
	e := newSandboxEnvKeys(t, "stdio", execboxtest.Script{
		execboxtest.Started(),
		execboxtest.Repeat(fanOut, execboxtest.CallTool("c", "workspace", "readFile", map[string]any{"path": "notes.txt"})),
		execboxtest.Repeat(fanOut, execboxtest.AwaitResult("c")),
		execboxtest.Done("fanned out"),
	}, "timeout: 60s")
	runtime.GC()
	stopHeap := heapPeak()
	start := time.Now()
	resp := e.mustCall("sb-flood", "code.run", map[string]any{"code": "await Promise.all(calls)"})
	took := time.Since(start)
	peak := stopHeap()
	t.Logf("40,000 tool calls: %v, peak heap in use %d MiB", took, peak>>20)
	if !resp.GetOk() || resp.GetToolResult().GetData().GetStringValue() != "fanned out" {
		t.Fatalf("the flooding execution: %v", resp)
	}
	if got := len(e.nestedRequests("sb-flood")); got != limit {
		t.Errorf("%d nested calls left evidence, want exactly max_nested_calls = %d", got, limit)
	}
	ok, refused := 0, 0
	for _, m := range e.toolResults() {
		if m["ok"] == true {
			ok++
			continue
		}
		if msg, _ := m["error"].(map[string]any)["message"].(string); strings.Contains(msg, "limit of 256 nested tool calls (max_nested_calls)") {
			refused++
		}
	}
	if ok != limit || refused != fanOut-limit {
		t.Errorf("the guest got %d results and %d refusals naming the limit, want %d and %d", ok, refused, limit, fanOut-limit)
	}
	ev, _ := decodeJSON(t, e.artifact("sb-flood", evidence.ArtifactToolResult))["evidence"].(map[string]any)
	if ev["nested_calls_refused"] != float64(fanOut-limit) || ev["max_nested_calls"] != float64(limit) {
		t.Errorf("the parent's evidence records %v refused of max %v", ev["nested_calls_refused"], ev["max_nested_calls"])
	}
	if peak > 128<<20 {
		t.Errorf("the flood took the heap to %d MiB", peak>>20)
	}
	if took > 60*time.Second {
		t.Errorf("the flood took %v, past its 60s timeout", took)
	}
}

func TestSandboxNestedCallsEndAtTheParentsTimeout(t *testing.T) {
	t.Parallel()
	// The guest keeps starting 30-second shell calls, ignoring cancel, far
	// past its 500 ms. None starts after the deadline, those in flight are
	// cancelled with their evidence complete, and the parent returns within
	// its timeout plus the host's graces. The bounds below sit between the
	// goal (under a second) and the failure (5 s or more: the driver's own
	// limit, or a shell call left running), so a loaded machine does not
	// flip them.
	e := newSandboxEnvKeys(t, "ws", execboxtest.Script{
		execboxtest.Started(),
		execboxtest.Repeat(400,
			execboxtest.CallTool("c", "workspace", "shell", map[string]any{"command": "sleep 30"}),
			execboxtest.IgnoreCancel(5*time.Millisecond)),
		execboxtest.Done("too late"),
	}, "timeout: 5s")
	start := time.Now()
	resp := e.mustCall("sb-late", "code.run", map[string]any{"code": "for (;;) workspace.shell({command: 'sleep 30'})", "timeoutMs": 500.0})
	took := time.Since(start)
	if tr := resp.GetToolResult(); tr.GetExitCode() != 124 {
		t.Fatalf("exit %d (%s), want 124", tr.GetExitCode(), tr.GetStderr())
	}
	// 500 ms, the host's 100 ms, the cancel grace of 250 ms: a shell call
	// left running would hold the parent to the driver's 5 s.
	if took > 4500*time.Millisecond {
		t.Errorf("the parent returned after %v, want within its timeout and graces", took)
	}
	ids := e.nestedRequests("sb-late")
	if len(ids) == 0 || len(ids) > 8 {
		t.Errorf("%d nested calls reached the pipeline, want between 1 and the 8 in flight", len(ids))
	}
	// The limit runs from started, which came before the first nested
	// call: none may start more than 600 ms (the limit and the host's
	// grace) after the first, give or take a loaded scheduler; the guest
	// would go on starting them for as long as it ran.
	//
	// Every nested call's evidence is final once the parent has answered
	// (see nestedState), so it is read, not waited for: a call cancelled
	// while it ran is completed, and one claimed before the deadline but
	// dispatched after it (a loaded machine) was closed as not dispatched,
	// which leaves no manifest, ever.
	var received []time.Time
	for _, id := range ids {
		if st := nestedState(t, e, id); st != "completed" && st != "not dispatched" {
			t.Errorf("nested call %s: %s, want its evidence complete", id, st)
		}
		req := decodeJSON(t, e.artifact(id, evidence.ArtifactRequest))
		at, err := time.Parse(time.RFC3339Nano, req["received_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		received = append(received, at)
	}
	first := slices.MinFunc(received, time.Time.Compare)
	for i, at := range received {
		if at.After(first.Add(600*time.Millisecond + time.Second)) {
			t.Errorf("nested call %s started %v after the first, past the parent's deadline", ids[i], at.Sub(first))
		}
	}
}
