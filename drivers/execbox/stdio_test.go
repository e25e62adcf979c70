package execbox

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/internal/syncbuf"
)

// eventually polls cond for up to five seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idlePids returns the process ids of the pool's idle runners.
func idlePids(d *Driver) []int {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	var pids []int
	for _, p := range d.pool.idle {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// TestPoolServesFromPrestartedRunners checks that the pool starts its
// runners ahead of calls, hands them out and refills.
func TestPoolServesFromPrestartedRunners(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewStdio(t, execboxtest.Script{started(), done("pooled")})
	d := newDriver(t, Config{Command: r.Command, Pool: 2})
	eventually(t, "the pool started 2 runners", func() bool { return r.Starts() == 2 && len(idlePids(d)) == 2 })

	for i := range 3 {
		before := idlePids(d)
		res, err := d.Run(runCtx(t), newCall(nil, nil))
		if err != nil || res.ExitCode != 0 || res.Data != "pooled" {
			t.Fatalf("Run %d = %+v, %v", i, res, err)
		}
		eventually(t, "the pool refilled", func() bool { return len(idlePids(d)) == 2 })
		after := idlePids(d)
		gone := slices.DeleteFunc(slices.Clone(before), func(pid int) bool { return slices.Contains(after, pid) })
		if len(gone) != 1 {
			t.Errorf("Run %d: idle runners %v before, %v after; want exactly one handed out", i, before, after)
		}
	}
	eventually(t, "5 runners started (2 ahead, 3 refills)", func() bool { return r.Starts() == 5 })
	if n := len(r.Sessions()); n != 3 {
		t.Errorf("runners that served a session = %d, want 3", n)
	}
}

// TestPoolReplacesDeadRunner checks that a runner that died while waiting
// in the pool is replaced and never handed out.
func TestPoolReplacesDeadRunner(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewStdio(t, execboxtest.Script{execboxtest.ExitBeforeExecuteOnce(), started(), done("replacement")})
	d := newDriver(t, Config{Command: r.Command, Pool: 1})
	eventually(t, "the dead runner was replaced", func() bool { return r.Starts() == 2 && len(idlePids(d)) == 1 })

	res, err := d.Run(runCtx(t), newCall(nil, nil))
	if err != nil || res.ExitCode != 0 || res.Data != "replacement" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if n := len(r.Sessions()); n != 1 {
		t.Errorf("sessions = %d, want 1", n)
	}
	d.pool.mu.Lock()
	failures := d.pool.failures
	d.pool.mu.Unlock()
	if failures != 0 {
		t.Errorf("pool failures after a healthy runner = %d, want 0", failures)
	}
}

// TestPoolClose checks that Close kills the idle runners and that the
// driver refuses calls afterwards.
func TestPoolClose(t *testing.T) {
	t.Parallel()
	r := execboxtest.NewStdio(t, execboxtest.Script{started(), done(nil)})
	d := newDriver(t, Config{Command: r.Command, Pool: 3})
	eventually(t, "the pool is full", func() bool { return len(idlePids(d)) == 3 })
	d.pool.mu.Lock()
	idle := slices.Clone(d.pool.idle)
	d.pool.mu.Unlock()

	d.Close()
	for _, p := range idle {
		if p.cmd.ProcessState == nil {
			t.Errorf("runner %d was not reaped by Close", p.cmd.Process.Pid)
		}
	}
	if _, err := d.Run(runCtx(t), newCall(nil, nil)); !errors.Is(err, errClosed) {
		t.Errorf("Run after Close = %v, want errClosed", err)
	}
}

// processGone reports whether pid no longer runs (a zombie counts as gone:
// an init that does not reap is not this package's business).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// TestStdioKillsProcessGroup checks that whatever a runner started dies
// with its session.
func TestStdioKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := `sleep 60 & echo $! > "$1/child"; read line; ` +
		`echo '{"type":"done","id":"req-1","ok":true,"logs":[],"result":1}'; wait`
	d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", script, "sh", dir}})
	res, err := d.Run(runCtx(t), newCall(nil, nil))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the runner's child is gone", func() bool { return processGone(pid) })
}

// TestStdioRunnerEnvironment checks that a runner process receives none of
// the gateway's secrets.
func TestStdioRunnerEnvironment(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SECRET", "s3cret")
	dir := t.TempDir()
	script := `env > "$1/env"; read line; echo '{"type":"done","id":"req-1","ok":true,"logs":[]}'`
	d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", script, "sh", dir}})
	if res, err := d.Run(runCtx(t), newCall(nil, nil)); err != nil || res.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env, []byte("s3cret")) || !bytes.Contains(env, []byte("PATH=")) {
		t.Errorf("runner environment:\n%s\nwant PATH and no secret", env)
	}
}

