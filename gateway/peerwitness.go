package gateway

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// peerWitnessInterval is how often this gateway witnesses the logs of the
// replicas it shares its store with; 0 when evidence.peer_witness_interval
// is off.
func (e EvidenceConfig) peerWitnessInterval() (time.Duration, error) {
	switch e.PeerWitnessInterval {
	case "":
		return evidence.DefaultPeerWitnessInterval, nil
	case "off":
		return 0, nil
	}
	d, err := time.ParseDuration(e.PeerWitnessInterval)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("config: evidence.peer_witness_interval %q: a positive duration such as 10s, or off", e.PeerWitnessInterval)
	}
	return d, nil
}

// peerWitnessStateFile is where the last checkpoint witnessed of each peer
// is kept: beside the signing key, outside the store, one file per
// instance (replicas may share a key file); none when the key comes from
// the environment.
func peerWitnessStateFile(cfg Config, instance string) string {
	if src := cfg.Evidence.SigningKey; src != nil && src.File != "" {
		return filepath.Join(filepath.Dir(src.File), filepath.Base(src.File)+".witnessed-"+instance+".json")
	}
	return ""
}

// startPeerWitness runs a peer witness beside the transparency log until
// ctx ends, and returns a channel closed once it has stopped. It returns
// nil when peer witnessing is off.
func startPeerWitness(ctx context.Context, cfg Config, store evidence.Store, signer *evidence.Signer, l *evidence.LogWriter,
	instance string, trusted []ed25519.PublicKey, tel *telemetry.Telemetry, log *slog.Logger) (<-chan struct{}, error) {
	interval, err := cfg.Evidence.peerWitnessInterval()
	if err != nil || interval == 0 {
		return nil, err
	}
	w, err := evidence.NewPeerWitness(evidence.PeerWitnessConfig{
		Store: store, Instance: instance, Origin: l.Origin(), Signer: signer, Log: l, Gateway: gatewayName(instance),
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
