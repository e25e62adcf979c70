package evidence

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// A Chain orders one request's writes to a file store while letting them
// overlap their waits. Each create-only write is two syncs one after the
// other: the file's, then its folder's, which makes the new name durable.
// A Put made with a chain in its context (WithChain) returns once its file
// is synced and linked, its name taken, and leaves the folder's sync
// running; the chain's next Put writes and syncs its own file meanwhile,
// and links it only once that sync has ended. So a write is never durable
// before the one made before it, as with plain Puts, but a sequence of n
// writes waits for about n+1 syncs instead of 2n. Wait returns once the
// last write is durable: the caller waits before anything that relies on
// the writes (running a tool, replying).
//
// Stores that make a write durable before Put returns (S3, memory) ignore
// the chain. A Chain is for one request's writes, made one after another;
// it is not for concurrent use.
type Chain struct {
	mu      sync.Mutex
	pending *pendingSync
}

// pendingSync is the folder syncs of a chain's last write.
type pendingSync struct {
	key  string
	data []byte
	dirs []string // the folders it syncs
	done chan struct{}
	err  error
}

// NotDurableError is a chained write that was linked but whose folder's
// sync failed, so its name may not survive a crash. It carries the write,
// for the caller to keep elsewhere (the spool).
type NotDurableError struct {
	Key  string
	Data []byte
	Err  error
}

func (e *NotDurableError) Error() string {
	return fmt.Sprintf("evidence: %q may not be durable: %v", e.Key, e.Err)
}

func (e *NotDurableError) Unwrap() error { return e.Err }

type chainKey struct{}

// WithChain returns ctx carrying c: the file store's Puts made with it are
// chained (see Chain).
func WithChain(ctx context.Context, c *Chain) context.Context {
	return context.WithValue(ctx, chainKey{}, c)
}

func chainOf(ctx context.Context) *Chain {
	c, _ := ctx.Value(chainKey{}).(*Chain)
	return c
}

// Wait returns once the chain's last write is durable, or with a
// *NotDurableError when its sync failed, or ctx's error. Either way the
// chain has nothing pending after it: a failure is reported once.
func (c *Chain) Wait(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	p := c.pending
	c.pending = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return &NotDurableError{Key: p.key, Data: p.data, Err: ctx.Err()}
	}
	if p.err != nil {
		return &NotDurableError{Key: p.key, Data: p.data, Err: p.err}
	}
	return nil
}

// uncovered returns the folders of dirs that the chain's pending write
// does not sync: the next write waits for that one before its link, so
// it need not sync them again.
func (c *Chain) uncovered(dirs []string) []string {
	if c == nil || len(dirs) == 0 {
		return dirs
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		return dirs
	}
	return slices.DeleteFunc(slices.Clone(dirs), func(d string) bool { return slices.Contains(c.pending.dirs, d) })
}

// pend makes sync, of dirs, the chain's pending write: it runs now, and
// the chain's next Put or Wait waits for it.
func (c *Chain) pend(key string, data []byte, dirs []string, sync func() error) {
	p := &pendingSync{key: key, data: data, dirs: dirs, done: make(chan struct{})}
	go func() {
		p.err = sync()
		close(p.done)
	}()
	c.mu.Lock()
	c.pending = p
	c.mu.Unlock()
}
