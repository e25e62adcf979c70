package drivers

import "errors"

// ErrNotDispatched marks an error from Driver.Run that proves the call
// never reached the tool: the driver failed before any byte of the call
// left the gateway (connection refused, a DNS or TLS failure, a runner
// that could not be started, a deadline already passed). The gateway then
// closes the attempt as not dispatched, and a retry with the same request
// id runs the call. A driver must not use it when in any doubt: an error
// without it counts as "the tool may have run", and the request id is
// never run again.
var ErrNotDispatched = errors.New("the call was not dispatched")

// notDispatched is an error carrying ErrNotDispatched beside its cause.
type notDispatched struct{ err error }

func (e *notDispatched) Error() string { return e.err.Error() }

// Unwrap lets errors.Is find both the cause and ErrNotDispatched.
func (e *notDispatched) Unwrap() []error { return []error{e.err, ErrNotDispatched} }

// NotDispatched wraps err, a failure that happened before the call left
// the gateway, so that errors.Is(err, ErrNotDispatched) reports true. It
// returns nil for a nil err.
func NotDispatched(err error) error {
	if err == nil {
		return nil
	}
	return &notDispatched{err: err}
}
