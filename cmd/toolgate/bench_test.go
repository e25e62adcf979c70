package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/evidencetest"
)

// benchRun runs toolgate bench in this process and returns its exit code
// and output.
func benchRun(t *testing.T, getenv func(string) string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"bench"}, args...), stdio{Out: &out, Err: &errb, Getenv: getenv})
	return code, out.String(), errb.String()
}

// checkBenchJSON checks a report's shape: per number of callers, the
// rows of kinds in order, each with calls made and none failed.
func checkBenchJSON(t *testing.T, out, store string, callers []int, kinds ...string) {
	t.Helper()
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, out)
	}
	if rep.Machine.CPUs < 1 || rep.Machine.GoVersion == "" {
		t.Errorf("machine = %+v", rep.Machine)
	}
	var want []string
	for _, n := range callers {
		for _, k := range kinds {
			want = append(want, fmt.Sprintf("%s/%s/%d", store, k, n))
		}
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, fmt.Sprintf("%s/%s/%d", r.Store, r.Kind, r.Callers))
		if r.Ops < 1 || r.Failed != 0 || r.PerSecond <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("row %s/%d: %+v", r.Kind, r.Callers, r.Result)
		}
		if r.CPUPerOp <= 0 || r.KernelPerOp > r.CPUPerOp {
			t.Errorf("row %s/%d: CPU per call %v, of it kernel %v", r.Kind, r.Callers, r.CPUPerOp, r.KernelPerOp)
		}
		if r.Kind == "floor" && r.OfFloor != 1 {
			t.Errorf("floor row %d: ratio %v, want 1", r.Callers, r.OfFloor)
		}
		if r.Kind != "floor" && (r.OfFloor <= 0 || r.P50OverFloor <= 0) {
			t.Errorf("row %s/%d: no ratio to the floor: %+v", r.Kind, r.Callers, r)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("rows = %v, want %v", got, want)
	}
}

// TestBenchFileStore runs the benchmark briefly on a fresh folder: every
// call it counts succeeded with the expected decision (a failed one
// would make it exit 1), in both output forms.
func TestBenchFileStore(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	code, out, errOut := benchRun(t, none, "--callers", "1,3", "--duration", "400ms", "--max-calls", "40", "--deny", "--ceiling", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkBenchJSON(t, out, "file", []int{1, 3}, "floor", "allow", "deny", "ceiling")

	dir := t.TempDir()
	code, out, errOut = benchRun(t, none, "--evidence", "file://"+dir+"/store", "--callers", "2", "--duration", "300ms", "--max-calls", "20")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[2], "| store | kind | callers |") ||
		!strings.HasPrefix(lines[4], "| file | floor | 2 |") || !strings.HasPrefix(lines[5], "| file | allow | 2 |") {
		t.Errorf("table:\n%s", out)
	}
	// The floor's folder is gone; the store holds the calls' evidence.
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "store" {
		t.Errorf("left beside the store: %v %v", entries, err)
	}
}

// TestBenchProfile checks that --profile leaves the profiles and the
// execution trace that show where a call waits.
func TestBenchProfile(t *testing.T) {
	// Not parallel: the CPU profile and the trace belong to the process.
	dir := t.TempDir()
	code, _, errOut := benchRun(t, func(string) string { return "" }, "--callers", "2", "--duration", "300ms", "--max-calls", "20", "--profile", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"cpu.pprof", "mutex.pprof", "block.pprof", "trace.out"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(data) == 0 {
			t.Errorf("%s: %d bytes, %v", name, len(data), err)
		}
	}
	if trace, _ := os.ReadFile(filepath.Join(dir, "trace.out")); !bytes.HasPrefix(trace, []byte("go 1.")) {
		t.Errorf("trace.out does not begin as an execution trace: %.16q", trace)
	}
}

// TestBenchMinIO runs the benchmark briefly on a real MinIO.
func TestBenchMinIO(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "bench", false)
	m.SetEnv(t)
	code, out, errOut := benchRun(t, os.Getenv, "--evidence", m.URL("bench", "runs"),
		"--callers", "1,3", "--duration", "400ms", "--max-calls", "30", "--deny", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkBenchJSON(t, out, "s3", []int{1, 3}, "floor", "allow", "deny")
}

// TestBenchRefuses checks that the benchmark drives nothing but a
// loopback store and stays within its bounds.
func TestBenchRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"remote S3 endpoint", []string{"--evidence", "s3://b/p?endpoint=https://s3.example.com&region=x"}, "loopback only"},
		{"S3 without endpoint", []string{"--evidence", "s3://b/p?region=x"}, "loopback only"},
		{"S3 endpoint on a LAN address", []string{"--evidence", "s3://b/p?endpoint=http://10.0.0.1:9000&region=x"}, "not a loopback"},
		{"relative folder", []string{"--evidence", "file://store"}, "file:///absolute/folder"},
		{"other scheme", []string{"--evidence", "http://127.0.0.1/"}, "want file:// or s3://"},
		{"no callers", []string{"--callers", "0"}, "--callers"},
		{"too many callers", []string{"--callers", "1,100000"}, "--callers"},
		{"not a number", []string{"--callers", "1,x"}, "--callers"},
		{"endless", []string{"--duration", "1h"}, "--duration"},
		{"no duration", []string{"--duration", "0s"}, "--duration"},
		{"unbounded count", []string{"--max-calls", "0"}, "--max-calls"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := benchRun(t, func(string) string { return "" }, tc.args...)
			if code != exitError || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 naming %q", code, out, errOut, tc.want)
			}
		})
	}
}
