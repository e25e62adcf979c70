package execbox

import "syscall"

// runnerProcAttr puts a runner in its own process group, so that it is
// killed with everything it started, and has the kernel kill it if the
// gateway dies first: guest code must not outlive the call that ran it.
func runnerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
