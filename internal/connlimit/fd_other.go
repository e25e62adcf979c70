//go:build !unix

package connlimit

// FDCap reports no limit where the process has no RLIMIT_NOFILE.
func FDCap(int) (conns int, fdLimit uint64, ok bool) { return 0, 0, false }
