package drivers

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestNotDispatched(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("tpmjs t: executor at http://127.0.0.1:1 refused the connection; nothing was sent: %w", fs.ErrNotExist)
	tests := []struct {
		name           string
		err            error
		wantDispatched bool // errors.Is(err, ErrNotDispatched) is false
		wantCause      bool // errors.Is(err, fs.ErrNotExist)
		wantMessage    string
	}{
		{name: "a wrapped failure is not dispatched and keeps its cause and message",
			err: NotDispatched(cause), wantCause: true, wantMessage: cause.Error()},
		{name: "the mark survives further wrapping",
			err: fmt.Errorf("gateway: %w", NotDispatched(cause)), wantCause: true, wantMessage: "gateway: " + cause.Error()},
		{name: "the mark survives inside evidence",
			err: &EvidenceError{Err: NotDispatched(cause)}, wantCause: true, wantMessage: cause.Error()},
		{name: "an unmarked failure counts as dispatched",
			err: cause, wantDispatched: true, wantCause: true, wantMessage: cause.Error()},
		{name: "ErrNotDispatched's text alone is no mark",
			err: errors.New(ErrNotDispatched.Error()), wantDispatched: true, wantMessage: ErrNotDispatched.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.err, ErrNotDispatched); got == tc.wantDispatched {
				t.Errorf("errors.Is(%v, ErrNotDispatched) = %v, want %v", tc.err, got, !tc.wantDispatched)
			}
			if got := errors.Is(tc.err, fs.ErrNotExist); got != tc.wantCause {
				t.Errorf("errors.Is(%v, cause) = %v, want %v", tc.err, got, tc.wantCause)
			}
			if tc.err.Error() != tc.wantMessage {
				t.Errorf("message %q, want %q", tc.err.Error(), tc.wantMessage)
			}
		})
	}
}

func TestNotDispatchedKeepsNilAndTypedCauses(t *testing.T) {
	t.Parallel()
	if err := NotDispatched(nil); err != nil {
		t.Errorf("NotDispatched(nil) = %v, want nil", err)
	}
	arg := &ArgError{Arg: "path", Err: fs.ErrInvalid}
	var got *ArgError
	if err := NotDispatched(arg); !errors.As(err, &got) || got != arg {
		t.Errorf("errors.As through NotDispatched found %v, want the wrapped *ArgError", got)
	}
}
