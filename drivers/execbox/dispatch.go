package execbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/toolgate/toolgate/drivers"
)

// errNothingSent is wrapped by transport.send when it proves that no byte
// of the message can have reached the runner.
var errNothingSent = errors.New("no byte written")

// errHandshake is wrapped by dialWS when the runner answered the WebSocket
// handshake with something else than a session.
var errHandshake = errors.New("websocket handshake refused")

// notSent is the error of a call whose execute message never left the
// gateway: the runner could not be reached or started, or ctx ended first.
// It is marked drivers.ErrNotDispatched, so that a retry with the same
// request id may run the call.
func (d *Driver) notSent(ctx context.Context, err error) error {
	return drivers.NotDispatched(fmt.Errorf("execbox %s: %s; nothing was sent: %w", d.name, d.unreached(ctx, err), err))
}

// unreached says, for an operator, why no session with a runner was opened.
func (d *Driver) unreached(ctx context.Context, err error) string {
	at := "the runner command " + d.runnerName()
	if d.url != "" {
		at = "the runner at " + d.runnerName()
	}
	switch {
	case errors.Is(err, errClosed):
		return "the driver is closed; " + at + " was not contacted"
	case errors.Is(ctx.Err(), context.Canceled):
		return "the call was abandoned before a session with " + at + " was opened"
	case ctx.Err() != nil:
		return "the caller's deadline passed before a session with " + at + " was opened"
	case errors.Is(err, context.DeadlineExceeded):
		return at + " opened no session within the execution's time limit"
	case d.url == "":
		return at + " could not be started"
	case errors.Is(err, errHandshake):
		return at + " refused the WebSocket session"
	case drivers.DialFailure(err) != "":
		return at + " " + drivers.DialFailure(err)
	case drivers.TLSFailure(err) != "":
		return at + " " + drivers.TLSFailure(err)
	}
	return at + " could not be reached"
}

// runnerName names the runner in messages: the WebSocket URL without its
// query, which may hold a token, or the command's path.
func (d *Driver) runnerName() string {
	if d.url == "" {
		return d.cmd.path
	}
	u, err := url.Parse(d.url)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery, u.ForceQuery = "", false
	return u.String()
}
