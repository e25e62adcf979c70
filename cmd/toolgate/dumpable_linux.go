package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// hideProcess makes the gateway process non-dumpable: no process of the
// same user may ptrace it or read its memory, /proc/<pid>/environ (API keys,
// key seeds) or file descriptors, and it leaves no core dump.
func hideProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE: %w", err)
	}
	return nil
}
