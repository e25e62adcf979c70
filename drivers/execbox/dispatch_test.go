package execbox

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
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

// silentRunner returns a ws:// URL of a server that accepts connections and
// never answers the handshake.
func silentRunner(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return "ws://" + l.Addr().String()
}

// executes counts the sessions of r that received execute.
func executes(r *execboxtest.Runner) func() int {
	return func() int {
		n := 0
		for _, s := range r.Sessions() {
			if len(ofType(s, "execute")) > 0 {
				n++
			}
		}
		return n
	}
}

// noRunner counts nothing: the case has no runner that could hear execute.
func noRunner() int { return 0 }

// dispatchCase is one way a call can fail, with what a retry may do
// about it: run the call again (not dispatched) or never (the runner may
// have run the guest code).
type dispatchCase struct {
	name string
	// setup returns the driver, the context of the call, the call and a
	// count of the execute messages that reached a runner.
	setup func(t *testing.T) (d *Driver, ctx context.Context, call drivers.Call, reached func() int)
	// wantNotDispatched: the error must be marked drivers.ErrNotDispatched
	// and no runner may have received execute. Otherwise the error must
	// not be marked and the runner did receive execute: a retry would
	// run the guest code twice.
	wantNotDispatched bool
	wantErr           string // a fragment of the error; "" for a Result
	wantExit          int    // the Result's exit code when wantErr is ""
	wantIs            error  // a cause the error must keep
}

// scripted returns a setup for a fake runner on transport tr playing
// script, with a call of tools; ctx may be nil for a plain one.
func scripted(tr transportCase, script execboxtest.Script, cfg Config, tools drivers.ToolCaller,
	ctx func(t *testing.T) context.Context) func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
	return func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
		d, r := tr.start(t, script, cfg)
		c := runCtx(t)
		if ctx != nil {
			c = ctx(t)
		}
		return d, c, newCall(tools, map[string]any{"timeoutMs": 300}), executes(r)
	}
}

// expired returns a context whose deadline passed a second ago.
func expired(t *testing.T) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancel)
	return ctx
}

// plain is a setup of a driver on cfg with a plain call and no runner.
func plain(cfg Config) func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
	return func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
		return newDriver(t, cfg), runCtx(t), newCall(nil, nil), noRunner
	}
}

// notDispatchedCases are failures before execute left the gateway.
func notDispatchedCases() []dispatchCase {
	cases := []dispatchCase{
		{name: "ws/a runner that refuses the connection: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				return plain(Config{URL: "ws://" + deadAddr(t)})(t)
			},
			wantErr: "refused the connection; nothing was sent"},
		{name: "ws/a runner whose host name does not resolve: nothing was sent",
			setup:   plain(Config{URL: "ws://runner.invalid/run?token=secret"}),
			wantErr: "the runner at ws://runner.invalid/run could not be found: its host name did not resolve; nothing was sent"},
		{name: "ws/a runner with an untrusted certificate: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				var n atomic.Int32
				srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
				t.Cleanup(srv.Close)
				d := newDriver(t, Config{URL: "wss" + strings.TrimPrefix(srv.URL, "https")})
				return d, runCtx(t), newCall(nil, nil), func() int { return int(n.Load()) }
			},
			wantErr: "presented a certificate that is not trusted; nothing was sent"},
		{name: "ws/a runner that refuses the WebSocket session: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(http.StatusServiceUnavailable)
				}))
				t.Cleanup(srv.Close)
				return plain(Config{URL: "ws" + strings.TrimPrefix(srv.URL, "http")})(t)
			},
			wantErr: "refused the WebSocket session; nothing was sent: websocket handshake refused (HTTP 503)"},
		{name: "ws/a caller's deadline that passes during the handshake: nothing was sent, no timeout recorded",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				d := newDriver(t, Config{URL: silentRunner(t)})
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				t.Cleanup(cancel)
				return d, ctx, newCall(nil, nil), noRunner
			},
			wantErr: "the caller's deadline passed before a session with the runner at ws://", wantIs: context.DeadlineExceeded},
		{name: "ws/the execution's time limit passing during the handshake: nothing was sent, no timeout recorded",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				d := newDriver(t, Config{URL: silentRunner(t)})
				return d, runCtx(t), newCall(nil, map[string]any{"timeoutMs": 100}), noRunner
			},
			wantErr: "opened no session within the execution's time limit; nothing was sent"},
		{name: "ws/a caller that gives up during the handshake: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				d := newDriver(t, Config{URL: silentRunner(t)})
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return d, ctx, newCall(nil, nil), noRunner
			},
			wantErr: "the call was abandoned before a session", wantIs: context.Canceled},
		{name: "stdio/a runner command that can no longer be started: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				path := filepath.Join(t.TempDir(), "runner")
				if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o700); err != nil {
					t.Fatal(err)
				}
				d := newDriver(t, Config{Command: []string{path}})
				os.Remove(path) // after New found it, before the call
				return d, runCtx(t), newCall(nil, nil), noRunner
			},
			wantErr: "runner could not be started; nothing was sent", wantIs: os.ErrNotExist},
		{name: "stdio/a pooled runner that closed its input before execute: nothing was sent",
			setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
				marker := filepath.Join(t.TempDir(), "stdin-closed")
				d := newDriver(t, Config{Pool: 1, Command: []string{"/bin/sh", "-c", `exec 0<&-; : > "$0"; exec sleep 30`, marker}})
				eventually(t, "the pooled runner closed its stdin", func() bool {
					_, err := os.Stat(marker)
					return err == nil && len(idlePids(d)) == 1
				})
				return d, runCtx(t), newCall(nil, nil), noRunner
			},
			wantErr: "the runner took none of the execute message; nothing was sent: no byte written: write"},
	}
	for _, tr := range transports {
		cases = append(cases,
			dispatchCase{name: tr.name + "/a caller's deadline that passed before the call: no runner contacted, no timeout recorded",
				setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
					d, r := tr.start(t, execboxtest.Script{started(), done(1)}, Config{})
					return d, expired(t), newCall(nil, nil), func() int { return r.Starts() + len(r.Sessions()) }
				},
				wantErr: "the caller's deadline passed before a session", wantIs: context.DeadlineExceeded},
			dispatchCase{name: tr.name + "/a closed driver: no runner contacted",
				setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
					d, r := tr.start(t, execboxtest.Script{started(), done(1)}, Config{})
					d.Close()
					return d, runCtx(t), newCall(nil, nil), func() int { return r.Starts() + len(r.Sessions()) }
				},
				wantErr: "the driver is closed", wantIs: errClosed},
		)
	}
	for i := range cases {
		cases[i].wantNotDispatched = true
	}
	return cases
}

