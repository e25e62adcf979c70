package gateway

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestTPMJSCallerDeadlineIsNotTheToolsEnd: a caller gives up at its own
// deadline while the executor, which never notices a client that hung up,
// goes on running the tool. The gateway must not record a timeout (exit
// 124) that never happened and replay it to every retry: the record, and
// what a retry gets once the tool ended, is what the tool really did.
func TestTPMJSCallerDeadlineIsNotTheToolsEnd(t *testing.T) {
	t.Parallel()
	for _, p := range []tpmjstest.Personality{tpmjstest.NodeV10, tpmjstest.DenoV11} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			e := newTPMJSEnv(t, p, "    call_timeout: 20s\n")
			var finished atomic.Int32
			// The real executors run a tool to its end whether or not
			// the client still waits.
			e.exec.RegisterTool(tpmjstest.Package, tpmjstest.SleepTool, func(map[string]any, map[string]string) (any, error) {
				time.Sleep(1500 * time.Millisecond)
				finished.Add(1)
				return map[string]any{"wrote": "the registry entry"}, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := e.call(ctx, "slow-1", "fake.sleep", nil)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("the caller's call = %v, want DEADLINE_EXCEEDED", err)
			}
			resp := retryUntilStored(t, e, "slow-1")
			tr := resp.GetToolResult()
			if !resp.GetOk() || tr.GetExitCode() != 0 {
				t.Fatalf("a retry got exit %d (%q), want the tool's own result, exit 0", tr.GetExitCode(), tr.GetStderr())
			}
			raw, err := e.store.Get(context.Background(), evidence.Key("slow-1", evidence.ArtifactToolResult))
			if err != nil {
				t.Fatal(err)
			}
			var stored evidence.ToolResultRecord
			if err := json.Unmarshal(raw, &stored); err != nil || stored.ExitCode != 0 {
				t.Fatalf("tool_result.json records exit %d (%v), want the tool's own exit 0", stored.ExitCode, err)
			}
			if n := finished.Load(); n != 1 {
				t.Fatalf("the tool finished %d times before its result was replayed, want once", n)
			}
		})
	}
}

// retryUntilStored retries request id until it gets an answer other than
// ABORTED (in flight), within 15 s.
func retryUntilStored(t *testing.T, e *tpmjsEnv, id string) *toolgatev1.RunToolResponse {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := e.call(context.Background(), id, "fake.sleep", nil)
		if status.Code(err) != codes.Aborted {
			if err != nil {
				t.Fatalf("retry of %s: %v", id, err)
			}
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry of %s: still %v after 15s", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
