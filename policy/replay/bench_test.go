//go:build unix

package replay

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// benchCalls is how many calls the throughput benchmark's file store holds.
const benchCalls = 2000

// BenchmarkReplay measures replay from a file store of signed calls
// against its baseline, the bare listing of the same store
// (evidence.WalkRequests), and the verification replay reads the store
// through (evidence.VerifyAll, signatures required), in the same run:
// calls/s is the figure to compare.
func BenchmarkReplay(b *testing.B) {
	s, opts := fileStoreOf(b, benchCalls)
	ctx := context.Background()
	r := &Replayer{Candidate: writePolicies(b, storeRecorded+`@id("no-dev") forbid (principal, action, resource) when { principal.groups.contains("dev") };`)}
	// calls/s is wall time, which a busy machine stretches; cpu-µs/call
	// is the process's CPU time (user and system) per call, which it
	// stretches less.
	var cpuStart time.Duration
	perSecond := func(b *testing.B) {
		calls := float64(benchCalls) * float64(b.N)
		b.ReportMetric(calls/b.Elapsed().Seconds(), "calls/s")
		b.ReportMetric(float64((cpuTime(b)-cpuStart).Microseconds())/calls, "cpu-µs/call")
	}
	verifyAll := func(concurrency int) error {
		o := opts
		o.Concurrency = concurrency
		return evidence.VerifyAll(ctx, s, o, func(rep evidence.VerifyReport) error {
			if rep.Failed() {
				return fmt.Errorf("%s: %s %q", rep.RequestID, rep.Verdict(), rep.Problems)
			}
			return nil
		})
	}
	b.Run("listing", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			n := 0
			if err := evidence.WalkRequests(ctx, s, func(string, []string) error { n++; return nil }); err != nil || n != benchCalls {
				b.Fatalf("%d requests listed: %v", n, err)
			}
		}
		perSecond(b)
	})
	b.Run("verify", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			if err := verifyAll(1); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("verify-concurrent", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			if err := verifyAll(DefaultConcurrency); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("replay", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			rep, err := Replay(ctx, s, opts, Filter{}, r)
			if err != nil || rep.Replayed != benchCalls {
				b.Fatalf("replayed %d of %d: %v", rep.Replayed, benchCalls, err)
			}
		}
		perSecond(b)
	})
	// The same calls written through two instances' transparency logs,
	// as a gateway with a signing key writes them, replayed in log order.
	ls, lopts := loggedStoreOf(b, benchCalls)
	lopts.TempDir = b.TempDir()
	b.Run("listing-logged", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			n := 0
			if err := evidence.WalkRequests(ctx, ls, func(string, []string) error { n++; return nil }); err != nil || n != benchCalls {
				b.Fatalf("%d requests listed: %v", n, err)
			}
		}
		perSecond(b)
	})
	b.Run("replay-logged", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			rep, err := Replay(ctx, ls, lopts, Filter{}, r)
			if err != nil || rep.Replayed != benchCalls {
				b.Fatalf("replayed %d of %d: %v", rep.Replayed, benchCalls, err)
			}
		}
		perSecond(b)
	})
}

// BenchmarkReplayHeap reports how far the live heap grew while replaying
// stores of growing size, beside how far it grew while merely listing the
// same store (evidence.WalkRequests, the baseline), a file store and a
// file store whose calls two instances' transparency logs record (the
// calls then reported in log order through an on-disk sort), all signed:
// flat memory is the same figure at every size. It runs on 1,000 and 5,000 calls;
// REPLAY_HEAP_LARGE=1 runs it on 10,000 and 100,000 (building the larger
// stores takes minutes; use -benchtime 1x).
func BenchmarkReplayHeap(b *testing.B) {
	sizes := []int{1000, 5000}
	if os.Getenv("REPLAY_HEAP_LARGE") == "1" {
		sizes = []int{10000, 100000}
	}
	stores := []struct {
		name string
		fill func(testing.TB, int) (evidence.Reader, evidence.VerifyOptions)
	}{
		{"file", func(tb testing.TB, n int) (evidence.Reader, evidence.VerifyOptions) {
			return fileStoreOf(tb, n)
		}},
		{"logged", loggedStoreOf},
	}
	for _, st := range stores {
		for _, n := range sizes {
			b.Run(st.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				s, opts := st.fill(b, n)
				opts.TempDir = b.TempDir()
				r := &Replayer{Candidate: writePolicies(b, storeRecorded)}
				ctx := context.Background()
				for b.Loop() {
					listing := heapGrowth(b, func() error {
						return evidence.WalkRequests(ctx, s, func(string, []string) error { return nil })
					})
					replayed := heapGrowth(b, func() error {
						rep, err := Replay(ctx, s, opts, Filter{}, r)
						if err == nil && rep.Replayed != n {
							err = fmt.Errorf("replayed %d of %d", rep.Replayed, n)
						}
						return err
					})
					b.ReportMetric(float64(listing), "listing-growth-B")
					b.ReportMetric(float64(replayed), "peak-growth-B")
				}
			})
		}
	}
}

// heapGrowth runs run and returns how far the live heap, measured after
// a collection every 20ms, grew above what it was before.
func heapGrowth(tb testing.TB, run func() error) uint64 {
	tb.Helper()
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := live()
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				peak.Store(max(peak.Load(), live()))
			}
		}
	}()
	err := run()
	close(done)
	<-sampled
	if err != nil {
		tb.Fatal(err)
	}
	return peak.Load() - min(peak.Load(), base)
}

// loggedStoreOf returns a file store holding n calls, as fileStoreOf's,
// written through two instances' transparency logs in turn, and the
// options that verify them.
func loggedStoreOf(tb testing.TB, n int) (evidence.Reader, evidence.VerifyOptions) {
	tb.Helper()
	ctx := context.Background()
	signer := newSigner(tb)
	dir := tb.TempDir()
	fs, err := evidence.NewFileStore(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { fs.Close() })
	s := quickFileStore{fs, layoutWriter{dir}}
	var logs []*evidence.LogWriter
	var logged []evidence.StoreCloser
	for _, instance := range []string{"gw-a", "gw-b"} {
		l, _ := openLog(tb, s, instance, signer)
		logs, logged = append(logs, l), append(logged, evidence.WithLog(s, l))
	}
	for i := range n {
		putRecorded(tb, logged[i%2], storeCall(i, signer))
		if i%400 == 399 {
			for _, l := range logs {
				if err := l.Flush(ctx); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	for _, l := range logs {
		if err := l.Close(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	return fs, evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireSignature: true, RequireLog: true}
}

// quickFileStore is a file store whose writes skip the store's fsyncs
// (layoutWriter), to build large logged stores for benchmarks quickly.
type quickFileStore struct {
	*evidence.FileStore
	w layoutWriter
}

func (s quickFileStore) Put(ctx context.Context, key string, data []byte) error {
	return s.w.Put(ctx, key, data)
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
