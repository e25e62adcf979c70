//go:build unix

package connlimit

import "syscall"

// FDCap raises the soft limit on open files to the hard limit, as a
// server should (Go does so at start; this makes it explicit and covers
// a process that lowered it), and returns how many connections fit in it
// with reserve descriptors kept back for everything else (the store, the
// log, the drivers, the sandboxes, the admin listener). Connections get at
// least a quarter of the limit however large the reserve. ok is false
// when the limit is unknown or unlimited.
func FDCap(reserve int) (conns int, fdLimit uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, false
	}
	if rl.Cur < rl.Max {
		raised := rl
		raised.Cur = rl.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			rl = raised
		}
	}
	return capFor(rl.Cur, reserve)
}
