//go:build unix && !linux

package execbox

import "syscall"

// runnerProcAttr puts a runner in its own process group, so that it is
// killed with everything it started.
func runnerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
