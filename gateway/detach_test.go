package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

type detachTestKey struct{}

func TestDetachIsWithoutCancel(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), detachTestKey{}, "v"))
	parent, stop := context.WithDeadline(parent, time.Now().Add(time.Hour))
	defer stop()
	d := detach(parent)
	child, cancelChild := context.WithCancel(context.WithValue(d, detachTestKey{}, "w"))
	defer cancelChild()
	fired := make(chan struct{})
	context.AfterFunc(d, func() { close(fired) })
	cancel(errors.New("the caller left"))

	if err := d.Err(); err != nil {
		t.Errorf("Err() = %v after the caller's context was cancelled, want nil", err)
	}
	if d.Done() != nil {
		t.Error("Done() is not nil: the detached context could be cancelled")
	}
	if _, ok := d.Deadline(); ok {
		t.Error("the caller's deadline reached the detached context")
	}
	if cause := context.Cause(d); cause != nil {
		t.Errorf("context.Cause = %v, want nil as for context.WithoutCancel", cause)
	}
	if got := d.Value(detachTestKey{}); got != "v" {
		t.Errorf("Value = %v, want the caller's value", got)
	}
	if child.Err() != nil || context.Cause(child) != nil {
		t.Errorf("a context derived from the detached one was cancelled: %v", context.Cause(child))
	}
	select {
	case <-fired:
		t.Error("context.AfterFunc ran: the caller's cancellation got through")
	case <-time.After(10 * time.Millisecond):
	}
	if got := child.Value(detachTestKey{}); got != "w" {
		t.Errorf("Value through a child = %v, want w", got)
	}
}

// TestDetachedLookupsDoNotAllocate: a traced call looks its span up through
// the detached context on every stage; context.WithoutCancel's context
// allocates on each lookup, which is why detach exists.
func TestDetachedLookupsDoNotAllocate(t *testing.T) {
	parent := context.WithValue(context.Background(), detachTestKey{}, "v")
	d := detach(parent)
	if n := testing.AllocsPerRun(100, func() { _ = d.Value(detachTestKey{}) }); n != 0 {
		t.Errorf("a lookup through the detached context allocates %v times", n)
	}
}
