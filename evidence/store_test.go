package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// storeFactories lists every Store implementation; the conformance tests
// run against each.
var storeFactories = []struct {
	name string
	new  func(t testing.TB) Store
}{
	{"file", func(t testing.TB) Store { return newTestFileStore(t, t.TempDir()) }},
	{"memory", func(testing.TB) Store { return NewMemoryStore() }},
}

func newTestFileStore(t testing.TB, dir string) *FileStore {
	t.Helper()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatalf("NewFileStore(%q) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustPut(t testing.TB, s Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q) = %v", key, err)
	}
}

func mustGet(t testing.TB, s Store, key string) []byte {
	t.Helper()
	data, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v", key, err)
	}
	return data
}

func mustList(t testing.TB, s Store, prefix string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q) = %v", prefix, err)
	}
	return keys
}

func TestStoreConformance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s Store)
	}{
		{"put then get returns the data", func(t *testing.T, s Store) {
			mustPut(t, s, "requests/r1/request.json", []byte(`{"a":1}`))
			if got := mustGet(t, s, "requests/r1/request.json"); string(got) != `{"a":1}` {
				t.Fatalf("Get = %q, want %q", got, `{"a":1}`)
			}
		}},
		{"empty data is stored", func(t *testing.T, s Store) {
			mustPut(t, s, "k", nil)
			if got := mustGet(t, s, "k"); len(got) != 0 {
				t.Fatalf("Get = %q, want empty", got)
			}
		}},
		{"second put is refused and keeps the first data", func(t *testing.T, s Store) {
			mustPut(t, s, "requests/r1/response.json", []byte("first"))
			err := s.Put(ctx, "requests/r1/response.json", []byte("second"))
			if !errors.Is(err, ErrExist) {
				t.Fatalf("second Put = %v, want ErrExist", err)
			}
			if got := mustGet(t, s, "requests/r1/response.json"); string(got) != "first" {
				t.Fatalf("Get = %q, want %q", got, "first")
			}
		}},
		{"get of a missing key is ErrNotExist", func(t *testing.T, s Store) {
			if _, err := s.Get(ctx, "requests/none/request.json"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Get = %v, want ErrNotExist", err)
			}
		}},
		{"get of a key's parent is ErrNotExist", func(t *testing.T, s Store) {
			mustPut(t, s, "requests/r1/request.json", []byte("x"))
			if _, err := s.Get(ctx, "requests/r1"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Get(parent) = %v, want ErrNotExist", err)
			}
		}},
		{"get below a stored key is ErrNotExist", func(t *testing.T, s Store) {
			mustPut(t, s, "requests/r1/request.json", []byte("x"))
			if _, err := s.Get(ctx, "requests/r1/request.json/x"); !errors.Is(err, ErrNotExist) {
				t.Fatalf("Get(child) = %v, want ErrNotExist", err)
			}
		}},
		{"invalid keys are rejected", func(t *testing.T, s Store) {
			for _, key := range []string{"", "../x", "/abs", "a//b", `a\b`, "requests/r1/.tmp-x"} {
				if err := s.Put(ctx, key, []byte("x")); !errors.Is(err, ErrInvalidKey) {
					t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
				}
				if _, err := s.Get(ctx, key); !errors.Is(err, ErrInvalidKey) {
					t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
				}
			}
			if keys := mustList(t, s, ""); len(keys) != 0 {
				t.Errorf("List after rejected puts = %q, want none", keys)
			}
		}},
		{"put copies its input and get returns a copy", func(t *testing.T, s Store) {
			data := []byte("original")
			mustPut(t, s, "k", data)
			copy(data, "XXXXXXXX")
			got := mustGet(t, s, "k")
			copy(got, "YYYYYYYY")
			if again := mustGet(t, s, "k"); string(again) != "original" {
				t.Fatalf("Get = %q after mutating buffers, want %q", again, "original")
			}
		}},
		{"walk visits keys in list order and stops on error", func(t *testing.T, s Store) {
			for _, k := range []string{"a/b", "a.b", "a/c/d", "a0", "b", "requests/x/1", "requests/x.y/2"} {
				mustPut(t, s, k, []byte("x"))
			}
			for _, prefix := range []string{"", "a", "a/", "requests/x", "requests/x/", "zzz"} {
				var walked []string
				if err := s.Walk(ctx, prefix, func(k string) error { walked = append(walked, k); return nil }); err != nil {
					t.Fatalf("Walk(%q) = %v", prefix, err)
				}
				if want := mustList(t, s, prefix); !slices.Equal(walked, want) || !slices.IsSorted(walked) {
					t.Errorf("Walk(%q) visited %q, want %q in ascending order", prefix, walked, want)
				}
			}
			stop := errors.New("stop")
			n := 0
			err := s.Walk(ctx, "", func(string) error { n++; return stop })
			if err != stop || n != 1 {
				t.Errorf("Walk with a failing fn: err %v after %d keys, want fn's error after 1", err, n)
			}
		}},
		{"list is sorted and matches prefixes as strings", func(t *testing.T, s Store) {
			for _, k := range []string{
				"requests/r2/request.json", "requests/r1/response.json", "requests/r1/request.json",
				"requests/r10/request.json", "requests/r1.b/x", "requests/r1/sub/deep.json", "other/r1/x",
			} {
				mustPut(t, s, k, []byte(k))
			}
			for _, tc := range []struct {
				prefix string
				want   []string
			}{
				{"requests/r1/", []string{"requests/r1/request.json", "requests/r1/response.json", "requests/r1/sub/deep.json"}},
				{"requests/r1", []string{"requests/r1.b/x", "requests/r1/request.json", "requests/r1/response.json", "requests/r1/sub/deep.json", "requests/r10/request.json"}},
				{"requests/r1/re", []string{"requests/r1/request.json", "requests/r1/response.json"}},
				{"requests/r1/request.json", []string{"requests/r1/request.json"}},
				{"requests/r", []string{"requests/r1.b/x", "requests/r1/request.json", "requests/r1/response.json", "requests/r1/sub/deep.json", "requests/r10/request.json", "requests/r2/request.json"}},
				{"", []string{"other/r1/x", "requests/r1.b/x", "requests/r1/request.json", "requests/r1/response.json", "requests/r1/sub/deep.json", "requests/r10/request.json", "requests/r2/request.json"}},
				{"requests/r3/", nil},
				{"nothing", nil},
				{"requests/r1/request.json/", nil},
				{"../", nil},
				{"/requests/", nil},
				{"requests//", nil},
			} {
				if got := mustList(t, s, tc.prefix); !slices.Equal(got, tc.want) {
					t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
				}
			}
		}},
		{"list segments names the folders directly under a prefix", func(t *testing.T, s Store) {
			for _, k := range []string{
				"log/bucket-id", "log/gw-a/checkpoint/1", "log/gw-a/tile/0/000", "log/gw-b/lease/1",
				"log/gw-b.c/x", "log/gw-bb/x", "logs/gw-z/x", "requests/r1/request.json",
			} {
				mustPut(t, s, k, []byte(k))
			}
			for _, tc := range []struct {
				prefix string
				want   []string
			}{
				{"log/", []string{"gw-a", "gw-b", "gw-b.c", "gw-bb"}},
				{"log/gw-a/", []string{"checkpoint", "tile"}},
				{"", []string{"log", "logs", "requests"}},
				{"log/gw-a/checkpoint/", nil},
				{"nothing/", nil},
			} {
				got, err := ListSegments(ctx, s, tc.prefix)
				if err != nil || !slices.Equal(got, tc.want) {
					t.Errorf("ListSegments(%q) = %q, %v; want %q", tc.prefix, got, err, tc.want)
				}
				var walked []string
				if err := s.Walk(ctx, tc.prefix, func(k string) error { walked = append(walked, k); return nil }); err != nil {
					t.Fatal(err)
				}
				if fallback, _ := ListSegments(ctx, readerOnly{s}, tc.prefix); !slices.Equal(fallback, tc.want) {
					t.Errorf("ListSegments(%q) by walking = %q, want %q", tc.prefix, fallback, tc.want)
				}
			}
		}},
		{"canceled context fails every call", func(t *testing.T, s Store) {
			mustPut(t, s, "k", []byte("x"))
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Put(cctx, "k2", []byte("x")); !errors.Is(err, context.Canceled) {
				t.Errorf("Put = %v, want context.Canceled", err)
			}
			if _, err := s.Get(cctx, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Get = %v, want context.Canceled", err)
			}
			if _, err := s.List(cctx, ""); !errors.Is(err, context.Canceled) {
				t.Errorf("List = %v, want context.Canceled", err)
			}
			if _, err := s.Get(ctx, "k2"); !errors.Is(err, ErrNotExist) {
				t.Errorf("Get(k2) after canceled Put = %v, want ErrNotExist", err)
			}
		}},
		{"concurrent puts of one key have exactly one winner", func(t *testing.T, s Store) {
			raceOneKey(t, s, "requests/race/request.json", 64, func(i int) []byte { return fmt.Appendf(nil, "writer-%d", i) })
		}},
		{"concurrent puts of distinct keys all succeed", func(t *testing.T, s Store) {
			const writers = 32
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i := range writers {
				wg.Go(func() { errs[i] = s.Put(ctx, Key(fmt.Sprintf("r%d", i%4), fmt.Sprintf("a%02d", i)), []byte("x")) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if keys := mustList(t, s, "requests/"); len(keys) != writers {
				t.Fatalf("List = %d keys, want %d", len(keys), writers)
			}
		}},
	}
	for _, f := range storeFactories {
		t.Run(f.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) { tt.run(t, f.new(t)) })
			}
		})
	}
}

