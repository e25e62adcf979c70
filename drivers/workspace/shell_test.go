package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestShell(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		setup      func(t *testing.T, root string)
		args       map[string]any
		wantExit   int
		wantStdout string // with {root} replaced by the workspace path
		wantStderr string
	}{
		{name: "stdout", args: map[string]any{"command": "echo hello"}, wantStdout: "hello\n"},
		{name: "stderr", args: map[string]any{"command": "echo oops >&2"}, wantStderr: "oops\n"},
		{name: "exit code", args: map[string]any{"command": "echo partial; exit 3"}, wantExit: 3, wantStdout: "partial\n"},
		{name: "killed by a signal", args: map[string]any{"command": "kill -TERM $$"}, wantExit: 128 + 15},
		{name: "stdin is empty", args: map[string]any{"command": "cat; echo end"}, wantStdout: "end\n"},
		{name: "runs in the workspace", args: map[string]any{"command": "pwd"}, wantStdout: "{root}\n"},
		{
			name:  "cwd",
			setup: func(t *testing.T, root string) { os.MkdirAll(filepath.Join(root, "a", "b"), 0o750) },
			args:  map[string]any{"command": "pwd", "cwd": "a/b"}, wantStdout: "{root}/a/b\n",
		},
		{
			name:       "scrubbed base environment",
			args:       map[string]any{"command": `printf '%s|%s|%s|%s' "$PATH" "$HOME" "$LANG" "$TMPDIR"`},
			wantStdout: "/usr/local/bin:/usr/bin:/bin|{root}|C.UTF-8|{root}/.tmp",
		},
		{
			name:       "TMPDIR exists",
			args:       map[string]any{"command": `f=$(mktemp) && case "$f" in "$TMPDIR"/*) echo inside;; esac`},
			wantStdout: "inside\n",
		},
		{
			name:       "caller env",
			args:       map[string]any{"command": `printf '%s %s' "$GREETING" "$LANG"`, "env": map[string]any{"GREETING": "hi there", "LANG": "de_DE.UTF-8"}},
			wantStdout: "hi there de_DE.UTF-8",
		},
		{
			name:       "invalid UTF-8 output becomes U+FFFD",
			args:       map[string]any{"command": `printf 'a\377b'; printf '\300' >&2`},
			wantStdout: "a\uFFFDb", wantStderr: "\uFFFD",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriver(t)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			res := run(t, d, "shell", tt.args)
			data := dataOf(t, res)
			if res.ExitCode != tt.wantExit || data["exitCode"] != tt.wantExit {
				t.Errorf("ExitCode = %d, data exitCode = %v, want %d (stderr %q)", res.ExitCode, data["exitCode"], tt.wantExit, res.Stderr)
			}
			if data["success"] != (tt.wantExit == 0) {
				t.Errorf("success = %v", data["success"])
			}
			if _, ok := data["error"]; ok {
				t.Errorf("a command's own failure is not a system error, got error %v", data["error"])
			}
			if want := strings.ReplaceAll(tt.wantStdout, "{root}", root); res.Stdout != want {
				t.Errorf("Stdout = %q, want %q", res.Stdout, want)
			}
			if res.Stderr != tt.wantStderr {
				t.Errorf("Stderr = %q, want %q", res.Stderr, tt.wantStderr)
			}
			if data["type"] != "shell" || data["command"] != tt.args["command"] || data["timedOut"] != false ||
				data["stdoutTruncated"] != false || data["stderrTruncated"] != false {
				t.Errorf("data = %v", data)
			}
			if ms, ok := data["durationMs"].(int64); !ok || ms < 0 {
				t.Errorf("durationMs = %v", data["durationMs"])
			}
		})
	}
}

func TestShellOutputCapLeavesNoPartialSecret(t *testing.T) {
	t.Parallel()
	const secret = "ghp_R2d2C3poBb8kL0aQ9xZ7mN4vW1sT6yU3eJ5h"
	for _, cut := range []int{1, 4, 20, len(secret) - 1} {
		t.Run(fmt.Sprintf("cap %d bytes into the secret", cut), func(t *testing.T) {
			const prefix = "token: "
			d, _ := newTestDriverConfig(t, Config{OutputLimit: len(prefix) + cut})
			res := run(t, d, "shell", map[string]any{"command": "printf '" + prefix + secret + "\\n'"})
			if strings.Contains(res.Stdout, secret[:min(cut, 2)]) && cut > 0 {
				t.Errorf("the first characters of the secret survived the cut: %q", res.Stdout)
			}
			if !strings.HasPrefix(res.Stdout, prefix) || dataOf(t, res)["stdoutTruncated"] != true {
				t.Errorf("Stdout = %q", res.Stdout)
			}
		})
	}
}

func TestShellCwdErrors(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	write(t, root, "file", "x", 0o640)
	wantFailure(t, run(t, d, "shell", map[string]any{"command": "pwd", "cwd": "missing"}), 1, "execution", "cwd missing does not exist")
	wantFailure(t, run(t, d, "shell", map[string]any{"command": "pwd", "cwd": "file"}), 1, "execution", "cwd file is not a directory")
}

