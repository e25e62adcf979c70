package evidence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// testLogConfig returns the configuration of instance "gw-1"'s log,
// signed and sealed by a fresh key.
func testLogConfig(t testing.TB, s Store) LogConfig {
	t.Helper()
	cfg := signedLogConfig(t, s, newSigner(t))
	cfg.MaxPending = 100
	return cfg
}

// logEntries reads back every entry of instance gw-1's log from its
// newest checkpoint, checking the tiles on the way.
func logEntries(t *testing.T, s Store) []string {
	t.Helper()
	ctx := context.Background()
	keys, _ := s.List(ctx, LogPrefix("gw-1")+checkpointDir)
	if len(keys) == 0 {
		return nil
	}
	data, _ := s.Get(ctx, keys[len(keys)-1])
	_, size, root, err := checkpointBody(data)
	if err != nil {
		t.Fatal(err)
	}
	tree := tlog.NewTree()
	var out []string
	for i := uint64(0); i < size; i += 256 {
		width := min(256, size-i)
		path := LogPrefix("gw-1") + "tile/entries/" + fmt.Sprintf("%03d", i/256)
		if width < 256 {
			path += fmt.Sprintf(".p/%d", width)
		}
		bundle, _ := s.Get(ctx, path)
		entries, err := tlog.ParseBundle(bundle, int(width))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, e := range entries {
			out = append(out, string(e))
			if err := tree.Append(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tree.Root() != root {
		t.Fatalf("the bundles do not hash to the checkpoint of size %d", size)
	}
	return out
}

func appendAll(l *LogWriter, names ...string) {
	for _, n := range names {
		l.Append([]byte(n))
	}
}

func TestLogSequencesAndPublishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore()
	cfg := testLogConfig(t, s)
	l, err := OpenLog(ctx, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 600 {
		want = append(want, fmt.Sprint("e", i))
		l.Append([]byte(want[i]))
		if i%250 == 0 {
			if err := l.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logEntries(t, s); !slices.Equal(got, want) {
		t.Fatalf("log holds %d entries, want the %d appended in order", len(got), len(want))
	}
	if _, err := s.Get(ctx, seqKey(LogPrefix("gw-1")+leaseDir, 1)+closedSuffix); err != nil {
		t.Fatalf("a clean close left no marker: %v", err)
	}
	// The next process continues the same log.
	l2, err := OpenLog(ctx, s, cfg)
	if err != nil || l2.Epoch() != 2 || l2.Size() != 600 {
		t.Fatalf("reopened: epoch %d size %d err %v", l2.Epoch(), l2.Size(), err)
	}
}

// flakyLogStore refuses the Puts whose key contains fail, and stores the
// batch but reports a timeout when lose is set: the outcome a caller
// cannot tell from a failure.
type flakyLogStore struct {
	Store
	fail string
	lose atomic.Bool
}

func (f *flakyLogStore) Put(ctx context.Context, key string, data []byte) error {
	if f.fail != "" && strings.Contains(key, f.fail) {
		return errors.New("store unavailable")
	}
	if f.lose.Load() && strings.Contains(key, batchDir) {
		_ = f.Store.Put(ctx, key, data)
		return context.DeadlineExceeded
	}
	return f.Store.Put(ctx, key, data)
}

// A process killed after storing a batch but before its tiles and
// checkpoint loses nothing: the next one integrates the batch.
func TestLogNextProcessIntegratesStoredBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	dying := &flakyLogStore{Store: mem, fail: "/tile/"}
	l, err := OpenLog(ctx, dying, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(l, "a", "b", "c")
	if err := l.Flush(ctx); err == nil {
		t.Fatal("tiles were stored through a failing store")
	}
	if got := logEntries(t, mem); got != nil {
		t.Fatalf("a checkpoint was published before its tiles: %v", got)
	}
	next, err := OpenLog(ctx, mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(next, "d")
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logEntries(t, mem); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("log = %v", got)
	}
}

// A batch stored although its Put timed out is found at the next flush,
// whose batch has grown meanwhile: every entry is logged exactly once.
func TestLogBatchOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	s := &flakyLogStore{Store: mem}
	l, err := OpenLog(ctx, s, testLogConfig(t, mem))
	if err != nil {
		t.Fatal(err)
	}
	appendAll(l, "a", "b")
	s.lose.Store(true)
	if err := l.Flush(ctx); err == nil {
		t.Fatal("a timed-out batch was reported stored")
	}
	s.lose.Store(false)
	appendAll(l, "c")
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logEntries(t, mem); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("log = %v", got)
	}
}

// Two processes with one instance name: the older one's batches are kept,
// the newer one takes over, and the older one is fenced and refuses
// calls rather than run them unlogged.
func TestLogNewerProcessFencesOlder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore()
	cfg := testLogConfig(t, s)
	old, err := OpenLog(ctx, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := OpenLog(ctx, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(old, "old-1")
	if err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	appendAll(newer, "new-1")
	if err := newer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	appendAll(old, "old-2")
	if err := old.Flush(ctx); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("the older process was not fenced: %v", err)
	}
	if err := old.Ready(); !errors.Is(err, ErrLogFenced) {
		t.Fatalf("a fenced process still takes calls: %v", err)
	}
	if err := newer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logEntries(t, s); !slices.Equal(got, []string{"old-1", "new-1"}) {
		t.Fatalf("log = %v", got)
	}
}

func TestLogBacklogRefusesCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := NewMemoryStore()
	cfg := testLogConfig(t, mem)
	cfg.MaxPending = 3
	l, err := OpenLog(ctx, &flakyLogStore{Store: mem, fail: batchDir}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAll(l, "a", "b")
	if err := l.Ready(); err != nil {
		t.Fatal(err)
	}
	_ = l.Flush(ctx)
	appendAll(l, "c")
	if err := l.Ready(); !errors.Is(err, ErrLogBacklog) {
		t.Fatalf("Ready with a full backlog: %v", err)
	}
}

func TestLogOriginAndInstanceNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore()
	a, err := LogOrigin(ctx, s, "gw-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := LogOrigin(ctx, s, "gw-1")
	if a != b || !strings.HasPrefix(a, "toolgate.log/") || !strings.HasSuffix(a, "/gw-1") {
		t.Fatalf("origins %q, %q", a, b)
	}
	for _, bad := range []string{"", "a b", "a+b", "a/b", "..", "x\ny"} {
		if _, err := LogOrigin(ctx, s, bad); err == nil {
			t.Errorf("instance name %q accepted", bad)
		}
	}
}

// A batch planted in the log's next slot, one that does not extend its
// tree, fences the writer at once instead of wedging it.
func TestLogPlantedBatchFences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewMemoryStore()
	l, err := OpenLog(ctx, s, testLogConfig(t, s))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, seqKey(LogPrefix("gw-1")+batchDir, 0), []byte(`{"v":1,"origin":"elsewhere","epoch":9,"start":0}`))
	appendAll(l, "a")
	if err := l.Flush(ctx); !errors.Is(err, ErrLogTampered) {
		t.Fatalf("flush over a planted batch: %v", err)
	}
	if err := l.Ready(); !errors.Is(err, ErrLogTampered) {
		t.Fatalf("Ready: %v", err)
	}
}
