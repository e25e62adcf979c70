package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

type spillRecord struct {
	key   string
	value string
}

// sortSpilled adds recs to a sorter holding inMemory records in memory
// and merging fanIn runs at once, and returns what sorted yields.
func sortSpilled(t *testing.T, dir string, recs []spillRecord, inMemory, fanIn int) []spillRecord {
	t.Helper()
	s, err := newSpillSorter(dir, inMemory)
	if err != nil {
		t.Fatal(err)
	}
	s.fanIn = fanIn
	defer s.close()
	buf := make([]byte, 0, 64)
	for _, r := range recs {
		// One buffer for every value: add must copy.
		buf = append(buf[:0], r.value...)
		if err := s.add(r.key, buf); err != nil {
			t.Fatalf("add = %v", err)
		}
	}
	var got []spillRecord
	if err := s.sorted(context.Background(), func(k string, v []byte) error {
		got = append(got, spillRecord{k, string(v)})
		return nil
	}); err != nil {
		t.Fatalf("sorted = %v", err)
	}
	return got
}

// randomRecords makes n records whose keys are drawn from few values, so
// that many are equal, and may hold any bytes.
func randomRecords(rng *rand.Rand, n int) []spillRecord {
	keys := make([]string, 1+rng.IntN(n+1))
	for i := range keys {
		b := make([]byte, rng.IntN(6))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		keys[i] = string(b)
	}
	recs := make([]spillRecord, n)
	for i := range recs {
		recs[i] = spillRecord{key: keys[rng.IntN(len(keys))], value: fmt.Sprintf("v%d-%s", i, strings.Repeat("x", rng.IntN(40)))}
	}
	return recs
}

func TestSpillSorterSortsLikeAStableSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 42))
	dir := t.TempDir()
	for i := range 120 {
		n := rng.IntN(120)
		if i < 5 {
			n = i // none, one, and a few records
		}
		inMemory, fanIn := 1+rng.IntN(9), 2+rng.IntN(4)
		recs := randomRecords(rng, n)
		want := slices.Clone(recs)
		sort.SliceStable(want, func(a, b int) bool { return want[a].key < want[b].key })
		got := sortSpilled(t, dir, recs, inMemory, fanIn)
		if !slices.Equal(got, want) {
			t.Fatalf("%d records, %d in memory, fan-in %d: sorted = %q, want %q", n, inMemory, fanIn, got, want)
		}
	}
}

func TestSpillSorterLeavesNoFileBehind(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name        string
		n, inMemory int
		wantSpills  bool
	}{
		{"no record", 0, 4, false},
		{"fewer records than fit in memory", 3, 4, false},
		{"exactly one full run", 4, 4, true},
		{"one run and a partial batch", 6, 4, true},
		{"many runs merged in groups", 100, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := newSpillSorter(dir, tc.inMemory)
			if err != nil {
				t.Fatal(err)
			}
			s.fanIn = 2
			for _, r := range randomRecords(rng, tc.n) {
				if err := s.add(r.key, []byte(r.value)); err != nil {
					t.Fatal(err)
				}
			}
			if spilled := len(s.runs) > 0; spilled != tc.wantSpills {
				t.Errorf("%d records with %d in memory: wrote runs %v, want %v", tc.n, tc.inMemory, spilled, tc.wantSpills)
			}
			n := 0
			if err := s.sorted(context.Background(), func(string, []byte) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != tc.n {
				t.Errorf("sorted yielded %d records, want %d", n, tc.n)
			}
			if err := errors.Join(s.close(), s.close()); err != nil {
				t.Fatalf("close, twice = %v", err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("after close the folder holds %v, want nothing", left)
			}
		})
	}
}