func TestShellDoesNotSeeGatewayEnvironment(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SECRET", "hunter2")
	d, _ := newTestDriver(t)
	res := run(t, d, "shell", map[string]any{"command": "env"})
	wantSuccess(t, res)
	if strings.Contains(res.Stdout, "TOOLGATE_TEST_SECRET") || strings.Contains(res.Stdout, "hunter2") {
		t.Errorf("gateway environment leaked into the command:\n%s", res.Stdout)
	}
	for line := range strings.Lines(res.Stdout) {
		name, _, _ := strings.Cut(line, "=")
		switch name {
		case "PATH", "HOME", "LANG", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD":
			// The base environment, and what the shell itself adds.
		default:
			t.Errorf("unexpected variable %q in the command's environment", name)
		}
	}
}

func TestShellTimeout(t *testing.T) {
	t.Parallel()
	d, _ := newTestDriver(t)
	start := time.Now()
	res := run(t, d, "shell", map[string]any{
		"command": "echo started; sleep 30 & sleep 30",
		"timeout": 1000,
	})
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("timed-out call took %v, want about 1s", elapsed)
	}
	wantFailure(t, res, 124, "timeout", "command timed out after 1s")
	data := dataOf(t, res)
	if data["timedOut"] != true || data["exitCode"] != 124 {
		t.Errorf("data = %v, want timedOut and exitCode 124", data)
	}
	if res.Stdout != "started\n" {
		t.Errorf("output before the timeout was lost: Stdout = %q", res.Stdout)
	}
}

func TestShellContext(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)

	t.Run("cancellation kills the command", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		res := runCtx(t, ctx, d, "shell", map[string]any{"command": "sleep 30"})
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("canceled call took %v", elapsed)
		}
		wantFailure(t, res, 128+9, "execution", "canceled")
		if dataOf(t, res)["timedOut"] != false {
			t.Error("a cancellation is not a timeout")
		}
	})
	t.Run("the call's deadline is a timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		res := runCtx(t, ctx, d, "shell", map[string]any{"command": "sleep 30", "timeout": 60000})
		wantFailure(t, res, 124, "timeout", "call's deadline")
	})
	t.Run("an ended call runs nothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := runCtx(t, ctx, d, "shell", map[string]any{"command": "touch ran"})
		wantFailure(t, res, 1, "execution", "canceled")
		if _, err := os.Stat(filepath.Join(root, "ran")); !os.IsNotExist(err) {
			t.Errorf("the command ran: %v", err)
		}
	})
}

func TestShellBackgroundProcessDoesNotHoldTheCall(t *testing.T) {
	t.Parallel()
	d, _ := newTestDriver(t)
	start := time.Now()
	res := run(t, d, "shell", map[string]any{"command": "sleep 30 & echo done"})
	if elapsed := time.Since(start); elapsed > 15*time.Second {
		t.Errorf("call waited %v for a background process", elapsed)
	}
	wantSuccess(t, res)
	if res.Stdout != "done\n" {
		t.Errorf("Stdout = %q", res.Stdout)
	}
}

func TestShellOutputLimit(t *testing.T) {
	t.Run("small limit", func(t *testing.T) {
		d, _ := newTestDriverConfig(t, Config{OutputLimit: 10})
		res := run(t, d, "shell", map[string]any{"command": "printf '0123 56789abcdef'; printf 'short' >&2"})
		wantSuccess(t, res)
		if want := "0123 \n[output truncated: 11 bytes omitted]\n"; res.Stdout != want {
			t.Errorf("Stdout = %q, want %q", res.Stdout, want)
		}
		if res.Stderr != "short" {
			t.Errorf("Stderr = %q", res.Stderr)
		}
		data := dataOf(t, res)
		if data["stdoutTruncated"] != true || data["stderrTruncated"] != false {
			t.Errorf("data = %v", data)
		}
	})

	t.Run("50 MiB with bounded memory", func(t *testing.T) {
		d, _ := newTestDriver(t)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res := run(t, d, "shell", map[string]any{"command": `head -c 52428800 /dev/zero | tr '\0' a`})
		runtime.ReadMemStats(&after)
		wantSuccess(t, res)
		const limit = 1 << 20
		// One run of token bytes straddles the cap: its last
		// tokenLookBack bytes go too.
		want := strings.Repeat("a", limit-tokenLookBack) + fmt.Sprintf("\n[output truncated: %d bytes omitted]\n", 52428800-limit+tokenLookBack)
		if res.Stdout != want {
			t.Errorf("Stdout has %d bytes ending %q, want %d", len(res.Stdout), res.Stdout[max(0, len(res.Stdout)-60):], len(want))
		}
		if dataOf(t, res)["stdoutTruncated"] != true {
			t.Error("stdoutTruncated not set")
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Errorf("capturing 50 MiB allocated %d MiB, want it bounded near the 1 MiB limit", alloc>>20)
		}
	})
}
