package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// spoolScanTimeout bounds one scrape's look at the spool: a spool that
// cannot be listed this fast reads as what was seen by then.
const spoolScanTimeout = 2 * time.Second

// observeState gives telemetry the gauges that read the gateway's state:
// the calls holding a slot, the spool, and the approvals waiting.
func (g *Gateway) observeState() {
	g.telemetry.SetGauges(telemetry.Gauges{
		CallsInFlight: func() int { return int(g.running.Load()) },
		Spool:         g.spoolState,
		Approvals:     func() (int, time.Duration) { return g.recovery.PendingApprovals(g.now()) },
	})
}

// spoolState counts the spooled artifacts and the age of the oldest.
func (g *Gateway) spoolState() (int, time.Duration) {
	if g.spool == nil {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), spoolScanTimeout)
	defer cancel()
	n := 0
	var oldest time.Time
	// An error leaves the count at what was walked: the gauge is a
	// reading, not a record.
	_ = g.spool.WalkInfo(ctx, "", func(k evidence.KeyInfo) error {
		n++
		if !k.ModTime.IsZero() && (oldest.IsZero() || k.ModTime.Before(oldest)) {
			oldest = k.ModTime
		}
		return ctx.Err()
	})
	if oldest.IsZero() {
		return n, 0
	}
	return n, max(g.now().Sub(oldest), 0)
}

// meteredStore counts the store's failures by operation. An answer that
// is part of the store's contract (the key exists, the key does not) is no
// failure, and neither is the end of the caller's own context.
type meteredStore struct {
	evidence.Store
	t *telemetry.Telemetry
}

var _ evidence.InfoWalker = meteredStore{}

// meterStore wraps s to count its failures; without telemetry it is s.
func meterStore(s evidence.Store, t *telemetry.Telemetry) evidence.Store {
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
