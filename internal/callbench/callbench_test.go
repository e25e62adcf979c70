package callbench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSummarise(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, ms(i))
	}
	for _, tc := range []struct {
		name     string
		lat      []time.Duration
		elapsed  time.Duration
		p50, p99 time.Duration
		rate     float64
	}{
		{"none", nil, time.Second, 0, 0, 0},
		{"one", []time.Duration{ms(3)}, time.Second, ms(3), ms(3), 1},
		{"two", []time.Duration{ms(9), ms(1)}, 2 * time.Second, ms(1), ms(9), 1},
		{"hundred, unsorted", hundred, time.Second, ms(50), ms(99), 100},
		{"no time", []time.Duration{ms(1)}, 0, ms(1), ms(1), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Summarise(4, tc.lat, tc.elapsed)
			if r.P50 != tc.p50 || r.P99 != tc.p99 || r.PerSecond != tc.rate || r.Ops != len(tc.lat) || r.Callers != 4 {
				t.Errorf("got %+v, want p50 %v p99 %v rate %v", r, tc.p50, tc.p99, tc.rate)
			}
		})
	}
}

func TestRunBoundsAndCounts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	seen := make([]atomic.Bool, 50)
	r, err := Run(context.Background(), 5, Limits{Duration: time.Minute, MaxOps: 50}, func(_ context.Context, caller, seq int) error {
		calls.Add(1)
		if caller < 0 || caller >= 5 || seen[seq].Swap(true) {
			t.Errorf("caller %d, seq %d seen again", caller, seq)
		}
		if seq%10 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 50 || r.Ops != 45 || r.Failed != 5 || r.FirstError != "refused" {
		t.Errorf("calls %d, result %+v", calls.Load(), r)
	}
}

func TestRunStopsAtDuration(t *testing.T) {
	t.Parallel()
	r, err := Run(context.Background(), 2, Limits{Duration: 50 * time.Millisecond, MaxOps: 10_000_000}, func(context.Context, int, int) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	if err != nil || r.Ops == 0 || r.Ops > 200 {
		t.Errorf("result %+v, err %v", r, err)
	}
}

// TestRunMeasuresCPU checks that an operation that works the CPU is seen
// to cost CPU, and that the kernel's part is a part of it.
func TestRunMeasuresCPU(t *testing.T) {
	t.Parallel()
	_, _, known := processCPU()
	data := bytes.Repeat([]byte("toolgate"), 1<<17) // 1 MiB
	r, err := Run(context.Background(), 1, Limits{Duration: time.Minute, MaxOps: 40}, func(context.Context, int, int) error {
		sum := sha256.Sum256(data)
		if sum[0] == 0 && sum[1] == 0 && sum[2] == 0 && sum[3] == 0 {
			return errors.New("an unlikely digest")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !known && (r.CPUPerOp != 0 || r.KernelPerOp != 0):
		t.Errorf("CPU per op %v, kernel %v on a system that cannot say: want zero", r.CPUPerOp, r.KernelPerOp)
	case known && (r.CPUPerOp <= 0 || r.KernelPerOp < 0 || r.KernelPerOp > r.CPUPerOp):
		t.Errorf("CPU per op %v, of it kernel %v: want some CPU, the kernel's a part of it", r.CPUPerOp, r.KernelPerOp)
	}
}

func TestRunRefusesUnbounded(t *testing.T) {
	t.Parallel()
	op := func(context.Context, int, int) error { return nil }
	for _, tc := range []struct {
		name    string
		callers int
		lim     Limits
	}{
		{"no callers", 0, Limits{time.Second, 1}},
		{"no duration", 1, Limits{0, 1}},
		{"no count", 1, Limits{time.Second, 0}},
		{"too many", 1, Limits{time.Second, maxMaxOps + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Run(context.Background(), tc.callers, tc.lim, op); err == nil {
				t.Error("ran")
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	floor := Result{Callers: 8, Ops: 100, PerSecond: 1000, P50: 2 * time.Millisecond, P99: 5 * time.Millisecond}
	allow := Result{Callers: 8, Ops: 40, PerSecond: 400, P50: 8 * time.Millisecond, P99: 20 * time.Millisecond, CPUPerOp: 1900 * time.Microsecond, KernelPerOp: 1100 * time.Microsecond}
	rows := []Row{{Store: "file", Kind: "floor", Result: floor}, {Store: "file", Kind: "allow", Result: allow}}
	for i := range rows {
		rows[i].Compare(floor)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := "| file | allow | 8 | 40 | 0 | 400 | 8.00 ms | 20.00 ms | 0.40 | 4.0 | 1900 µs | 1100 µs |"
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 4 || lines[3] != want {
		t.Errorf("table:\n%s\nwant last line %s", b.String(), want)
	}
}
