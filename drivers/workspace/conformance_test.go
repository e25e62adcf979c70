package workspace

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/driverstest"
)

// TestConformance runs the driver conformance kit against the workspace
// driver with its sandboxed shell: the echo travels as a variable of the
// shell's env, the slow call marks its start with a file in the workspace.
func TestConformance(t *testing.T) {
	t.Parallel()
	shell := func(command string, env map[string]any) drivers.Call {
		args := map[string]any{"command": command}
		if env != nil {
			args[shellEnvArg] = env
		}
		return drivers.Call{RequestID: "req-1", ToolID: "workspace.shell", Target: opShell, Args: args}
	}
	newSubject := func(t *testing.T) driverstest.Subject {
		d, root := newTestDriver(t)
		begun := func() int {
			entries, _ := os.ReadDir(root)
			n := 0
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "begun.") {
					n++
				}
			}
			return n
		}
		return driverstest.Subject{Driver: d, Begun: begun}
	}
	// hostile is a command printing hostile output.
	hostile := func(name, command string) driverstest.Hostile {
		return driverstest.Hostile{Name: name, New: newSubject, Call: shell(command, nil)}
	}
	unknown := drivers.Call{RequestID: "req-1", ToolID: "workspace.rmrf", Target: "rmrf", Args: map[string]any{}}
	driverstest.Run(t, driverstest.Suite{
		New:     newSubject,
		Echo:    func(v string) drivers.Call { return shell(`printf %s "$TG_ECHO"`, map[string]any{"TG_ECHO": v}) },
		Echoed:  func(res drivers.Result) (string, bool) { return res.Stdout, true },
		Slow:    shell(`: > "begun.$(date +%s%N)"; exec sleep 600`, nil),
		Failing: shell("echo failing >&2; exit 3", nil),
		Unknown: &unknown,
		Hostile: []driverstest.Hostile{
			hostile("binary output", "head -c 100000 /dev/urandom; head -c 100000 /dev/urandom >&2"),
			hostile("output past the limit", "yes 0123456789abcdef | head -c 3000000"),
			hostile("terminal escapes and NUL", `printf '\033]0;pwned\007\033[2J\000\r\n\342\200\256'`),
			hostile("invalid UTF-8", `printf '\377\376\300\200'; exit 7`),
			hostile("a child that outlives the shell", "sleep 600 & echo started"),
			{Name: "a file of garbage", New: func(t *testing.T) driverstest.Subject {
				s := newSubject(t)
				if err := os.WriteFile(filepath.Join(rootOf(t, s.Driver), "g.bin"), []byte("\x00\xff\xfe\x1b[2J"), 0o600); err != nil {
					t.Fatal(err)
				}
				return s
			}, Call: drivers.Call{RequestID: "req-1", ToolID: "workspace.readFile", Target: opReadFile, Args: map[string]any{"path": "g.bin"}}},
		},
		Grace: 20 * time.Second,
	})
}

// rootOf returns the workspace folder of d.
func rootOf(t *testing.T, d drivers.Driver) string {
	t.Helper()
	return d.(*Driver).root.Name()
}
