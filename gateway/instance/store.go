package instance

import (
	"context"
	"errors"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// meteredStore counts the store's failures by operation. An answer that
// is part of the store's contract (the key exists, the key does not) is no
// failure, and neither is the end of the caller's own context.
type meteredStore struct {
	evidence.Store
	t *telemetry.Telemetry
}

var _ evidence.InfoWalker = meteredStore{}

// Meter wraps s to count its failures; without telemetry it is s.
func Meter(s evidence.Store, t *telemetry.Telemetry) evidence.Store {
	if t == nil {
		return s
	}
	return meteredStore{Store: s, t: t}
}

func (s meteredStore) count(ctx context.Context, op string, err error) {
	if err != nil && ctx.Err() == nil && !errors.Is(err, evidence.ErrExist) && !errors.Is(err, evidence.ErrNotExist) {
		s.t.StoreError(op)
	}
}

func (s meteredStore) Put(ctx context.Context, key string, data []byte) error {
	err := s.Store.Put(ctx, key, data)
	s.count(ctx, telemetry.StoreOpPut, err)
	return err
}

func (s meteredStore) Get(ctx context.Context, key string) ([]byte, error) {
	data, err := s.Store.Get(ctx, key)
	s.count(ctx, telemetry.StoreOpGet, err)
	return data, err
}

func (s meteredStore) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.Store.List(ctx, prefix)
	s.count(ctx, telemetry.StoreOpList, err)
	return keys, err
}

// Walk counts as a list. An error of fn's own is not the store's.
func (s meteredStore) Walk(ctx context.Context, prefix string, fn func(string) error) error {
	var fnErr error
	err := s.Store.Walk(ctx, prefix, func(key string) error { fnErr = fn(key); return fnErr })
	if fnErr == nil {
		s.count(ctx, telemetry.StoreOpList, err)
	}
	return err
}

// WalkInfo keeps the wrapped store's sizes and times.
func (s meteredStore) WalkInfo(ctx context.Context, prefix string, fn func(evidence.KeyInfo) error) error {
	var fnErr error
	err := evidence.WalkInfo(ctx, s.Store, prefix, func(k evidence.KeyInfo) error { fnErr = fn(k); return fnErr })
	if fnErr == nil {
		s.count(ctx, telemetry.StoreOpList, err)
	}
	return err
}

// retriedStore is the store as the spool flusher writes to it: each of
// its writes is an artifact the store refused once, tried again.
type retriedStore struct {
	evidence.Store
	t *telemetry.Telemetry
}

func (s retriedStore) Put(ctx context.Context, key string, data []byte) error {
	s.t.StoreRetry()
	return s.Store.Put(ctx, key, data)
}

// Retried wraps s as the spool flusher writes to it, counting each write
// as a retry.
func Retried(s evidence.Store, t *telemetry.Telemetry) evidence.Store {
	return retriedStore{Store: s, t: t}
}
