package connlimit

import "math"

// capFor is the connections that fit in a limit of fds descriptors with
// reserve kept back, at least a quarter of the limit.
func capFor(fds uint64, reserve int) (conns int, fdLimit uint64, ok bool) {
	if fds == 0 || fds >= math.MaxInt32 {
		return 0, fds, false
	}
	n := int(fds)
	return max(n-reserve, n/4), fds, true
}
