// Package callbench drives an operation from a number of concurrent
// callers for a bounded time and count, and summarises what it measured:
// operations per second and latency percentiles. It is the engine of
// `toolgate bench`, which compares governed calls with the floor of the
// store under them; it knows nothing of either.
package callbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Op performs one operation. caller numbers the goroutine (0 to callers-1)
// and seq the operation across all callers, so that every operation can
// use names of its own. A returned error counts the operation as failed.
type Op func(ctx context.Context, caller, seq int) error

// Limits bound one run: it stops when Duration has passed or MaxOps
// operations have started, whichever comes first.
type Limits struct {
	Duration time.Duration
	MaxOps   int
}

// Result is what one run measured. Rates and percentiles count the
// operations that succeeded; Failed counts the others.
type Result struct {
	Callers   int           `json:"callers"`
	Ops       int           `json:"ops"`
	Failed    int           `json:"failed"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	PerSecond float64       `json:"ops_per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	// CPUPerOp is the CPU time the whole process used during the run,
	// divided by the operations that ran (succeeded or failed), and
	// KernelPerOp the part of it spent in the kernel. They say whether a
	// run was bound by the CPU, and by whose work: the caller's, the
	// gateway's, or the system calls of its store. Work done outside the
	// process (a storage server, the file system's journal thread) is not
	// in them. Zero where the system cannot say.
	CPUPerOp    time.Duration `json:"cpu_per_op_ns"`
	KernelPerOp time.Duration `json:"kernel_per_op_ns"`
	// FirstError is the first failure's error, for the report.
	FirstError string `json:"first_error,omitempty"`
}

// maxMaxOps bounds MaxOps, and with it the latencies kept in memory
// (8 bytes each).
const maxMaxOps = 10_000_000

// Run runs op from callers goroutines until lim is reached, then waits
// for the operations in flight. ctx ending stops it early.
func Run(ctx context.Context, callers int, lim Limits, op Op) (Result, error) {
	switch {
	case callers < 1:
		return Result{}, fmt.Errorf("callbench: %d callers: want at least 1", callers)
	case lim.Duration <= 0:
		return Result{}, fmt.Errorf("callbench: duration %v: want more than 0", lim.Duration)
	case lim.MaxOps < 1 || lim.MaxOps > maxMaxOps:
		return Result{}, fmt.Errorf("callbench: at most %d operations: want 1 to %d", lim.MaxOps, maxMaxOps)
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Duration)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      []time.Duration
		failed   int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	userBefore, kernelBefore, cpuKnown := processCPU()
	for c := range callers {
		wg.Go(func() {
			var mine []time.Duration
			var bad int
			var errFirst error
			for ctx.Err() == nil {
				seq := int(next.Add(1)) - 1
				if seq >= lim.MaxOps {
					break
				}
				t0 := time.Now()
				// The operation gets its own context: one cut off by the
				// run's end would count as a failure it did not make.
				err := op(context.WithoutCancel(ctx), c, seq)
				if err != nil {
					bad++
					if errFirst == nil {
						errFirst = err
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			failed += bad
			if firstErr == nil {
				firstErr = errFirst
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	userAfter, kernelAfter, cpuStillKnown := processCPU()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return Result{}, fmt.Errorf("callbench: %w", err)
	}
	r := Summarise(callers, all, elapsed)
	r.Failed = failed
	if ran := r.Ops + r.Failed; cpuKnown && cpuStillKnown && ran > 0 {
		kernel := kernelAfter - kernelBefore
		r.CPUPerOp = (userAfter - userBefore + kernel) / time.Duration(ran)
		r.KernelPerOp = kernel / time.Duration(ran)
	}
	if firstErr != nil {
		r.FirstError = firstErr.Error()
	}
	return r, nil
}

// Summarise computes a Result from the latencies of the operations that
// succeeded within elapsed. It sorts latencies.
func Summarise(callers int, latencies []time.Duration, elapsed time.Duration) Result {
	r := Result{Callers: callers, Ops: len(latencies), Elapsed: elapsed}
	if elapsed > 0 {
		r.PerSecond = float64(len(latencies)) / elapsed.Seconds()
	}
	if len(latencies) == 0 {
		return r
	}
	slices.Sort(latencies)
	r.P50 = percentile(latencies, 50)
	r.P99 = percentile(latencies, 99)
	return r
}

// percentile returns the nearest-rank p-th percentile of sorted, which
// is not empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(rank, 1)-1]
}
