package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/evidence"
)

// slowDecisionStore delays the policy decision record of nested calls, as
// a loaded machine delays the gateway between a nested call's claim and
// its dispatch.
type slowDecisionStore struct {
	evidence.Store
	delay time.Duration
}

func (s slowDecisionStore) Put(ctx context.Context, key string, data []byte) error {
	if strings.Contains(key, ":") && strings.HasSuffix(key, evidence.ArtifactPolicyDecision) {
		time.Sleep(s.delay)
	}
	return s.Store.Put(ctx, key, data)
}

// TestSandboxNestedCallClaimedBeforeItsDeadlineAndLateToDispatch: a nested
// call claimed before the parent's deadline whose dispatch comes after it
// never runs; by the time the parent answers, its attempt is closed as not
// dispatched (evidence complete, no manifest: the request may be run again
// by a retried parent). This is what a loaded machine does to nested calls
// near the deadline; no wait for a manifest can succeed for such a call.
func TestSandboxNestedCallClaimedBeforeItsDeadlineAndLateToDispatch(t *testing.T) {
	t.Parallel()
	e := newSandboxEnvKeys(t, "ws", execboxtest.Script{
		execboxtest.Started(),
		execboxtest.CallTool("c", "workspace", "readFile", map[string]any{"path": "notes.txt"}),
		execboxtest.AwaitResult("c"),
		execboxtest.Done("read"),
	}, "timeout: 5s")
	// The parent's 500 ms and the cancel grace of 250 ms pass while the
	// nested call's decision is being written.
	e.gw.store = slowDecisionStore{Store: e.gw.store, delay: time.Second}
	resp := e.mustCall("sb-slow", "code.run", map[string]any{"code": "await workspace.readFile({path: 'notes.txt'})", "timeoutMs": 500.0})
	if tr := resp.GetToolResult(); tr.GetExitCode() != 124 {
		t.Fatalf("exit %d (%s), want 124", tr.GetExitCode(), tr.GetStderr())
	}
	ids := e.nestedRequests("sb-slow")
	if len(ids) != 1 {
		t.Fatalf("nested requests with evidence: %v, want the one", ids)
	}
	if st := nestedState(t, e, ids[0]); st != "not dispatched" {
		t.Errorf("nested call %s: %s, want not dispatched", ids[0], st)
	}
}

// nestedState says how a nested request's evidence ended, read once: by
// the time its parent has answered, the parent's session has waited for
// every nested call, and the pipeline records synchronously, so its
// evidence is final. "completed" (a manifest), "not dispatched" (the
// attempt closed without running the tool) or what is missing.
func nestedState(t *testing.T, e *sandboxEnv, id string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := e.store.Get(ctx, evidence.Key(id, evidence.ArtifactManifest)); err == nil {
		return "completed"
	}
	data, err := e.store.Get(ctx, evidence.AttemptKey(id, 1, evidence.ArtifactDispatch))
	if err != nil {
		return "open: no manifest and no dispatch record"
	}
	d, err := evidence.ParseDispatchRecord(data, id, 1)
	if err != nil {
		t.Fatalf("nested call %s: dispatch record: %v", id, err)
	}
	if d.State == evidence.NotDispatched {
		return "not dispatched"
	}
	if _, err := e.store.Get(ctx, evidence.AttemptKey(id, 1, evidence.ArtifactNotDispatched)); err == nil {
		return "not dispatched"
	}
	return "open: dispatched without a manifest"
}
