package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
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

// LogStateFile returns the log's state file, or "" for none. A mem://
// store dies with the process, so by default it keeps none.
func (c Config) LogStateFile(instance string) string {
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

// EffectivePeerWitnessInterval is how often this gateway witnesses the logs of the
// replicas it shares its store with; 0 when evidence.peer_witness_interval
// is off.
func (e EvidenceConfig) EffectivePeerWitnessInterval() (time.Duration, error) {
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
