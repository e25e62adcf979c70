package workspace

import (
	"os/exec"

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
