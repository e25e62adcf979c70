package workspace

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// liveGroupMembers returns the processes of group pgid that are not
// zombies. Zombies are left out because reaping orphans is up to the
// system's init, which the driver does not control.
func liveGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		// The command name is parenthesized and may hold spaces; the
		// fields after it are: state ppid pgrp ...
		_, rest, ok := strings.Cut(string(b), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			live = append(live, pid)
		}
	}
	return live
}

// waitGroupGone fails unless every process of group pgid ends soon.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		live := liveGroupMembers(t, pgid)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the command's group survived", live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestShellKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name    string
		args    map[string]any
		maxTime time.Duration
	}{
		{"on timeout", map[string]any{"command": "echo $$; sleep 30 & sleep 30", "timeout": 1000}, 5 * time.Second},
		{"after a normal exit", map[string]any{"command": "echo $$; (sleep 30; echo late) & sleep 30 & echo done"}, 3 * time.Second},
		{"grandchildren of a subshell", map[string]any{"command": "echo $$; sh -c 'sleep 30 & sleep 30' & sleep 30", "timeout": 1000}, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newTestDriver(t)
			start := time.Now()
			res := run(t, d, "shell", tt.args)
			if elapsed := time.Since(start); elapsed > tt.maxTime {
				t.Errorf("call took %v, want under %v", elapsed, tt.maxTime)
			}
			line, _, _ := strings.Cut(res.Stdout, "\n")
			pgid, err := strconv.Atoi(line)
			if err != nil {
				t.Fatalf("first output line %q is not the shell's pid", line)
			}
			if strings.Contains(res.Stdout, "late") {
				t.Error("a background process kept running after the call")
			}
			waitGroupGone(t, pgid)
		})
	}
}
