package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
)

// manyEdits returns n edits replacing old by repl.
func manyEdits(n int, old, repl string) []any {
	edits := make([]any, n)
	for i := range edits {
		edits[i] = map[string]any{"oldContent": old, "newContent": repl}
	}
	return edits
}

// callOf is a call of the workspace operation op.
func callOf(op string, a map[string]any) drivers.Call {
	return drivers.Call{RequestID: "req-1", ToolID: "workspace." + op, Target: op, Args: a}
}

// bigFile writes a file of size bytes under root whose only "M" is the
// last byte, so that every search for it scans the whole file.
func bigFile(t *testing.T, root, name string, size int) string {
	t.Helper()
	content := strings.Repeat("a", size-1) + "M"
	write(t, root, name, content, 0o640)
	return content
}

func TestEditFileWorkIsBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		size     int   // of big.txt
		edits    []any // applied to big.txt
		wantExit int
		wantCat  string
		wantErr  string
	}{
		{
			name: "a thousand edits on a 10 MB file are refused before any work",
			size: 10 << 20, edits: manyEdits(1000, "M", "N"),
			wantExit: 2, wantCat: "validation", wantErr: "edit budget exceeded: 1000 edits on a file of 10485760 bytes exceed the budget of 268435456 bytes",
		},
		{
			name: "more edits than the maximum are refused whatever the file",
			size: 10, edits: manyEdits(maxEdits+1, "M", "M"),
			wantExit: 2, wantCat: "validation", wantErr: "edits must contain at most 1000 edits, got 1001",
		},
		{
			name: "a file grown by its first edit cannot make the rest scan past the budget",
			size: 10, edits: append([]any{map[string]any{"oldContent": "M", "newContent": strings.Repeat("g", 9<<20) + "M"}},
				manyEdits(999, "M", "M")...),
			wantExit: 2, wantCat: "validation", wantErr: "edits[29] would scan more than 268435456 bytes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			before := bigFile(t, root, "big.txt", tt.size)
			start := time.Now()
			res := run(t, d, "editFile", map[string]any{"path": "big.txt", "edits": tt.edits})
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the refused edit took %v", took)
			}
			wantFailure(t, res, tt.wantExit, tt.wantCat, tt.wantErr)
			if got := readOrEmpty(t, root, "big.txt"); got != before {
				t.Errorf("big.txt changed (%d bytes) after a refused edit", len(got))
			}
			assertNoTempFiles(t, root)
		})
	}
}

func TestEditFileWithinBudgetCompletes(t *testing.T) {
	// Not parallel: it bounds wall-clock time, which tests sharing the
	// machine's two cores would take from it.
	// 25 edits on a 10 MB file, each scanning all of it: the most the
	// budget allows, and still prompt.
	d, root := newTestDriver(t)
	bigFile(t, root, "big.txt", 10<<20-2)
	edits := manyEdits(24, "M", "M")
	edits = append(edits, map[string]any{"oldContent": "M", "newContent": "END"})
	start := time.Now()
	data := wantSuccess(t, run(t, d, "editFile", map[string]any{"path": "big.txt", "edits": edits}))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("an edit within budget took %v", took)
	}
	if data["editsApplied"] != 25 {
		t.Errorf("editsApplied = %v", data["editsApplied"])
	}
	if got := readOrEmpty(t, root, "big.txt"); len(got) != 10<<20 || !strings.HasSuffix(got, "aEND") {
		t.Errorf("big.txt is %d bytes ending %q", len(got), got[len(got)-4:])
	}
}

func TestEditFileDeadline(t *testing.T) {
	t.Parallel()
	t.Run("an edit waiting for a busy workspace gives up at its deadline", func(t *testing.T) {
		d, root := newTestDriver(t)
		write(t, root, "f.txt", "old", 0o640)
		unlock, err := d.lockWrites(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		res := runCtx(t, ctx, d, "editFile", map[string]any{"path": "f.txt", "edits": manyEdits(1, "old", "new")})
		// Without the deadline it would wait for the lock until the test ends.
		if took := time.Since(start); took > 8*time.Second {
			t.Errorf("the waiting edit returned after %v, want about its 200ms deadline", took)
		}
		wantFailure(t, res, 124, "timeout", "stayed busy with other writes until this call's deadline")
		if got := readOrEmpty(t, root, "f.txt"); got != "old" {
			t.Errorf("f.txt = %q", got)
		}
	})
	t.Run("an edit past its deadline writes nothing", func(t *testing.T) {
		d, root := newTestDriver(t)
		write(t, root, "f.txt", "old", 0o640)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := runCtx(t, ctx, d, "editFile", map[string]any{"path": "f.txt", "edits": manyEdits(1, "old", "new")})
		wantFailure(t, res, 124, "timeout", "")
		if got := readOrEmpty(t, root, "f.txt"); got != "old" {
			t.Errorf("f.txt = %q after a cancelled edit", got)
		}
	})
	t.Run("the edit loop stops at the deadline", func(t *testing.T) {
		content := []byte(strings.Repeat("a", 1<<20) + "M")
		ctx, cancel := context.WithCancel(context.Background())
		edits := make([]edit, 200)
		for i := range edits {
			edits[i] = edit{old: "M", new: "M"}
		}
		cancel()
		if _, err := applyEdits(ctx, "f.txt", content, edits); err == nil {
			t.Fatal("applyEdits ran its edits past a cancelled context")
		}
	})
}

func TestEditFileAttackDoesNotStarveOtherCalls(t *testing.T) {
	// Not parallel: it bounds wall-clock time, which tests sharing the
	// machine's two cores would take from it.
	// While callers hammer a 10 MB file with the largest edits the budget
	// allows, and with edits over it, other writes and reads complete.
	d, root := newTestDriver(t)
	bigFile(t, root, "big.txt", 10<<20)
	write(t, root, "small.txt", "hello", 0o640)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attacking sync.WaitGroup // until each attacker's first edit ran
	for _, edits := range [][]any{manyEdits(1000, "M", "M"), manyEdits(25, "M", "M")} {
		wg.Add(1)
		attacking.Add(1)
		go func() {
			defer wg.Done()
			for first := true; ; first = false {
				select {
				case <-stop:
					return
				default:
				}
				d.Run(context.Background(), callOf("editFile", map[string]any{"path": "big.txt", "edits": edits}))
				if first {
					attacking.Done()
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	attacking.Wait() // the attack holds the file's lock from now on
	for i := range 3 {
		start := time.Now()
		wantSuccess(t, run(t, d, "createFile", map[string]any{"path": "new.txt", "content": "x", "overwrite": true}))
		if got := readOrEmpty(t, root, "small.txt"); got != "hello" {
			t.Fatalf("small.txt = %q", got)
		}
		wantSuccess(t, run(t, d, "readFile", map[string]any{"path": "small.txt"}))
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("round %d: createFile and readFile took %v during the attack", i, took)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "new.txt")); err != nil {
		t.Error(err)
	}
}
