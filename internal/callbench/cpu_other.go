//go:build !unix

package callbench

import "time"

// processCPU reports that the system cannot say how much CPU the process
// used.
func processCPU() (user, kernel time.Duration, ok bool) { return 0, 0, false }
