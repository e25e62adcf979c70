package workspace

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// awaitExit blocks until the started cmd has exited and returns the function
// that reaps it. Until it is reaped the shell stays a zombie that keeps its
// process group ID reserved, so killing the group in between can never hit
// an unrelated group that reused the ID.
func awaitExit(cmd *exec.Cmd) (reap func() error) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return cmd.Wait
		}
	}
}

// shellProcAttr puts the shell in its own process group, so it can be
// killed with everything it started, and has the kernel kill it if the
// gateway dies first: a call whose gateway was killed must not go on
// changing the workspace unobserved, with no evidence of what it did.
func shellProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
