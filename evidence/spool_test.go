package evidence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// recordingStore remembers the order of successful Puts and can be made
// to fail.
type recordingStore struct {
	*MemoryStore
	mu   sync.Mutex
	puts []string
	fail error
}

func (r *recordingStore) Put(ctx context.Context, key string, data []byte) error {
	if r.fail != nil {
		return r.fail
	}
	if err := r.MemoryStore.Put(ctx, key, data); err != nil {
		return err
	}
	r.mu.Lock()
	r.puts = append(r.puts, key)
	r.mu.Unlock()
	return nil
}

func openTestSpool(t *testing.T) *Spool {
	t.Helper()
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSpoolFlushMovesManifestLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sp := openTestSpool(t)
	for _, k := range []string{
		"requests/r1/manifest.json", "requests/r1/tool_result.json", "requests/r1/response.json",
		"requests/r2/manifest.json",
	} {
		mustPut(t, sp, k, []byte(k))
	}
	dst := &recordingStore{MemoryStore: NewMemoryStore()}
	n, err := sp.Flush(ctx, dst)
	if err != nil || n != 4 {
		t.Fatalf("Flush = %d, %v; want 4 moved", n, err)
	}
	if i, j := slices.Index(dst.puts, "requests/r1/manifest.json"), slices.Index(dst.puts, "requests/r1/tool_result.json"); i < j {
		t.Errorf("manifest flushed before the artifacts it lists: %v", dst.puts)
	}
	if left := mustList(t, sp, ""); len(left) != 0 {
		t.Errorf("spool still holds %v after a full flush", left)
	}
	if got := mustGet(t, dst, "requests/r1/response.json"); string(got) != "requests/r1/response.json" {
		t.Errorf("flushed bytes = %q", got)
	}
}

func TestSpoolFlushFailuresKeepArtifacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sp := openTestSpool(t)
	mustPut(t, sp, "requests/r1/response.json", []byte("mine"))
	mustPut(t, sp, "requests/r1/manifest.json", []byte("m"))

	down := &recordingStore{MemoryStore: NewMemoryStore(), fail: errors.New("connection refused")}
	if n, err := sp.Flush(ctx, down); err == nil || n != 0 {
		t.Fatalf("Flush to a failing store = %d, %v; want an error and nothing moved", n, err)
	}
	if left := mustList(t, sp, ""); len(left) != 2 {
		t.Fatalf("spool lost artifacts on a failed flush: %v", left)
	}

	conflicting := NewMemoryStore()
	mustPut(t, conflicting, "requests/r1/response.json", []byte("theirs"))
	if _, err := sp.Flush(ctx, conflicting); !errors.Is(err, errConflict) {
		t.Fatalf("Flush over different stored bytes = %v, want a conflict", err)
	}
	if _, err := sp.Get(ctx, "requests/r1/response.json"); err != nil {
		t.Errorf("a conflicting artifact must stay in the spool: %v", err)
	}
	if _, err := conflicting.Get(ctx, "requests/r1/manifest.json"); !errors.Is(err, ErrNotExist) {
		t.Errorf("the manifest was flushed while its request's artifacts were stuck")
	}

	same := NewMemoryStore()
	mustPut(t, same, "requests/r1/response.json", []byte("mine"))
	if n, err := sp.Flush(ctx, same); err != nil || n != 2 {
		t.Fatalf("Flush over identical stored bytes = %d, %v; want both counted as flushed", n, err)
	}
}

func TestSpoolSurvivesReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	sp, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, sp, "requests/r9/tool_result.json", []byte("x"))
	sp.Close()
	sp, err = OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	dst := NewMemoryStore()
	if n, err := sp.Flush(ctx, dst); err != nil || n != 1 {
		t.Fatalf("Flush after reopening = %d, %v", n, err)
	}
}

// TestSpoolFlushOne: a reader that must see one spooled record in the
// store moves it alone; a key not spooled, or spooled and moved already,
// is ErrNotExist.
func TestSpoolFlushOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key, other = "requests/r1/not_dispatched.json", "requests/r1/response.json"
	tests := []struct {
		name    string
		prepare func(t *testing.T, sp *Spool, dst Store)
		key     string
		wantErr error
	}{
		{"moves the key and nothing else", nil, key, nil},
		{"a key not spooled", nil, "requests/r2/not_dispatched.json", ErrNotExist},
		{"already moved by another flush", func(t *testing.T, sp *Spool, dst Store) {
			if err := sp.FlushOne(ctx, dst, key); err != nil {
				t.Fatal(err)
			}
		}, key, ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := openTestSpool(t)
			for _, k := range []string{key, other} {
				if err := sp.Put(ctx, k, []byte(`{"k":"`+k+`"}`)); err != nil {
					t.Fatal(err)
				}
			}
			dst := NewMemoryStore()
			if tc.prepare != nil {
				tc.prepare(t, sp, dst)
			}
			if err := sp.FlushOne(ctx, dst, tc.key); !errors.Is(err, tc.wantErr) {
				t.Fatalf("FlushOne = %v, want %v", err, tc.wantErr)
			}
			if _, err := dst.Get(ctx, key); err != nil && tc.key == key {
				t.Fatalf("the key is not in the store: %v", err)
			}
			if _, err := dst.Get(ctx, other); !errors.Is(err, ErrNotExist) {
				t.Errorf("another spooled key reached the store: %v", err)
			}
			if spooled, _ := sp.List(ctx, "requests/r1/"); !slices.Contains(spooled, other) {
				t.Errorf("the spool lost the other key: %v", spooled)
			}
		})
	}
}