func BenchmarkPut(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 1024)
	ctx := context.Background()
	for _, f := range storeFactories {
		b.Run(f.name, func(b *testing.B) {
			s := f.new(b)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.Put(ctx, Key(fmt.Sprintf("r%d", i), ArtifactRequest), data); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// raceOneKey has writers goroutines Put different data under one key at
// once and checks that exactly one succeeds, the others get ErrExist, and
// the winner's data is stored.
func raceOneKey(t *testing.T, s Store, key string, writers int, data func(i int) []byte) {
	t.Helper()
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() { errs[i] = s.Put(context.Background(), key, data(i)) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, ErrExist):
			t.Fatalf("writer %d: Put = %v, want nil or ErrExist", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer succeeded")
	}
	if got := mustGet(t, s, key); !bytes.Equal(got, data(winner)) {
		t.Fatalf("stored data is not the winner's (writer %d)", winner)
	}
}

// readerOnly hides every optional interface of a store.
type readerOnly struct{ r Reader }

func (o readerOnly) Get(ctx context.Context, key string) ([]byte, error) { return o.r.Get(ctx, key) }
func (o readerOnly) List(ctx context.Context, prefix string) ([]string, error) {
	return o.r.List(ctx, prefix)
}
func (o readerOnly) Walk(ctx context.Context, prefix string, fn func(string) error) error {
	return o.r.Walk(ctx, prefix, fn)
}
