package gateway

import (
	"context"
	"time"
)

// detach returns a context that carries ctx's values but never its
// deadline or cancellation, as context.WithoutCancel does. The evidence of
// a call outlives its caller (see run).
//
// It exists for speed: context.WithoutCancel's context is a struct value
// that boxes itself on every Value lookup passing through it, one
// allocation each, and the stages of a traced call look their parent span
// up through it a few dozen times per call. Lookups here go straight to
// ctx. The context package's own keys (its cancellation key is an *int)
// still go through context.WithoutCancel, so context.Cause of a detached
// context is nil as it is for WithoutCancel's (TestDetachIsWithoutCancel).
func detach(ctx context.Context) context.Context {
	return &detached{parent: ctx}
}

type detached struct{ parent context.Context }

func (*detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detached) Done() <-chan struct{}       { return nil }
func (*detached) Err() error                  { return nil }

func (d *detached) Value(key any) any {
	if _, ok := key.(*int); ok {
		return context.WithoutCancel(d.parent).Value(key)
	}
	return d.parent.Value(key)
}

func (d *detached) String() string { return "gateway.detach" }
