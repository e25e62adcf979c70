package gateway

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/recovery"
)

// TestStoreFailingAfterTheToolRanSpools: the store goes down while the tool
// runs. The caller still gets its answer, nothing is lost, and the spooled
// artifacts reach the store once it is back.
func TestStoreFailingAfterTheToolRanSpools(t *testing.T) {
	t.Parallel()
	store := &flakyStore{Store: evidence.NewMemoryStore()}
	tool := &hookDriver{run: func() { store.down.Store(true) }, out: drivers.Result{Stdout: "did it\n"}}
	spoolDir := filepath.Join(t.TempDir(), "spool")
	e := newEnv(t, envOptions{
		store:    store,
		spoolDir: spoolDir,
		extra:    map[string]drivers.Driver{"hook": tool},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	ctx := context.Background()

	resp := e.mustCall("spool-1", "hook.run", nil)
	if !resp.GetOk() || resp.GetToolResult().GetStdout() != "did it\n" || len(resp.GetEvidenceRefs()) != 6 {
		t.Fatalf("response = %v; want the tool's answer with all six refs", resp)
	}
	if _, err := store.Get(ctx, evidence.Key("spool-1", evidence.ArtifactResponse)); err == nil {
		t.Fatal("response.json reached a store that was down")
	}

	// A retry while the store is down replays the spooled answer.
	replay, err := e.call(ctx, "spool-1", "hook.run", nil)
	if err != nil || replay.GetToolResult().GetStdout() != "did it\n" {
		t.Fatalf("retry while spooled = %v, %v; want the spooled answer", replay, err)
	}

	// Before execution, a store that is down means nothing runs.
	ran := false
	tool.run = func() { ran = true }
	_, err = e.call(ctx, "spool-2", "hook.run", nil)
	wantCode(t, err, codes.Unavailable, "nothing was executed")
	if ran {
		t.Fatal("the tool ran although its write-ahead evidence failed")
	}

	pending, err := evidence.Verify(ctx, store, "spool-1", evidence.VerifyOptions{Spool: e.gw.spool})
	if err != nil || pending.Status != evidence.StatusPending {
		t.Fatalf("verify while spooled = %+v, %v; want pending", pending, err)
	}

	store.down.Store(false)
	if n, err := e.gw.FlushSpool(ctx); err != nil || n != 3 {
		t.Fatalf("FlushSpool = %d, %v; want tool_result, response and manifest moved", n, err)
	}
	e.checkReplyIsStored("spool-1", resp)
}

// TestRecoveryJudgesWhatTheFlusherMovedMeanwhile: recovery lists a
// request's files, then the flusher moves the rest of its record (the
// response, the manifest) from the spool into the store. Recovery must
// judge the request by the store as it is once the spool is empty, not by
// its earlier listing, which shows a dispatched call without an answer:
// it would record a call that completed as interrupted.
func TestRecoveryJudgesWhatTheFlusherMovedMeanwhile(t *testing.T) {
	store := &flakyStore{Store: evidence.NewMemoryStore()}
	tool := &hookDriver{run: func() { store.down.Store(true) }, out: drivers.Result{Stdout: "did it\n"}}
	e := newEnv(t, envOptions{
		store:    store,
		spoolDir: filepath.Join(t.TempDir(), "spool"),
		extra:    map[string]drivers.Driver{"hook": tool},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	ctx := context.Background()
	e.mustCall("moved-1", "hook.run", nil)
	store.down.Store(false)
	stale, err := store.List(ctx, evidence.RequestPrefix("moved-1"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.gw.FlushSpool(ctx); err != nil || n != 3 {
		t.Fatalf("FlushSpool = %d, %v; want the rest of the record moved", n, err)
	}
	// Long after the call, as a sweep finds it.
	e.gw.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	did, err := e.gw.recoverRequest(ctx, "moved-1", stale)
	if err != nil || did != recovery.None {
		t.Fatalf("recovery on a stale listing did %v, %v; want nothing done", did, err)
	}
	m, err := evidence.ParseManifest(e.artifact("moved-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeCompleted {
		t.Fatalf("manifest = %+v, %v; want the call's own, completed", m, err)
	}
}
