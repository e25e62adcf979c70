package evidence

import (
	"context"
	"fmt"
	"time"
)

// DefaultOpTimeout bounds one store operation when the configuration sets
// no other: long enough for an S3 write and its retries on a slow link,
// short against a caller's patience and against a store that hangs.
const DefaultOpTimeout = 15 * time.Second

// WithOpTimeout returns a Store whose Put, Get and List each end after d at
// the latest, whatever the caller's context allows: a store that hangs
// (a frozen S3 endpoint, a stuck NFS mount) must not hold a call, and the
// goroutines and memory it pins, for as long as the network stack waits.
// An operation cut off this way returns an error wrapping
// context.DeadlineExceeded; for Put the outcome is then unknown, as for any
// other failed write. Walk and WalkInfo are not bounded, since an audit of
// a large bucket legitimately takes long; their caller's context bounds
// them. The returned store is always an InfoWalker: it lists sizes and
// times when s is one, and keys alone, as the WalkInfo function does, when
// s is not. Close is passed through.
func WithOpTimeout(s StoreCloser, d time.Duration) StoreCloser {
	return &opTimeoutStore{StoreCloser: s, d: d}
}

type opTimeoutStore struct {
	StoreCloser
	d time.Duration
}

func (s *opTimeoutStore) Put(ctx context.Context, key string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	if err := s.StoreCloser.Put(ctx, key, data); err != nil {
		return s.explain(ctx, "put", key, err)
	}
	return nil
}

func (s *opTimeoutStore) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	data, err := s.StoreCloser.Get(ctx, key)
	if err != nil {
		return nil, s.explain(ctx, "get", key, err)
	}
	return data, nil
}

func (s *opTimeoutStore) List(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	keys, err := s.StoreCloser.List(ctx, prefix)
	if err != nil {
		return nil, s.explain(ctx, "list", prefix, err)
	}
	return keys, nil
}

// WalkInfo forwards to the wrapped store, unbounded like Walk.
func (s *opTimeoutStore) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return WalkInfo(ctx, s.StoreCloser, prefix, fn)
}

// explain names the operation's own deadline when it is what ended the
// operation, so that an operator reading "context deadline exceeded" knows
// it was evidence.op_timeout and not the caller.
func (s *opTimeoutStore) explain(ctx context.Context, op, key string, err error) error {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("evidence: %s %q: no answer within the store's operation timeout of %v: %w", op, key, s.d, err)
	}
	return err
}
