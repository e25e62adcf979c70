package gateway

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// Defaults of the log section.
const (
	// DefaultCheckpointInterval is how often queued log entries are
	// sequenced and a checkpoint published.
	DefaultCheckpointInterval = time.Second
	// DefaultLogMaxPending bounds the entries waiting to be sequenced
	// while the store refuses the log's writes; beyond it, new calls are
	// refused rather than run unlogged. A batch of this many entries
	// stays well under the store's artifact size limit.
	DefaultLogMaxPending = 65536
)

// TransparencyLogConfig tunes the transparency log every signing gateway
// keeps of its requests (see docs/auditors/evidence.md, "Completeness").
type TransparencyLogConfig struct {
	// CheckpointInterval is how often queued entries are sequenced and a
	// signed checkpoint published: the most a checkpoint trails a call.
	// 0 means 1s.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// MaxPending is how many entries may wait to be sequenced before new
	// calls are refused. 0 means 65536.
	MaxPending int `yaml:"max_pending"`
	// StateFile keeps the newest checkpoint this gateway signed, outside
	// the store, so that a store rolled back or forked behind it is
	// refused at start (evidence.OpenLog). Empty means beside the signing
	// key file: "<key file>.<instance>.log-state" ("./toolgate.<instance>.log-state"
	// for a key from the environment, none for a mem:// store); none
	// keeps no state.
	StateFile string `yaml:"state_file" secret:"public"`
}

// logStateFile returns the log's state file, or "" for none. A mem://
// store dies with the process, so by default it keeps none.
func (c Config) logStateFile(instance string) string {
	key := c.Evidence.SigningKey
	switch f := c.Log.StateFile; {
	case f == "none":
		return ""
	case f != "":
		return f
	case strings.HasPrefix(c.Evidence.URL, "mem://"):
		return ""
	case key != nil && key.File != "":
		return key.File + "." + instance + ".log-state"
	}
	return "toolgate." + instance + ".log-state"
}

func (c TransparencyLogConfig) validate() error {
	if c.CheckpointInterval < 0 {
		return fmt.Errorf("config: log.checkpoint_interval: must not be negative (0: %v)", DefaultCheckpointInterval)
	}
	if c.MaxPending < 0 {
		return fmt.Errorf("config: log.max_pending: must not be negative (0: %d)", DefaultLogMaxPending)
	}
	return nil
}

// openTransparencyLog opens this instance's log in the store and returns
// the store wrapped so that every claim and manifest stored through it is
// logged, and the closer that sequences what is left at shutdown.
//
// Beside it runs the peer witness (startPeerWitness), which witnesses the
// logs of the replicas whose keys are trusted.
func openTransparencyLog(ctx context.Context, cfg Config, store evidence.StoreCloser, signer *evidence.Signer,
	instance string, trusted []ed25519.PublicKey, sharedMAC []byte, tel *telemetry.Telemetry, log *slog.Logger) (evidence.StoreCloser, io.Closer, error) {
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
		Gateway:  gatewayName(instance),
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) {
			return tlog.SignCheckpoint(noteSigner, size, root)
		},
		Interval:   orDefault(cfg.Log.CheckpointInterval, DefaultCheckpointInterval),
		OpTimeout:  cfg.Evidence.opTimeout(),
		MaxPending: orDefault(cfg.Log.MaxPending, DefaultLogMaxPending),
		Sealer:     sealer,
		Trusted:    ring,
		StateFile:  cfg.logStateFile(instance),
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
	witnessed, err := startPeerWitness(runCtx, cfg, store, signer, l, instance, trusted, tel, log)
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

// gatewayName is how a gateway names itself in evidence:
// "toolgate/<version>@<instance>".
func gatewayName(instance string) string { return fmt.Sprintf("toolgate/%s@%s", Version, instance) }

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
