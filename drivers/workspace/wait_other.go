//go:build unix && !linux

package workspace

import (
	"os/exec"
	"syscall"
)

// awaitExit blocks until the started cmd has exited and returns the function
// that reports how it ended. This platform offers no portable way to wait
// without reaping, so the shell is reaped here; a group kill that follows
// races, in principle, with the reuse of its process group ID.
func awaitExit(cmd *exec.Cmd) (reap func() error) {
	err := cmd.Wait()
	return func() error { return err }
}

// shellProcAttr puts the shell in its own process group, so it can be
// killed with everything it started.
func shellProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