// dispatchedCases are failures after execute left: the runner may have
// run the guest code, and its nested calls may have run.
func dispatchedCases() []dispatchCase {
	var cases []dispatchCase
	for _, tr := range transports {
		cancelling := newTools()
		cases = append(cases,
			dispatchCase{name: tr.name + "/a runner that dies after receiving execute may have run it",
				setup:   scripted(tr, execboxtest.Script{execboxtest.Crash()}, Config{}, nil, nil),
				wantErr: "ended before done"},
			dispatchCase{name: tr.name + "/a runner that hangs until the deadline may have run it: a timeout Result",
				setup:    scripted(tr, execboxtest.Script{started(), hang()}, Config{CancelGrace: 50 * time.Millisecond}, nil, nil),
				wantExit: exitCode(codeTimeout)},
			dispatchCase{name: tr.name + "/a runner that answers garbage, then dies, may have run it",
				setup:   scripted(tr, execboxtest.Script{started(), raw("\x00not json{"), execboxtest.Crash()}, Config{}, nil, nil),
				wantErr: "ended before done"},
			dispatchCase{name: tr.name + "/a runner that dies after a nested call ran may have run it",
				setup:   scripted(tr, execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1"), execboxtest.Crash()}, Config{}, newTools(), nil),
				wantErr: "ended before done"},
			dispatchCase{name: tr.name + "/a caller that gives up mid-run may have run it",
				setup: func(t *testing.T) (*Driver, context.Context, drivers.Call, func() int) {
					ctx, cancel := context.WithCancel(context.Background())
					t.Cleanup(cancel)
					cancelling.handle = func(ctx context.Context, _, _ string, _ any) drivers.NestedResult {
						cancel()
						<-ctx.Done()
						return drivers.NestedResult{Code: "internal_error", Message: "cancelled"}
					}
					script := execboxtest.Script{started(), callTool("c1", "tools", "echo", nil), awaitResult("c1")}
					return scripted(tr, script, Config{}, cancelling, func(*testing.T) context.Context { return ctx })(t)
				},
				wantErr: "cancelled", wantIs: context.Canceled},
		)
	}
	return cases
}

// TestRunMarksOnlyCallsThatNeverLeft attacks the retry rule from both
// sides: a failure before execute left must be marked not dispatched (or
// the request id is burnt although nothing ran), and a failure after must
// not be (or a retry runs guest code, and its nested calls, twice).
func TestRunMarksOnlyCallsThatNeverLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range append(notDispatchedCases(), dispatchedCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, ctx, call, reached := tc.setup(t)
			start := time.Now()
			r, err := d.Run(ctx, call)
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("Run took %v, want a prompt failure", elapsed)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Run error = %v, want a Result with exit %d", err, tc.wantExit)
			case tc.wantErr == "" && r.ExitCode != tc.wantExit:
				t.Errorf("Run = exit %d, stderr %q; want exit %d", r.ExitCode, r.Stderr, tc.wantExit)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Run = %+v, error %v; want an error containing %q", r, err, tc.wantErr)
			}
			if got := errors.Is(err, drivers.ErrNotDispatched); got != tc.wantNotDispatched {
				t.Errorf("errors.Is(%v, ErrNotDispatched) = %v, want %v", err, got, tc.wantNotDispatched)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Run error = %v, want it to wrap %v", err, tc.wantIs)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "execbox execbox: ") {
				t.Errorf("Run error = %q, want it to name the driver", err)
			}
			if err != nil && strings.Contains(err.Error(), "token=secret") {
				t.Errorf("Run error = %q quotes the runner URL's query", err)
			}
			n := reached()
			switch {
			case tc.wantNotDispatched && n != 0:
				t.Errorf("a runner received execute %d times in a call marked not dispatched", n)
			case !tc.wantNotDispatched && n != 1:
				t.Errorf("the runner received execute %d times, want 1: this case must be one where execute left", n)
			}
			if tc.wantNotDispatched && r.ExitCode != 0 {
				t.Errorf("a call that was never sent got a Result with exit %d (%q): no code ran, none failed or timed out", r.ExitCode, r.Stderr)
			}
		})
	}
}
