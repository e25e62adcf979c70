package execbox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/toolgate/toolgate/drivers"
)

// Type is the drivers.<name>.type of an execbox driver.
const Type = "execbox"

func init() {
	drivers.Register(drivers.Kind{Type: Type, New: func() drivers.Config { return newConfig() }})
}

// DriverConfig is a drivers.<name> section of type execbox.
type DriverConfig struct {
	// URL is a runner's WebSocket endpoint, ws:// or wss://; give url or
	// command.
	URL string `yaml:"url"`
	// Command starts a stdio runner, one JSON message per line.
	Command []string `yaml:"command"`
	// Pool keeps this many stdio runners started ahead (0 to 64; default
	// 0, a process per call).
	Pool int `yaml:"pool"`
	// Timeout, MemoryLimitBytes, MaxLogLines and MaxLogChars are the
	// runner options (defaults 30s, 64 MiB, 1000 lines, 64000
	// characters); callers may lower the timeout only.
	Timeout          time.Duration `yaml:"timeout"`
	MemoryLimitBytes int64         `yaml:"memory_limit_bytes"`
	MaxLogLines      int           `yaml:"max_log_lines"`
	MaxLogChars      int           `yaml:"max_log_chars"`
	// MaxNestedCalls caps the tool calls one execution's guest code may
	// make (default 256, at most 10000). Calls beyond it are refused to
	// the guest without reaching policy or evidence; the parent's
	// evidence counts them. A pointer, so that an explicit 0 is refused
	// rather than defaulted.
	MaxNestedCalls *int `yaml:"max_nested_calls"`
	// MaxNestedInFlight caps how many of one execution's tool calls run at
	// once (default 8, at most 64).
	MaxNestedInFlight *int `yaml:"max_nested_in_flight"`
}

// newConfig is a section holding the defaults; the nested-call caps stay
// unset, so that an explicit 0 can be told from the default.
func newConfig() *DriverConfig {
	return &DriverConfig{
		Timeout:          defaultTimeout,
		MemoryLimitBytes: defaultMemoryLimit,
		MaxLogLines:      defaultMaxLogLines,
		MaxLogChars:      defaultMaxLogChars,
	}
}

// Validate implements drivers.Config. It checks what New checks of the
// same settings, so that a bad value stops the configuration rather than
// the start.
func (c *DriverConfig) Validate(drivers.Validation) error {
	if (c.URL == "") == (len(c.Command) == 0) {
		return drivers.SectionError("an execbox driver needs url (ws:// or wss://) or command, not both")
	}
	if u, err := url.Parse(c.URL); c.URL != "" && (err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "") {
		return fmt.Errorf("url %q: want a ws:// or wss:// runner URL", c.URL)
	}
	if c.Pool < 0 || c.Timeout < 0 || c.MemoryLimitBytes < 0 || c.MaxLogLines < 0 || c.MaxLogChars < 0 {
		return drivers.SectionError("pool, timeout and limits must not be negative")
	}
	if c.Pool > maxPool {
		return fmt.Errorf("pool: must be between 0 and %d, got %d", maxPool, c.Pool)
	}
	if c.Pool > 0 && c.URL != "" {
		return errors.New("pool: applies to command runners only")
	}
	if c.Timeout != 0 && c.Timeout < time.Millisecond {
		return fmt.Errorf("timeout: must be at least 1ms, got %v", c.Timeout)
	}
	if n := c.MaxNestedCalls; n != nil && (*n < 1 || *n > MaxNestedCallsBound) {
		return fmt.Errorf("max_nested_calls: must be between 1 and %d (unset: %d), got %d", MaxNestedCallsBound, defaultMaxNestedCalls, *n)
	}
	if n := c.MaxNestedInFlight; n != nil && (*n < 1 || *n > MaxNestedInFlightBound) {
		return fmt.Errorf("max_nested_in_flight: must be between 1 and %d (unset: %d), got %d", MaxNestedInFlightBound, defaultMaxNestedInFlight, *n)
	}
	return nil
}

// Build implements drivers.Config.
func (c *DriverConfig) Build(_ context.Context, name string, env drivers.BuildEnv) (drivers.Driver, error) {
	return New(Config{
		Name:              name,
		URL:               c.URL,
		Command:           c.Command,
		Pool:              c.Pool,
		Timeout:           c.Timeout,
		MemoryLimitBytes:  c.MemoryLimitBytes,
		MaxLogLines:       c.MaxLogLines,
		MaxLogChars:       c.MaxLogChars,
		MaxNestedCalls:    derefInt(c.MaxNestedCalls),
		MaxNestedInFlight: derefInt(c.MaxNestedInFlight),
		Logger:            env.Logger,
	})
}

// BindTool implements drivers.ToolBinder: an execbox tool runs the guest
// code it is given.
func (c *DriverConfig) BindTool(t drivers.ToolSpec) (drivers.Binding, error) {
	if t.Target != "" || t.Package != "" || t.Export != "" || t.Version != "" || t.HasEnv {
		return drivers.Binding{}, errors.New("driver: an execbox tool runs the guest code it is given and takes no target, package or env")
	}
	return drivers.Binding{}, nil
}

// derefInt is *p, or 0 (New's default) when p is nil.
func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
