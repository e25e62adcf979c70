package gateway

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
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
