package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// acquireLease takes the instance name's lease in store (see package
// evidence/lease) before anything of the gateway reads or writes the
// store, and renews it until the returned closer gives it up. It fails
// when a live process holds the name.
func acquireLease(ctx context.Context, cfg config.Config, store evidence.Store, signer *evidence.Signer, instance string,
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

// holdsInstance refuses a new call with UNAVAILABLE unless this process
// holds its instance name's lease: once a newer process holds it, this one
// starts nothing. Without a lease (a gateway built in code) every call
// passes.
func (g *Gateway) holdsInstance(ctx context.Context) error {
	if g.lease == nil {
		return nil
	}
	err := g.lease.Held(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrFenced):
		return status.Errorf(codes.Unavailable, "%v; nothing was executed", err)
	}
	return status.Errorf(codes.Unavailable, "this gateway cannot renew its lease on instance name %q, so it starts nothing "+
		"(retry later, or with another gateway): %v", g.instance, err)
}

// InstanceFenced is closed when a newer process takes this gateway's
// instance name over: from then on it refuses every call, and its server
// should say it is not serving. Never closed without a lease.
func (g *Gateway) InstanceFenced() <-chan struct{} {
	if g.lease == nil {
		return nil
	}
	return g.lease.Fenced()
}

// confirmInstance makes sure, in the store, that this process still holds
// its instance name before recovery writes for a request it did not run
// itself.
func (g *Gateway) confirmInstance(ctx context.Context) error {
	if g.lease == nil {
		return nil
	}
	return g.lease.Confirm(ctx)
}

// owns reports whether the gateway named gatewayName (a record's
// "gateway") belongs to this process's instance and to an epoch of its
// lease not newer than this process's: its own, or an earlier process of
// the name, which this one took the name from. A newer epoch's requests
// belong to the process that holds the name now.
func (g *Gateway) owns(gatewayName string) bool {
	inst, epoch := evidence.ParseGatewayName(gatewayName)
	return inst == g.instance && (g.lease == nil || epoch <= g.lease.Epoch())
}

// recoveryFenced reports whether recovery must stop for good: a newer
// process holds the instance name.
func (g *Gateway) recoveryFenced(ctx context.Context) bool {
	if g.lease == nil {
		return false
	}
	err := g.lease.Held(ctx)
	return errors.Is(err, lease.ErrFenced)
}
