package agentspaces

import (
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/ident"
)

// Name is the door's section under front_doors and the front_door its
// calls record.
const Name = "agent_spaces"

// DefaultMaxBodyBytes caps a request body unless max_body_bytes says
// otherwise: what every door takes at most, the arguments' limit plus an
// envelope. A batch's operations share it, so files larger together are
// sent in several batches.
const DefaultMaxBodyBytes = frontdoor.DefaultMaxBodyBytes

// Limits of the configuration keys.
const (
	maxMaxOperations = 4096
	maxPausedBatches = 1 << 20
)

// driverNamePattern bounds the driver key: it becomes a tool id prefix.
const driverNamePattern = ident.DriverName

// Config is the front_doors.agent_spaces section:
//
//	front_doors:
//	  agent_spaces: {listen: 127.0.0.1:8787}
type Config struct {
	frontdoor.Listener `yaml:",inline"`
	// Driver names the driver whose tools run the operations: operation
	// T runs tool "<driver>.T" (default "workspace").
	Driver string `yaml:"driver"`
	// MaxOperations bounds the operations of one batch (default 256,
	// at most 4096); a longer batch is refused whole.
	MaxOperations int `yaml:"max_operations"`
	// PausedBatches bounds the batches held in memory while an operation
	// waits for approval (default 1024); when full, the batch whose
	// approval expires first is dropped, and its client re-sends it.
	PausedBatches int `yaml:"paused_batches"`
}

// defaultConfig holds the defaults; they live here only.
func defaultConfig() *Config {
	return &Config{Driver: "workspace", MaxOperations: 256, PausedBatches: 1024}
}

func init() {
	frontdoor.Register(frontdoor.Kind{Name: Name, New: func() frontdoor.Config { return defaultConfig() }})
}

// BodyLimit implements frontdoor.HTTPSettings: max_body_bytes, 1 MiB +
// 64 KiB by default and at most.
func (c *Config) BodyLimit() int64 {
	if c.MaxBodyBytes == 0 {
		return DefaultMaxBodyBytes
	}
	return c.MaxBodyBytes
}

// Validate implements frontdoor.Config; errors start with the key.
func (c *Config) Validate() error {
	if err := c.Listener.Validate(); err != nil {
		return err
	}
	switch {
	case !driverNamePattern.MatchString(c.Driver):
		return fmt.Errorf("driver %q: want a driver name matching %s", c.Driver, driverNamePattern)
	case c.MaxOperations < 1 || c.MaxOperations > maxMaxOperations:
		return fmt.Errorf("max_operations %d: want 1 to %d", c.MaxOperations, maxMaxOperations)
	case c.PausedBatches < 1 || c.PausedBatches > maxPausedBatches:
		return fmt.Errorf("paused_batches %d: want 1 to %d", c.PausedBatches, maxPausedBatches)
	}
	return nil
}

// Open implements frontdoor.Config.
func (c *Config) Open(d frontdoor.Deps) (frontdoor.Door, error) {
	if d.Gateway == nil {
		return nil, errors.New("agentspaces: no gateway")
	}
	return New(d.Gateway, Options{
		Name: d.Name, Driver: c.Driver, MaxOperations: c.MaxOperations, PausedBatches: c.PausedBatches,
		MaxBodyBytes: c.BodyLimit(), Logger: d.Logger,
		// The gRPC listener authenticated the call; Caller says who.
		GRPCCaller: d.Gateway.Caller,
	})
}
