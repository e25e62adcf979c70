//go:build unix

package callbench

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used so far, in user
// mode and in the kernel (system calls: for a store, the writes and syncs
// themselves). ok is false when the system cannot say.
func processCPU() (user, kernel time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), true
}
