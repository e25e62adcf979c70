// Package instance runs what one gateway instance keeps beside its
// evidence store for as long as it serves: the lease on its instance name,
// its transparency log with the peer witness of its replicas' logs, and
// the store as telemetry counts it. It never imports gateway.
package instance

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// OpenLog opens this instance's log in the store and returns
// the store wrapped so that every claim and manifest stored through it is
// logged, and the closer that sequences what is left at shutdown.
//
// Beside it runs the peer witness (startPeerWitness), which witnesses the
// logs of the replicas whose keys are trusted.
func OpenLog(ctx context.Context, cfg config.Config, store evidence.StoreCloser, signer *evidence.Signer,
	instance, gatewayName string, trusted []ed25519.PublicKey, sharedMAC []byte, tel *telemetry.Telemetry, log *slog.Logger) (evidence.StoreCloser, io.Closer, error) {
	origin, err := evidence.LogOrigin(ctx, store, instance)
	if err != nil {
		return nil, nil, fmt.Errorf("log: opening the transparency log needs the evidence store at start: %w", err)
	}
	noteSigner, err := signer.CheckpointSigner(origin)
	if err != nil {
		return nil, nil, fmt.Errorf("log: %w", err)
	}
	var macKeys [][]byte
	if sharedMAC != nil {
		macKeys = append(macKeys, sharedMAC)
	}
	sealer, ring, err := evidence.LogKeys(signer, macKeys...)
	if err != nil {
		return nil, nil, fmt.Errorf("log: %w", err)
	}
	lc := evidence.LogConfig{
		Instance: instance,
		Origin:   origin,
		Gateway:  gatewayName,
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) {
			return tlog.SignCheckpoint(noteSigner, size, root)
		},
		Interval:   orDefault(cfg.Log.CheckpointInterval, config.DefaultCheckpointInterval),
		OpTimeout:  cfg.Evidence.EffectiveOpTimeout(),
		MaxPending: orDefault(cfg.Log.MaxPending, config.DefaultLogMaxPending),
		Sealer:     sealer,
		Trusted:    ring,
		StateFile:  cfg.LogStateFile(instance),
		Tampered:   func(error) { tel.Tampering(telemetry.RecordLog) },
		Logger:     log,
	}
	l, err := evidence.OpenLog(ctx, store, lc)
	if err != nil {
		return nil, nil, fmt.Errorf("log: %w", err)
	}
	log.Info("transparency log open", "origin", origin, "epoch", l.Epoch(), "size", l.Size(), "key_id", signer.KeyID(),
		"state_file", lc.StateFile)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(runCtx)
	}()
	witnessed, err := startPeerWitness(runCtx, cfg, store, signer, l, instance, gatewayName, trusted, tel, log)
	if err != nil {
		stop()
		<-done
		return nil, nil, err
	}
	closer := closerFunc(func() error {
		stop()
		<-done
		if witnessed != nil {
			<-witnessed
		}
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*lc.OpTimeout)
		defer cancel()
		if err := l.Close(closeCtx); err != nil {
			return fmt.Errorf("log: %w", err)
		}
		return nil
	})
	return evidence.WithLog(store, l), closer, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }
