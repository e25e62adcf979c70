package connlimit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener hands out the server ends of pipes dialled through it.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error   { close(p.closed); return nil }
func (p *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// dial returns the client end of a new connection, once it is offered.
func (p *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	go func() { p.conns <- server }()
	return client
}

// isClosed reports whether the server closed the client end's peer.
func isClosed(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

func TestAtTheCapIdleConnectionsAreShedFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		// states puts the first three connections in their states.
		states func(l *Limiter, c []net.Conn)
		// shed is the connection the fourth must replace; -1 for none.
		shed int
	}{
		{"a connection that never sent a request goes before a keep-alive one", func(l *Limiter, c []net.Conn) {
			l.HTTPConnState(c[0], http.StateActive)
			l.HTTPConnState(c[0], http.StateIdle)
		}, 1},
		{"among keep-alive connections the longest idle goes", func(l *Limiter, c []net.Conn) {
			for _, i := range []int{2, 0, 1} {
				l.HTTPConnState(c[i], http.StateActive)
				time.Sleep(time.Second)
				l.HTTPConnState(c[i], http.StateIdle)
			}
		}, 2},
		{"a busy connection is never shed", func(l *Limiter, c []net.Conn) {
			l.HTTPConnState(c[0], http.StateActive)
			l.HTTPConnState(c[1], http.StateActive)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := New(3, nil)
				pl := newPipeListener()
				ln := l.Listener(pl)
				defer ln.Close()
				var clients []net.Conn
				var served []net.Conn
				for range 3 {
					clients = append(clients, pl.dial())
					c, err := ln.Accept()
					if err != nil {
						t.Fatal(err)
					}
					served = append(served, c)
					time.Sleep(time.Second)
				}
				tc.states(l, served)
				clients = append(clients, pl.dial())
				if _, err := ln.Accept(); err != nil {
					t.Fatal(err)
				}
				if l.Open() != 3 {
					t.Fatalf("%d connections open, want 3", l.Open())
				}
				for i, c := range clients[:3] {
					if got := isClosed(c); got != (i == tc.shed) {
						t.Errorf("connection %d closed: %v", i, got)
					}
				}
			})
		})
	}
}

func TestWhenAllAreBusyANewConnectionWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := 0
		l := New(1, func() { full++ })
		pl := newPipeListener()
		ln := l.Listener(pl)
		defer ln.Close()
		pl.dial()
		busy, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		l.HTTPConnState(busy, http.StateActive)
		accepted := make(chan net.Conn)
		go func() {
			c, _ := ln.Accept()
			accepted <- c
		}()
		pl.dial()
		synctest.Wait()
		select {
		case <-accepted:
			t.Fatal("a connection beyond the cap was served while the other was busy")
		default:
		}
		if full != 1 {
			t.Fatalf("the full cap was counted %d times, want 1", full)
		}
		l.HTTPConnState(busy, http.StateIdle)
		if c := <-accepted; c == nil || l.Open() != 1 {
			t.Fatalf("once the busy connection fell idle: %v, %d open", c, l.Open())
		}
	})
}

func TestCloseEndsAWaitingAccept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(1, nil)
		pl := newPipeListener()
		ln := l.Listener(pl)
		pl.dial()
		c, _ := ln.Accept()
		l.HTTPConnState(c, http.StateActive)
		done := make(chan error)
		go func() {
			_, err := ln.Accept()
			done <- err
		}()
		pl.dial()
		synctest.Wait()
		ln.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v", err)
		}
		c.Close()
		if l.Open() != 0 {
			t.Fatalf("%d open after every close", l.Open())
		}
	})
}

func TestCapFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		fds           uint64
		reserve, want int
		ok            bool
	}{
		{"512 descriptors, the default reserve", 512, 64 + 4*64, 192, true},
		{"a reserve larger than the limit leaves a quarter", 512, 1000, 128, true},
		{"a large limit", 1 << 20, 320, 1<<20 - 320, true},
		{"unlimited", 1 << 62, 320, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _, ok := capFor(tc.fds, tc.reserve)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("got %d %v, want %d %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
