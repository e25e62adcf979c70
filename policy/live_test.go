package policy

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	allowSet = `@id("allow_read") permit (principal, action, resource == Tool::"workspace.readFile");`
	denySet  = `@id("deny_read") forbid (principal, action, resource == Tool::"workspace.readFile");
@id("allow_read") permit (principal, action, resource == Tool::"workspace.readFile");`
)

func writeSet(t *testing.T, dir, text string) {
	t.Helper()
	// Write then rename, as deploy tools do, so a reader never sees half
	// a file; the reload itself must not depend on that, which the
	// half-written case below checks.
	tmp := filepath.Join(dir, ".policy.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "policy.default.cedar")); err != nil {
		t.Fatal(err)
	}
}

// TestLiveReloadUnderLoad swaps two policy sets while decisions run: every
// decision is made by one whole set, the one whose digest it records.
func TestLiveReloadUnderLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSet(t, dir, allowSet)
	live, err := NewLive(dir)
	if err != nil {
		t.Fatal(err)
	}
	allowDigest := live.Engine().sets[DefaultRef].digest
	writeSet(t, dir, denySet)
	if _, err := live.Reload(false); err != nil {
		t.Fatal(err)
	}
	denyDigest := live.Engine().sets[DefaultRef].digest

	var stop atomic.Bool
	var wg sync.WaitGroup
	var decisions, mismatches atomic.Int64
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				d := live.Decide(context.Background(), call("workspace.readFile"))
				decisions.Add(1)
				ok := d.PolicySetDigest == allowDigest && d.Allow && d.RuleID == "allow_read" ||
					d.PolicySetDigest == denyDigest && !d.Allow && d.RuleID == "deny_read"
				if !ok {
					mismatches.Add(1)
				}
			}
		})
	}
	for i := range 50 {
		text := allowSet
		if i%2 == 1 {
			text = denySet
		}
		writeSet(t, dir, text)
		before := decisions.Load()
		if _, err := live.Reload(false); err != nil {
			t.Fatal(err)
		}
		// Each set decides a few calls before the next swap.
		for decisions.Load() < before+4 {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	if mismatches.Load() != 0 || decisions.Load() == 0 {
		t.Fatalf("%d of %d decisions did not match the set whose digest they record", mismatches.Load(), decisions.Load())
	}
}

func TestLiveRejectsInvalidChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSet(t, dir, allowSet)
	live, err := NewLive(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Half a file, as an editor saving in place may leave it for a moment.
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(allowSet[:30]), 0o600); err != nil {
		t.Fatal(err)
	}
	swapped, err := live.Reload(false)
	if swapped || err == nil || !strings.Contains(err.Error(), "policy.default.cedar:") {
		t.Fatalf("Reload of a broken file = %v, %v; want a rejection naming file:line", swapped, err)
	}
	if d := live.Decide(context.Background(), call("workspace.readFile")); !d.Allow {
		t.Fatalf("after a rejected change the running set must stay: %+v", d)
	}
	// The same broken content is not reported again; a fix is picked up.
	if swapped, err := live.Reload(false); swapped || err != nil {
		t.Fatalf("unchanged broken folder: %v, %v", swapped, err)
	}
	writeSet(t, dir, denySet)
	if swapped, err := live.Reload(false); !swapped || err != nil {
		t.Fatalf("fixed folder: %v, %v", swapped, err)
	}
	if d := live.Decide(context.Background(), call("workspace.readFile")); d.Allow {
		t.Fatal("the fixed set is not in force")
	}
}

func TestLiveWatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSet(t, dir, allowSet)
	live, err := NewLive(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	swaps := make(chan error, 10)
	go live.Watch(ctx, 10*time.Millisecond, func(swapped bool, err error) { swaps <- err })
	writeSet(t, dir, denySet)
	select {
	case err := <-swaps:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change was not picked up")
	}
	if live.Decide(context.Background(), call("workspace.readFile")).Allow {
		t.Fatal("watched change not in force")
	}
}

// TestLiveWatchWaitsForTheFolderToSettle: a file truncated and then
// written (as os.WriteFile and many editors do) is checked between the
// two steps. The empty file must never be swapped in; the finished one is,
// once the folder has looked the same on two checks.
func TestLiveWatchWaitsForTheFolderToSettle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSet(t, dir, allowSet)
	live, err := NewLive(dir)
	if err != nil {
		t.Fatal(err)
	}
	before := live.Engine()
	file := filepath.Join(dir, "policy.default.cedar")
	check := func(pending string, wantSwap bool) string {
		t.Helper()
		next, swapped, err := live.reloadSettled(pending)
		if err != nil {
			t.Fatal(err)
		}
		if swapped != wantSwap {
			t.Fatalf("swapped = %v, want %v", swapped, wantSwap)
		}
		return next
	}

	if err := os.Truncate(file, 0); err != nil {
		t.Fatal(err)
	}
	pending := check("", false)
	if live.Engine() != before {
		t.Fatal("the half-written (empty) folder was swapped in")
	}
	if err := os.WriteFile(file, []byte(denySet), 0o600); err != nil {
		t.Fatal(err)
	}
	pending = check(pending, false) // changed again since the last check: wait
	if live.Engine() != before {
		t.Fatal("a folder seen once was swapped in")
	}
	check(pending, true)
	if live.Decide(context.Background(), call("workspace.readFile")).Allow {
		t.Fatal("the settled change is not in force")
	}
	check("", false) // nothing changed since
}

// configMapVolume writes text as policy.default.cedar the way the kubelet
// updates a ConfigMap volume: into a new timestamped folder, then the
// ..data link swapped to it by a rename; the file itself is a link
// through ..data.
func configMapVolume(t *testing.T, dir, stamp, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stamp, "policy.default.cedar"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(stamp, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "policy.default.cedar")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "policy.default.cedar"), link); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLiveConfigMapVolume: a policy folder mounted from a Kubernetes
// ConfigMap (files behind a ..data link to a timestamped folder) loads,
// and an update of the ConfigMap, which swaps the link, is reloaded.
func TestLiveConfigMapVolume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	configMapVolume(t, dir, "..2026_11_28_08_00_00.000000001", allowSet)
	live, err := NewLive(dir)
	if err != nil {
		t.Fatalf("a ConfigMap volume: %v", err)
	}
	if swapped, err := live.Reload(false); swapped || err != nil {
		t.Fatalf("unchanged ConfigMap volume: %v, %v", swapped, err)
	}
	configMapVolume(t, dir, "..2026_11_28_08_05_00.000000002", denySet)
	if swapped, err := live.Reload(false); !swapped || err != nil {
		t.Fatalf("updated ConfigMap volume: %v, %v", swapped, err)
	}
	if d := live.Decide(context.Background(), call("workspace.readFile")); d.Allow {
		t.Fatal("the updated set is not in force")
	}
}
