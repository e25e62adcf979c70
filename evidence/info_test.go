package evidence

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// infoFactories lists every InfoWalker: the stores of storeFactories and
// the wrappers that must pass sizes and times through.
func infoFactories() []struct {
	name string
	new  func(t testing.TB) Store
} {
	all := slices.Clone(storeFactories)
	return append(all, []struct {
		name string
		new  func(t testing.TB) Store
	}{
		{"spool", func(t testing.TB) Store {
			s, err := OpenSpool(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"op-timeout over file", func(t testing.TB) Store {
			return WithOpTimeout(newTestFileStore(t, t.TempDir()), time.Minute)
		}},
		{"op-timeout over memory", func(testing.TB) Store {
			return WithOpTimeout(NewMemoryStore(), time.Minute)
		}},
	}...)
}

// walkInfo collects what WalkInfo yields for prefix.
func walkInfo(t *testing.T, r Reader, prefix string) []KeyInfo {
	t.Helper()
	var got []KeyInfo
	if err := WalkInfo(context.Background(), r, prefix, func(ki KeyInfo) error {
		got = append(got, ki)
		return nil
	}); err != nil {
		t.Fatalf("WalkInfo(%q) = %v", prefix, err)
	}
	return got
}

func TestWalkInfoListsKeysInWalkOrderWithSizesAndStorageTimes(t *testing.T) {
	t.Parallel()
	factories := infoFactories()
	stores := make([]Store, len(factories))
	for i, f := range factories {
		stores[i] = f.new(t)
	}
	// The key stored first sorts last, so key order and time order differ:
	// the walk must follow the keys, the times the Puts. One pause serves
	// every store; S3 services may keep LastModified to the second only.
	before := time.Now()
	for _, s := range stores {
		mustPut(t, s, "requests/z/first", []byte("12345"))
	}
	time.Sleep(1100 * time.Millisecond)
	for _, s := range stores {
		mustPut(t, s, "requests/a/second", []byte("1234567890"))
		mustPut(t, s, "requests/a/third", nil)
	}
	after := time.Now()
	for i, f := range factories {
		t.Run(f.name, func(t *testing.T) {
			if _, ok := stores[i].(InfoWalker); !ok {
				t.Fatalf("%T is not an InfoWalker", stores[i])
			}
			got := walkInfo(t, stores[i], "requests/")
			checkStoredInOrder(t, got, before, after)
		})
	}
}

// checkStoredInOrder checks what WalkInfo yielded for the keys of
// TestWalkInfoListsKeysInWalkOrderWithSizesAndStorageTimes.
func checkStoredInOrder(t *testing.T, got []KeyInfo, before, after time.Time) {
	t.Helper()
	keys := make([]string, len(got))
	for i, ki := range got {
		keys[i] = ki.Key
	}
	want := []string{"requests/a/second", "requests/a/third", "requests/z/first"}
	if !slices.Equal(keys, want) {
		t.Fatalf("WalkInfo visited %q, want %q", keys, want)
	}
	for i, size := range []int64{10, 0, 5} {
		if got[i].Size != size {
			t.Errorf("%s: Size %d, want %d", got[i].Key, got[i].Size, size)
		}
		// A generous margin: the store's clock is not ours, and a file
		// system or S3 service rounds its times.
		if mt := got[i].ModTime; mt.Before(before.Add(-2*time.Second)) || mt.After(after.Add(2*time.Second)) {
			t.Errorf("%s: ModTime %v, not between the Puts' %v and %v", got[i].Key, mt, before, after)
		}
	}
	first, second, third := got[2].ModTime, got[0].ModTime, got[1].ModTime
	if !first.Before(second) {
		t.Errorf("the key stored a second later has ModTime %v, not after the first's %v", second, first)
	}
	if third.Before(second) {
		t.Errorf("the key stored last has ModTime %v, before the one stored before it (%v)", third, second)
	}
}

func TestWalkInfoFollowsTheWalkContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, f := range infoFactories() {
		t.Run(f.name, func(t *testing.T) {
			s := f.new(t)
			for _, k := range []string{"a/b", "a.b", "a/c/d", "a0", "b", "requests/x/1", "requests/x.y/2"} {
				mustPut(t, s, k, []byte("x"))
			}
			for _, prefix := range []string{"", "a", "a/", "a/c/d", "requests/x", "requests/x/", "zzz", "../", "a//"} {
				var keys []string
				for _, ki := range walkInfo(t, s, prefix) {
					keys = append(keys, ki.Key)
				}
				if want := mustList(t, s, prefix); !slices.Equal(keys, want) {
					t.Errorf("WalkInfo(%q) visited %q, want List's %q", prefix, keys, want)
				}
			}
			stop := errors.New("stop")
			n := 0
			err := WalkInfo(ctx, s, "", func(KeyInfo) error { n++; return stop })
			if err != stop || n != 1 {
				t.Errorf("WalkInfo with a failing fn: err %v after %d keys, want fn's error after 1", err, n)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := WalkInfo(cctx, s, "", func(KeyInfo) error { return nil }); !errors.Is(err, context.Canceled) {
				t.Errorf("WalkInfo with a canceled context = %v, want context.Canceled", err)
			}
		})
	}
}

// plainReader hides every method of a store but Reader's.
type plainReader struct{ Reader }

// plainStoreCloser hides every method of a MemoryStore but StoreCloser's.
type plainStoreCloser struct{ StoreCloser }

func TestWalkInfoOfAStoreWithoutTimesYieldsKeysWithZeroTimes(t *testing.T) {
	t.Parallel()
	m := NewMemoryStore()
	mustPut(t, m, "b", []byte("bb"))
	mustPut(t, m, "a", []byte("a"))
	for _, tc := range []struct {
		name string
		r    Reader
	}{
		{"a plain reader", plainReader{m}},
		{"the op-timeout wrapper over a plain store", WithOpTimeout(plainStoreCloser{m}, time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := walkInfo(t, tc.r, "")
			want := []KeyInfo{{Key: "a"}, {Key: "b"}}
			if !slices.Equal(got, want) {
				t.Fatalf("WalkInfo = %+v, want %+v: keys only, size and time unknown", got, want)
			}
		})
	}
}

func TestFileStoreWalkInfoReportsTheStoredSizeOfACompressedArtifact(t *testing.T) {
	t.Parallel()
	s := newTestFileStore(t, t.TempDir())
	data := make([]byte, 2*DefaultCompressThreshold) // zeros compress well
	mustPut(t, s, "big", data)
	got := walkInfo(t, s, "")
	if len(got) != 1 || got[0].Size <= 0 || got[0].Size >= int64(len(data)) {
		t.Fatalf("WalkInfo = %+v, want one key whose size is the compressed file's, below %d", got, len(data))
	}
}
