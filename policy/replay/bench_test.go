//go:build unix

package replay

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// benchCalls is how many calls the throughput benchmark's file store holds.
const benchCalls = 2000

// BenchmarkReplay measures replay from a file store against its baseline,
// the bare listing of the same store (evidence.WalkRequests), and the
// verification replay reads the store through (evidence.VerifyAll), in
// the same run: calls/s is the figure to compare.
func BenchmarkReplay(b *testing.B) {
	s := fileStoreOf(b, benchCalls)
	ctx := context.Background()
	r := &Replayer{Candidate: writePolicies(b, storeRecorded+`@id("no-dev") forbid (principal, action, resource) when { principal.groups.contains("dev") };`)}
	// calls/s is wall time, which a busy machine stretches; cpu-µs/call
	// is the process's CPU time (user and system) per call, which it
	// does not.
	var cpuStart time.Duration
	perSecond := func(b *testing.B) {
		calls := float64(benchCalls) * float64(b.N)
		b.ReportMetric(calls/b.Elapsed().Seconds(), "calls/s")
		b.ReportMetric(float64((cpuTime(b)-cpuStart).Microseconds())/calls, "cpu-µs/call")
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
			if err := evidence.VerifyAll(ctx, s, evidence.VerifyOptions{}, func(evidence.VerifyReport) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("verify-concurrent", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			opts := evidence.VerifyOptions{Concurrency: DefaultConcurrency}
			if err := evidence.VerifyAll(ctx, s, opts, func(evidence.VerifyReport) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("replay", func(b *testing.B) {
		cpuStart = cpuTime(b)
		for b.Loop() {
			rep, err := Replay(ctx, s, evidence.VerifyOptions{}, Filter{}, r)
			if err != nil || rep.Replayed != benchCalls {
				b.Fatalf("replayed %d of %d: %v", rep.Replayed, benchCalls, err)
			}
		}
		perSecond(b)
	})
}

// BenchmarkReplayHeap reports the largest live heap seen while replaying
// stores of growing size: flat memory is the same figure at every size.
// CI runs it on 1,000 and 5,000 calls; REPLAY_HEAP_LARGE=1 runs it on
// 10,000 and 100,000 (building the larger store takes minutes; use
// -benchtime 1x).
func BenchmarkReplayHeap(b *testing.B) {
	sizes := []int{1000, 5000}
	if os.Getenv("REPLAY_HEAP_LARGE") == "1" {
		sizes = []int{10000, 100000}
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := fileStoreOf(b, n)
			r := &Replayer{Candidate: writePolicies(b, storeRecorded)}
			for b.Loop() {
				b.ReportMetric(float64(peakLiveHeap(b, s, r, n/10)), "peak-live-B")
			}
		})
	}
}

// peakLiveHeap replays s and returns the largest live heap measured
// after a collection every `every` calls.
func peakLiveHeap(tb testing.TB, s evidence.Reader, r *Replayer, every int) uint64 {
	tb.Helper()
	ctx := context.Background()
	var peak uint64
	n := 0
	rep := NewReport()
	err := Walk(ctx, s, evidence.VerifyOptions{TempDir: tb.TempDir()}, Filter{}, func(c Call) error {
		o, err := r.Replay(ctx, c)
		if err != nil {
			return err
		}
		rep.Add(c, o)
		if n++; n%every == 0 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
		return nil
	}, rep.Skip, func(v evidence.VerifyReport) { rep.SkipUnverified(v.RequestID, v.Verdict(), v.Problems) })
	if err != nil {
		tb.Fatal(err)
	}
	return peak
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
