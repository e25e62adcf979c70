package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/toolgate/toolgate/evidence"
	inst "github.com/toolgate/toolgate/gateway/instance"
)

// kickFlusher asks the spool flusher to run soon. It never blocks: one
// pending kick is as good as many.
func (g *Gateway) kickFlusher() {
	select {
	case g.spoolKick <- struct{}{}:
	default:
	}
}

// FlushSpool moves spooled artifacts to the evidence store and returns how
// many it moved. Without a spool it does nothing.
func (g *Gateway) FlushSpool(ctx context.Context) (int, error) {
	if g.spool == nil {
		return 0, nil
	}
	var dst evidence.Store = g.store
	if g.telemetry != nil {
		dst = inst.Retried(g.store, g.telemetry)
	}
	return g.spool.Flush(ctx, dst)
}

// spoolClose keeps in the spool closing, the signed close of an attempt as
// not dispatched, for when the store refused it and the
// attempt's dispatch marker may be stored all the same. It is
// not_dispatched.json, the record that closes an attempt after its marker,
// so that it settles the attempt whether or not the marker landed; until
// the flusher moves it, recovery leaves the request alone and a retry
// moves it first (flushSpooledClose). It returns the key the close will
// have in the store.
func (g *Gateway) spoolClose(ctx context.Context, closing evidence.DispatchRecord, encode func(name string, v any) ([]byte, error)) (string, error) {
	if g.spool == nil {
		return "", errors.New("there is no spool (evidence.spool_dir: none)")
	}
	requestID, n := closing.RequestID, closing.Attempt
	key := evidence.AttemptKey(requestID, n, evidence.ArtifactNotDispatched)
	data, err := g.encodeSigned(key, evidence.ArtifactNotDispatched, closing, encode)
	if err != nil {
		return "", err
	}
	if err := g.spool.Put(ctx, key, data); err != nil && !errors.Is(err, evidence.ErrExist) {
		return "", err
	}
	g.log.Warn("the store refused the close of an attempt that was not dispatched; it waits in the spool",
		"request_id", requestID, "attempt", n)
	g.kickFlusher()
	return key, nil
}

// flushSpooledClose moves the close of attempt n of request id from the
// spool to the store, when one waits there, and reports whether it did:
// a retry must judge the attempt by it, not by the marker it follows.
func (g *Gateway) flushSpooledClose(ctx context.Context, id string, n int) bool {
	if g.spool == nil {
		return false
	}
	key := evidence.AttemptKey(id, n, evidence.ArtifactNotDispatched)
	err := g.spool.FlushOne(ctx, g.store, key)
	if err != nil && !errors.Is(err, evidence.ErrNotExist) {
		g.log.Warn("a retry could not move a spooled close to the store", "request_id", id, "attempt", n, "err", err)
	}
	return err == nil
}

// RunSpoolFlusher flushes the spool at once (a previous run may have left
// artifacts in it), whenever a call spools an artifact, and every interval,
// until ctx ends. Failures are logged and retried at the next turn.
func (g *Gateway) RunSpoolFlusher(ctx context.Context, interval time.Duration) {
	if g.spool == nil {
		return
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		n, err := g.FlushSpool(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			g.log.Warn("spool flush incomplete; retrying later", "flushed", n, "err", err)
		case n > 0:
			g.log.Info("spooled evidence flushed to the store", "artifacts", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-g.spoolKick:
		}
	}
}
