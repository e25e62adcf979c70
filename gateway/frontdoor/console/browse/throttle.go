package browse

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// signInThrottle bounds failed sign-ins per client address: after
// maxFailures in a window, that address may not try again until the
// window ends, so that the sign-in form is no oracle for guessing keys at
// speed. A person elsewhere is not locked out by someone else's guesses
// (behind a proxy every client shares the proxy's address; its own
// limits apply there).
type signInThrottle struct {
	mu       sync.Mutex
	byAddr   map[string]*failures
	window   time.Duration
	max      int
	maxAddrs int
	now      func() time.Time
}

type failures struct {
	n     int
	since time.Time
}

func newSignInThrottle(now func() time.Time) *signInThrottle {
	return &signInThrottle{byAddr: map[string]*failures{}, window: time.Minute, max: 10, maxAddrs: 10000, now: now}
}

// clientAddr is the host of the request's peer.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// allowed reports whether addr may try to sign in now.
func (t *signInThrottle) allowed(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.byAddr[addr]
	if !ok {
		return true
	}
	if t.now().Sub(f.since) >= t.window {
		delete(t.byAddr, addr)
		return true
	}
	return f.n < t.max
}

// failed counts a failed sign-in from addr. When the table is full, the
// windows that ended are dropped; if none has, the table starts over
// rather than grow.
func (t *signInThrottle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	f, ok := t.byAddr[addr]
	if !ok || now.Sub(f.since) >= t.window {
		if len(t.byAddr) >= t.maxAddrs {
			for a, g := range t.byAddr {
				if now.Sub(g.since) >= t.window {
					delete(t.byAddr, a)
				}
			}
			if len(t.byAddr) >= t.maxAddrs {
				t.byAddr = map[string]*failures{}
			}
		}
		f = &failures{since: now}
		t.byAddr[addr] = f
	}
	f.n++
}
