package tpmjs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"

	"github.com/toolgate/toolgate/drivers"
)

// connWatch records whether a request ever got a connection. The request
// line, headers and body are only written to a connection the transport
// handed out, and net/http reports every such hand-out through
// httptrace's GotConn, for HTTP/1 and HTTP/2 alike. A request that never
// got one wrote nothing: the executor cannot have seen the call.
type connWatch struct{ got atomic.Bool }

// context returns ctx with the watch attached.
func (w *connWatch) context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { w.got.Store(true) },
	})
}

// reportsConns reports whether a client's transport reports connections to
// httptrace. Only net/http's own transport is known to; a request through
// any other transport may have been sent without a trace of it, so its
// failures are never taken as proof that nothing was sent.
func reportsConns(c *http.Client) bool {
	if c.Transport == nil {
		_, ok := http.DefaultTransport.(*http.Transport)
		return ok
	}
	_, ok := c.Transport.(*http.Transport)
	return ok
}

// proxyHost returns the host of the proxy a client's transport uses for
// url, or "" for none or when it cannot tell. The proxy's credentials, if
// any, are never part of it.
func proxyHost(c *http.Client, rawURL string) string {
	t, ok := c.Transport.(*http.Transport)
	if c.Transport == nil {
		t, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok || t.Proxy == nil {
		return ""
	}
	req, err := http.NewRequest(http.MethodPost, rawURL, nil)
	if err != nil {
		return ""
	}
	u, err := t.Proxy(req)
	if err != nil || u == nil {
		return ""
	}
	return u.Host
}

// notSent is the error of a call that never reached the executor: ctx or
// callCtx ended, or the connection could not be made, before a byte of the
// request was written. It is marked drivers.ErrNotDispatched, so that a
// retry with the same request id may run the call.
func (d *Driver) notSent(ctx, callCtx context.Context, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // the URL is named once, in the message
	}
	return drivers.NotDispatched(fmt.Errorf("tpmjs %s: %s; nothing was sent: %w", d.name, d.unreached(ctx, callCtx, err), err))
}

// unreached says, for an operator, why no connection to the executor was
// made.
func (d *Driver) unreached(ctx, callCtx context.Context, err error) string {
	at := "the executor at " + d.baseURL
	var opErr *net.OpError
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return "the call was abandoned before a connection to " + at + " was made"
	case ctx.Err() != nil:
		return "the caller's deadline passed before a connection to " + at + " was made"
	case callCtx.Err() != nil:
		return "the driver's time limit passed before a connection to " + at + " was made"
	case drivers.TLSFailure(err) != "":
		return at + " " + drivers.TLSFailure(err)
	case d.proxyHost != "" || errors.As(err, &opErr) && opErr.Op == "proxyconnect":
		// A refused tunnel is a bare error ("Forbidden"): only the
		// configuration tells that a proxy was in the way.
		if d.proxyHost != "" {
			return at + " could not be reached through the proxy at " + d.proxyHost
		}
		return at + " could not be reached through its proxy"
	case drivers.DialFailure(err) != "":
		return at + " " + drivers.DialFailure(err)
	}
	return at + " could not be reached"
}
