package instance

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// AcquireLease takes the instance name's lease in store (see package
// evidence/lease) before anything of the gateway reads or writes the
// store, and renews it until the returned closer gives it up. It fails
// when a live process holds the name.
func AcquireLease(ctx context.Context, cfg config.Config, store evidence.Store, signer *evidence.Signer, instance string,
	tel *telemetry.Telemetry, log *slog.Logger) (*lease.Lease, io.Closer, error) {
	o := lease.Options{Instance: instance, Heartbeat: cfg.Evidence.LeaseHeartbeat, PID: os.Getpid(), Logger: log,
		Tampered: func(key string, err error) {
			log.Error("evidence tampering: a stored record failed authentication and was not acted on",
				"record", telemetry.RecordInstanceLease, "key", key, "err", err)
			tel.Tampering(telemetry.RecordInstanceLease)
		}}
	o.Host, _ = os.Hostname()
	if signer != nil {
		sealer, err := signer.Sealer()
		if err != nil {
			return nil, nil, fmt.Errorf("instance lease: %w", err)
		}
		if o.Keyring, err = trust.NewKeyring([]ed25519.PublicKey{sealer.PublicKey()}, sealer.MACKey()); err != nil {
			return nil, nil, fmt.Errorf("instance lease: %w", err)
		}
		o.Sealer = sealer
	}
	l, err := lease.Acquire(ctx, store, o)
	if err != nil {
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(runCtx)
	}()
	closer := closerFunc(func() error {
		stop()
		<-done
		closeCtx, cancel := context.WithTimeout(context.Background(), cfg.Evidence.EffectiveOpTimeout())
		defer cancel()
		if err := l.Close(closeCtx); err != nil {
			return fmt.Errorf("instance lease: %w", err)
		}
		return nil
	})
	return l, closer, nil
}
