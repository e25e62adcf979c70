package tpmjs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// deadAddr returns a loopback address on which nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// stalledDial is a transport whose connections never complete: the dial
// waits until its context ends.
func stalledDial() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}}
}

// dispatchCase is one way a call can fail, with what a retry may do
// about it: run the call again (not dispatched) or never (the executor may
// have run it).
type dispatchCase struct {
	name string
	// setup returns the driver, the context of the call and a count of
	// the /execute-tool requests that reached an executor.
	setup func(t *testing.T) (d *Driver, ctx context.Context, reached func() int)
	// wantNotDispatched: the error must be marked drivers.ErrNotDispatched
	// and nothing may have reached the executor. Otherwise the call must
	// not be marked, and the executor did receive it: a retry that ran
	// it again would run it twice.
	wantNotDispatched bool
	closeFirst        bool   // Close the driver before the call
	wantErr           string // a fragment of the error; "" for a Result
	wantExit          int    // the Result's exit code when wantErr is ""
	wantIs            error  // a cause the error must keep
}

// fakeCase starts a fake executor, lets edit break it and returns a
// setup for a call of the echo tool on it.
func fakeCase(edit func(t *testing.T, fake *tpmjstest.Executor) (context.Context, func(*Config))) func(t *testing.T) (*Driver, context.Context, func() int) {
	return func(t *testing.T) (*Driver, context.Context, func() int) {
		fake := tpmjstest.New(t, tpmjstest.NodeV10)
		ctx, cfg := edit(t, fake)
		if ctx == nil {
			ctx = context.Background()
		}
		return newDriver(t, fake.URL, cfg), ctx, func() int {
			n := 0
			for _, r := range fake.Requests() {
				if r.Method == http.MethodPost {
					n++
				}
			}
			return n
		}
	}
}

// nothingReached counts no request: the setup's executor does not exist.
func nothingReached() int { return 0 }

var dispatchCases = []dispatchCase{
	{
		name: "an executor that refuses the connection: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			return newDriver(t, "http://"+deadAddr(t), nil), context.Background(), nothingReached
		},
		wantNotDispatched: true, wantErr: "refused the connection; nothing was sent: dial tcp",
	},
	{
		name: "an executor whose host name does not resolve: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			return newDriver(t, "http://executor.invalid", nil), context.Background(), nothingReached
		},
		wantNotDispatched: true, wantErr: "the executor at http://executor.invalid could not be found: its host name did not resolve; nothing was sent",
	},
	{
		name: "an executor with an untrusted certificate: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			var n atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
			t.Cleanup(srv.Close)
			return newDriver(t, srv.URL, nil), context.Background(), func() int { return int(n.Load()) }
		},
		wantNotDispatched: true, wantErr: "presented a certificate that is not trusted; nothing was sent",
	},
	{
		name: "a proxy that refuses the connection: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			proxy := &url.URL{Scheme: "http", Host: deadAddr(t)}
			client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
			return newDriver(t, "http://executor.invalid", func(c *Config) { c.HTTPClient = client }),
				context.Background(), nothingReached
		},
		wantNotDispatched: true, wantErr: "could not be reached through the proxy at 127.0.0.1:",
	},
	{
		name: "a proxy that refuses the tunnel to an https executor: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			var n atomic.Int32
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodConnect {
					n.Add(1) // a request that was not a tunnel: the call itself
				}
				w.WriteHeader(http.StatusForbidden)
			}))
			t.Cleanup(proxy.Close)
			pu, _ := url.Parse(proxy.URL)
			client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
			return newDriver(t, "https://executor.invalid", func(c *Config) { c.HTTPClient = client }),
				context.Background(), func() int { return int(n.Load()) }
		},
		wantNotDispatched: true, wantErr: "could not be reached through the proxy at 127.0.0.1:",
	},
	{
		name: "a caller's deadline that passed before the call: nothing was sent, no timeout recorded",
		setup: fakeCase(func(t *testing.T, _ *tpmjstest.Executor) (context.Context, func(*Config)) {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx, nil
		}),
		wantNotDispatched: true, wantErr: "the caller's deadline passed before a connection to the executor at", wantIs: context.DeadlineExceeded,
	},
	{
		name: "a caller's deadline that passes while connecting: nothing was sent, no timeout recorded",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			t.Cleanup(cancel)
			return newDriver(t, "http://executor.invalid", func(c *Config) { c.HTTPClient = stalledDial() }), ctx, nothingReached
		},
		wantNotDispatched: true, wantErr: "the caller's deadline passed before a connection", wantIs: context.DeadlineExceeded,
	},
	{
		name: "the driver's time limit passing while connecting: nothing was sent, no timeout recorded",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			return newDriver(t, "http://executor.invalid", func(c *Config) {
				c.HTTPClient, c.CallTimeout = stalledDial(), 100*time.Millisecond
			}), context.Background(), nothingReached
		},
		wantNotDispatched: true, wantErr: "the driver's time limit passed before a connection",
	},
	{
		name: "a caller that gives up while connecting: nothing was sent",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return newDriver(t, "http://executor.invalid", func(c *Config) { c.HTTPClient = stalledDial() }), ctx, nothingReached
		},
		wantNotDispatched: true, wantErr: "the call was abandoned before a connection", wantIs: context.Canceled,
	},
	{
		name:       "a closed driver: nothing was sent",
		setup:      fakeCase(func(t *testing.T, _ *tpmjstest.Executor) (context.Context, func(*Config)) { return nil, nil }),
		closeFirst: true, wantNotDispatched: true, wantErr: "driver is closed; nothing was sent", wantIs: errClosed,
	},
	{
		name: "an executor that resets the connection after reading the request may have run it",
		setup: fakeCase(func(t *testing.T, fake *tpmjstest.Executor) (context.Context, func(*Config)) {
			fake.SetFlaky(1)
			return nil, nil
		}),
		wantErr: "POST ",
	},
	{
		name: "an executor over HTTP/2 that resets the stream after reading the request may have run it",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			var n atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != 2 {
					t.Errorf("request over %s, want HTTP/2", r.Proto)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				n.Add(1)
				panic(http.ErrAbortHandler) // RST_STREAM
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			return newDriver(t, srv.URL, func(c *Config) { c.HTTPClient = srv.Client() }),
				context.Background(), func() int { return int(n.Load()) }
		},
		wantErr: "POST ",
	},
	{
		name: "an executor that hangs until the deadline may have run it: a timeout Result",
		setup: fakeCase(func(t *testing.T, fake *tpmjstest.Executor) (context.Context, func(*Config)) {
			fake.SetDelay(20 * time.Second)
			return nil, func(c *Config) { c.CallTimeout = 200 * time.Millisecond }
		}),
		wantExit: ExitTimeout,
	},
	{
		name: "an executor that answers garbage may have run it: an executor-error Result",
		setup: fakeCase(func(t *testing.T, fake *tpmjstest.Executor) (context.Context, func(*Config)) {
			fake.SetBody("\x00\x01 not json", http.StatusOK)
			return nil, nil
		}),
		wantExit: ExitExecutorError,
	},
	{
		name: "a caller that gives up after the request was sent may have run it",
		setup: fakeCase(func(t *testing.T, fake *tpmjstest.Executor) (context.Context, func(*Config)) {
			fake.SetDelay(20 * time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				for len(fake.Requests()) == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
			t.Cleanup(cancel)
			return ctx, nil
		}),
		wantErr: "call abandoned", wantIs: context.Canceled,
	},
	{
		name: "a transport that reports no connections proves nothing: it sent the call, then failed",
		setup: func(t *testing.T) (*Driver, context.Context, func() int) {
			var n atomic.Int32
			client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				n.Add(1)
				return nil, errors.New("connection reset by peer")
			})}
			return newDriver(t, "http://executor.invalid", func(c *Config) { c.HTTPClient = client }),
				context.Background(), func() int { return int(n.Load()) }
		},
		wantErr: "connection reset by peer",
	},
}

// roundTripFunc is an http.RoundTripper that is not net/http's transport.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestRunMarksOnlyCallsThatNeverLeft attacks the retry rule from both
// sides: a failure before the request had a connection must be marked
// not dispatched (or the request id is burnt although nothing ran), and a
// failure after must not be (or a retry runs a call the executor may have
// run).
func TestRunMarksOnlyCallsThatNeverLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range dispatchCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, ctx, reached := tc.setup(t)
			if tc.closeFirst {
				d.Close()
			}
			start := time.Now()
			r, err := d.Run(ctx, call(tpmjstest.EchoTool, nil))
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("Run took %v, want a prompt failure", elapsed)
			}
			notDispatched := errors.Is(err, drivers.ErrNotDispatched)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Run error = %v, want a Result with exit %d", err, tc.wantExit)
			case tc.wantErr == "" && r.ExitCode != tc.wantExit:
				t.Errorf("Run = exit %d, stderr %q; want exit %d", r.ExitCode, r.Stderr, tc.wantExit)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Run = %+v, error %v; want an error containing %q", r, err, tc.wantErr)
			}
			if notDispatched != tc.wantNotDispatched {
				t.Errorf("errors.Is(%v, ErrNotDispatched) = %v, want %v", err, notDispatched, tc.wantNotDispatched)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Run error = %v, want it to wrap %v", err, tc.wantIs)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "tpmjs test: ") {
				t.Errorf("Run error = %q, want it to name the driver", err)
			}
			n := reached()
			switch {
			case tc.wantNotDispatched && n != 0:
				t.Errorf("the executor received %d requests of a call marked not dispatched", n)
			case !tc.wantNotDispatched && n != 1:
				t.Errorf("the executor received %d requests, want 1: this case must be one where the call left", n)
			}
			if tc.wantNotDispatched && r.ExitCode != 0 {
				t.Errorf("a call that was never sent got a Result with exit %d (%q): no tool ran, none failed or timed out", r.ExitCode, r.Stderr)
			}
		})
	}
}

// TestNotDispatchedMessageNamesTheExecutor checks the whole message an
// operator reads for the commonest case.
func TestNotDispatchedMessageNamesTheExecutor(t *testing.T) {
	t.Parallel()
	d := newDriver(t, "http://127.0.0.1:1", nil)
	_, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
	want := "tpmjs test: the executor at http://127.0.0.1:1 refused the connection; nothing was sent: dial tcp 127.0.0.1:1: connect: connection refused"
	if err == nil || err.Error() != want {
		t.Errorf("Run error = %v, want %q", err, want)
	}
}
