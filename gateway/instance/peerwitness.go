package instance

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// peerWitnessStateFile is where the last checkpoint witnessed of each peer
// is kept: beside the signing key, outside the store, one file per
// instance (replicas may share a key file); none when the key comes from
// the environment.
func peerWitnessStateFile(cfg config.Config, instance string) string {
	if src := cfg.Evidence.SigningKey; src != nil && src.File != "" {
		return filepath.Join(filepath.Dir(src.File), filepath.Base(src.File)+".witnessed-"+instance+".json")
	}
	return ""
}

// startPeerWitness runs a peer witness beside the transparency log until
// ctx ends, and returns a channel closed once it has stopped. It returns
// nil when peer witnessing is off.
func startPeerWitness(ctx context.Context, cfg config.Config, store evidence.Store, signer *evidence.Signer, l *evidence.LogWriter,
	instance, gatewayName string, trusted []ed25519.PublicKey, tel *telemetry.Telemetry, log *slog.Logger) (<-chan struct{}, error) {
	interval, err := cfg.Evidence.EffectivePeerWitnessInterval()
	if err != nil || interval == 0 {
		return nil, err
	}
	w, err := evidence.NewPeerWitness(evidence.PeerWitnessConfig{
		Store: store, Instance: instance, Origin: l.Origin(), Signer: signer, Log: l, Gateway: gatewayName,
		TrustedKeys: append([]ed25519.PublicKey{signer.PublicKey()}, trusted...),
		StateFile:   peerWitnessStateFile(cfg, instance), Interval: interval, Logger: log,
		OnRefused: func(string, error) { tel.Tampering(telemetry.RecordLog) },
	})
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return done, nil
}