func TestSpillSorterReportsADamagedRun(t *testing.T) {
	t.Parallel()
	// A run file cut short or overwritten with a huge length while the
	// sort runs (a full disk, another process) must fail the sort, not
	// yield fewer records or make the sorter allocate the length.
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, name string)
		want   error
	}{
		{"cut short", func(t *testing.T, name string) {
			info, err := os.Stat(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(name, info.Size()-1); err != nil {
				t.Fatal(err)
			}
		}, io.ErrUnexpectedEOF},
		{"a record claims a terabyte", func(t *testing.T, name string) {
			huge := []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0}
			if err := os.WriteFile(name, huge, 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := newSpillSorter(t.TempDir(), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			for _, k := range []string{"c", "a", "b", "d", "e"} {
				if err := s.add(k, []byte("value")); err != nil {
					t.Fatal(err)
				}
			}
			tc.damage(t, s.runs[1])
			var got []string
			err = s.sorted(context.Background(), func(k string, _ []byte) error { got = append(got, k); return nil })
			if err == nil || !strings.Contains(err.Error(), "damaged") || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("sorted = %v after yielding %q, want an error naming the damaged run", err, got)
			}
		})
	}
}

func TestSpillSorterStopsAtTheFirstErrorAndACanceledContext(t *testing.T) {
	t.Parallel()
	s, err := newSpillSorter(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for _, k := range []string{"c", "a", "b"} {
		if err := s.add(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := s.sorted(context.Background(), func(string, []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("sorted with a failing fn: %v after %d records, want fn's error after 1", err, n)
	}
	if err := s.sorted(context.Background(), func(string, []byte) error { return nil }); err == nil {
		t.Error("a second sorted succeeded, want an error")
	}
	if err := s.add("d", nil); err == nil {
		t.Error("add after sorted succeeded, want an error")
	}

	s2, err := newSpillSorter(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.close()
	for _, k := range []string{"c", "a", "b"} {
		if err := s2.add(k, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s2.sorted(ctx, func(string, []byte) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("sorted with a canceled context = %v, want context.Canceled", err)
	}
}

func TestSpillSorterRefusesARecordLargerThanItsLimit(t *testing.T) {
	t.Parallel()
	s, err := newSpillSorter(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.maxField = 4
	for _, tc := range []struct{ key, value string }{{"12345", ""}, {"k", "12345"}} {
		if err := s.add(tc.key, []byte(tc.value)); err == nil {
			t.Errorf("add(%q, %q) with a 4-byte limit succeeded", tc.key, tc.value)
		}
	}
	if err := s.add("1234", []byte("1234")); err != nil {
		t.Errorf("add of a record at the limit = %v", err)
	}
}

func TestNewSpillSorterRejectsBadSettings(t *testing.T) {
	t.Parallel()
	if _, err := newSpillSorter(t.TempDir(), 0); err == nil {
		t.Error("newSpillSorter with 0 records in memory succeeded")
	}
	if _, err := newSpillSorter("", 10); err == nil {
		t.Error("newSpillSorter without a folder succeeded")
	}
}

// BenchmarkSpillSorterMemory sorts 10,000, 100,000 and 1,000,000 records
// of the size of a log entry with runs of 64Ki records, and reports the
// largest live heap sampled while adding and reading them back. Below one
// run the heap grows with the records; above it, it must not. The bytes
// allocated include the key strings that the benchmark itself makes and
// that sorted hands back. Run it with -benchtime=1x.
func BenchmarkSpillSorterMemory(b *testing.B) {
	const run = 64 << 10
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for b.Loop() {
				peak = max(peak, spillOnce(b, n, run))
			}
			b.ReportMetric(float64(peak), "max-live-heap-B")
			b.ReportMetric(float64(peak)/float64(n), "max-live-heap-B/record")
		})
	}
}

// spillOnce sorts n generated records and returns the largest live heap,
// above what was live before, that it sampled. Each sample collects
// garbage first, so that it measures what the sorter holds rather than
// when the collector last ran.
func spillOnce(b *testing.B, n, run int) uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, uint64(0)
	sample := func(i int) {
		if i%(8<<10) == 8<<10-1 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc-min(base, ms.HeapAlloc))
		}
	}
	s, err := newSpillSorter(b.TempDir(), run)
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	value := []byte(strings.Repeat("v", 300))
	key := make([]byte, 0, 64)
	for i := range n {
		key = fmt.Appendf(key[:0], "requests/%016x/claim", rng.Uint64())
		if err := s.add(string(key), value); err != nil {
			b.Fatal(err)
		}
		sample(i)
	}
	i := 0
	if err := s.sorted(context.Background(), func(string, []byte) error { sample(i); i++; return nil }); err != nil {
		b.Fatal(err)
	}
	return peak
}