// TestStdioCrashDiagnostics checks that a crashed runner's exit status is
// in the error and its stderr in the log, never in a Result.
func TestStdioCrashDiagnostics(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", `read line; echo "guest engine exploded" >&2; exit 9`}, Logger: logger})
	_, err := d.Run(runCtx(t), newCall(nil, nil))
	if err == nil || !strings.Contains(err.Error(), "runner closed its stdout") || !strings.Contains(err.Error(), "runner process exited with status 9") {
		t.Fatalf("Run error = %v, want the closed stdout and the exit status", err)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "guest engine exploded") {
		t.Errorf("log = %s, want a warning with the runner's stderr", got)
	}
}

// TestReadLine checks the stdio framing.
func TestReadLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
		want  []string
		last  error // the error after the last line
	}{
		{"lines", "{\"a\":1}\n{\"b\":2}\n", []string{`{"a":1}`, `{"b":2}`}, io.EOF},
		{"crlf", "{}\r\n[]\r\n", []string{"{}", "[]"}, io.EOF},
		{"blank lines skipped", "\n\n  \n{}\n\n", []string{"{}"}, io.EOF},
		{"unterminated last line", "{}\n{\"x\"", []string{"{}", `{"x"`}, io.EOF},
		{"line at the limit", strings.Repeat("x", 2048) + "\n", []string{strings.Repeat("x", 2048)}, io.EOF},
		{"line over the limit", "{}\n" + strings.Repeat("x", 2049) + "\n{}\n", []string{"{}"}, errMessageTooLarge},
		{"huge line", strings.Repeat("y", 200<<10), nil, errMessageTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.input), 16)
			var got []string
			var err error
			for {
				var line []byte
				line, err = readLine(br, 2048)
				if len(line) > 0 {
					got = append(got, string(line))
				}
				if err != nil {
					break
				}
			}
			if !slices.Equal(got, tc.want) || !errors.Is(err, tc.last) {
				t.Errorf("lines %q, error %v; want %q, %v", got, err, tc.want, tc.last)
			}
		})
	}
}

// TestTailBuffer checks that stderr keeps its last bytes.
func TestTailBuffer(t *testing.T) {
	t.Parallel()
	tb := tailBuffer{limit: 8}
	for _, s := range []string{"abc", "defg", "hij"} {
		tb.Write([]byte(s))
	}
	if got := tb.String(); got != "cdefghij" {
		t.Errorf("tail = %q, want %q", got, "cdefghij")
	}
	tb.Write([]byte("0123456789"))
	if got := tb.String(); got != "23456789" {
		t.Errorf("tail = %q, want %q", got, "23456789")
	}
}

// TestStdioCloseOutlivesAnEscapedDescendant checks that a runner whose
// descendant left its process group, holding stderr open, cannot keep a
// session from ending: close stops waiting for stderr after a grace period
// and still reports what the runner wrote.
func TestStdioCloseOutlivesAnEscapedDescendant(t *testing.T) {
	t.Parallel()
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Fatalf("setsid is needed to leave the process group: %v", err)
	}
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	script := `read line; echo "runner gave up" >&2; "$1" -f sleep 20 >/dev/null </dev/null; exit 3`
	d := newDriver(t, Config{Command: []string{"/bin/sh", "-c", script, "sh", setsid}, Logger: logger})
	_, err = d.Run(runCtx(t), newCall(nil, nil))
	if err == nil || !strings.Contains(err.Error(), "runner process exited with status 3") {
		t.Fatalf("Run error = %v, want the exit status", err)
	}
	if got := logs.String(); !strings.Contains(got, "runner gave up") {
		t.Errorf("log = %s, want the runner's stderr", got)
	}
}
