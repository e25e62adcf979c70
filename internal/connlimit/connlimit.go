// Package connlimit caps the connections a gateway holds across all its
// listeners (gRPC and the HTTP doors), so that it never runs out of file
// descriptors, and makes room at the cap by closing idle connections
// rather than leaving new ones in the kernel's backlog.
//
// A connection is idle while it carries no request: an HTTP connection
// between requests (keep-alive) or before its first, a gRPC connection
// with no call in flight. At the cap, a new connection is accepted and
// the idle connection that never carried a request and has waited
// longest is closed, else the one idle longest; only when every
// connection is busy does the new one wait, accepted but unserved, for
// one to close or fall idle. So a flood of idle connections costs each
// attacker its own connections, never a legitimate caller's call.
package connlimit

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// Limiter holds the count and the idleness of every connection it
// admitted. It is safe for concurrent use.
type Limiter struct {
	max    int
	onFull func()
	now    func() time.Time

	mu      sync.Mutex
	conns   map[*Conn]struct{}
	byAddr  map[connAddr]*Conn
	changed chan struct{}
}

// New returns a limiter of max connections; onFull, if set, is called
// each time a new connection finds every slot taken.
func New(max int, onFull func()) *Limiter {
	return &Limiter{max: max, onFull: onFull, now: time.Now,
		conns: map[*Conn]struct{}{}, byAddr: map[connAddr]*Conn{}, changed: make(chan struct{})}
}

// Max is the number of connections the limiter holds at most.
func (l *Limiter) Max() int { return l.max }

// Open is the number of connections held now.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Listener returns inner counted against the limiter.
func (l *Limiter) Listener(inner net.Listener) net.Listener {
	return &listener{Listener: inner, l: l, done: make(chan struct{})}
}

type listener struct {
	net.Listener
	l         *Limiter
	done      chan struct{}
	closeOnce sync.Once
}

// Accept takes the next connection and admits it, shedding an idle one
// at the cap or, when every connection is busy, waiting for a slot.
func (ln *listener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	conn, ok := ln.l.admit(c, ln.done)
	if !ok {
		c.Close()
		return nil, net.ErrClosed
	}
	return conn, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (ln *listener) Close() error {
	err := ln.Listener.Close()
	ln.closeOnce.Do(func() { close(ln.done) })
	return err
}

// admit makes room for c and tracks it; false when done closed first.
func (l *Limiter) admit(c net.Conn, done <-chan struct{}) (*Conn, bool) {
	signalled := false
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			conn := l.trackLocked(c)
			l.mu.Unlock()
			return conn, true
		}
		if !signalled && l.onFull != nil {
			signalled = true
			l.onFull()
		}
		if victim := l.oldestIdleLocked(); victim != nil {
			l.forgetLocked(victim)
			conn := l.trackLocked(c)
			l.mu.Unlock()
			victim.Conn.Close()
			return conn, true
		}
		wait := l.changed
		l.mu.Unlock()
		select {
		case <-wait:
		case <-done:
			return nil, false
		}
	}
}

func (l *Limiter) trackLocked(c net.Conn) *Conn {
	conn := &Conn{Conn: c, l: l, idleSince: l.now()}
	conn.key, conn.keyed = keyOf(c.LocalAddr(), c.RemoteAddr())
	l.conns[conn] = struct{}{}
	if conn.keyed {
		l.byAddr[conn.key] = conn
	}
	return conn
}

// forgetLocked drops c from the count and wakes an Accept waiting.
func (l *Limiter) forgetLocked(c *Conn) {
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if c.keyed && l.byAddr[c.key] == c {
		delete(l.byAddr, c.key)
	}
	l.broadcastLocked()
}

func (l *Limiter) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// oldestIdleLocked is the idle connection to close first: one that never
// carried a request before one that did, the longest idle first.
func (l *Limiter) oldestIdleLocked() *Conn {
	var best *Conn
	for c := range l.conns {
		if !c.idleLocked() {
			continue
		}
		if best == nil || (!c.used && best.used) ||
			(c.used == best.used && c.idleSince.Before(best.idleSince)) {
			best = c
		}
	}
	return best
}

// Conn is a connection the limiter admitted; its first Close gives its
// slot back.
type Conn struct {
	net.Conn
	l     *Limiter
	key   connAddr
	keyed bool
	once  sync.Once

	// Guarded by l.mu.
	httpBusy  bool
	calls     int
	used      bool
	idleSince time.Time
}

func (c *Conn) idleLocked() bool { return !c.httpBusy && c.calls == 0 }

// Close closes the connection and gives its slot back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
	})
	return err
}

// update changes c's state under the lock, noting when it falls idle and
// waking an Accept that waits for an idle connection to close.
func (c *Conn) update(f func()) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	wasIdle := c.idleLocked()
	f()
	if !wasIdle && c.idleLocked() {
		c.idleSince = c.l.now()
		c.l.broadcastLocked()
	}
	if !c.idleLocked() {
		c.used = true
	}
}

// HTTPConnState is an http.Server's ConnState hook: a connection serving
// a request (or, over HTTP/2, a stream) is busy; a new or keep-alive one
// is idle; a hijacked one is busy until it closes.
func (l *Limiter) HTTPConnState(nc net.Conn, s http.ConnState) {
	c := connOf(nc)
	if c == nil {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		c.update(func() { c.httpBusy = true })
	case http.StateIdle:
		c.update(func() { c.httpBusy = false })
	}
}

// connOf finds the limiter's Conn under a served connection.
func connOf(nc net.Conn) *Conn {
	for {
		switch c := nc.(type) {
		case *Conn:
			return c
		case *tls.Conn:
			nc = c.NetConn()
		default:
			return nil
		}
	}
}

// ServerOptions are the gRPC server options that mark a connection busy
// while it has calls in flight. They are interceptors rather than a stats
// handler: a stats handler makes gRPC build and copy an event for every
// header and message of every call, which cost a tenth of a call's
// allocations.
func (l *Limiter) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			defer l.busy(ctx)()
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			defer l.busy(ss.Context())()
			return handler(srv, ss)
		}),
	}
}

// busy marks the connection of the call in ctx busy and returns what
// marks the call's end. gRPC tells a call its connection's addresses
// only, which name one TCP connection.
func (l *Limiter) busy(ctx context.Context) (done func()) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return func() {}
	}
	key, ok := keyOf(p.LocalAddr, p.Addr)
	if !ok {
		return func() {}
	}
	l.mu.Lock()
	c := l.byAddr[key]
	l.mu.Unlock()
	if c == nil {
		return func() {}
	}
	c.update(func() { c.calls++ })
	return func() { c.update(func() { c.calls-- }) }
}

// connAddr names one connection by its two ends: TCP addresses as
// values, so that finding a call's connection allocates nothing; any
// other kind as text.
type connAddr struct {
	local, remote netip.AddrPort
	other         string
}

func keyOf(local, remote net.Addr) (connAddr, bool) {
	if local == nil || remote == nil {
		return connAddr{}, false
	}
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if lok && rok {
		return connAddr{local: l.AddrPort(), remote: r.AddrPort()}, true
	}
	return connAddr{other: local.Network() + " " + local.String() + " " + remote.String()}, true
}
