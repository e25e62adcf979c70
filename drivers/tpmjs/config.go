package tpmjs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/internal/ident"
)

// Type is the drivers.<name>.type of a TPMJS executor driver.
const Type = "tpmjs"

func init() {
	drivers.Register(drivers.Kind{Type: Type, New: func() drivers.Config { return newConfig() }})
}

// DriverConfig is a drivers.<name> section of type tpmjs.
type DriverConfig struct {
	// URL is the executor's base URL; required.
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding the executor's
	// Bearer key (none: no Authorization header).
	APIKeyEnv string `yaml:"api_key_env"`
	// HealthTimeout bounds /health and /info probes (default 1s).
	HealthTimeout time.Duration `yaml:"health_timeout"`
	// CallTimeout bounds one execution (default 120s), lowered to 5s under
	// what the executor advertises as its maximum (a quarter under, below
	// 20s), so the gateway ends a call before the executor kills it.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// MaxResponseBytes caps an executor's answer (default 10 MiB).
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// AllowRegistryIDs lets callers name any tool of the registry as
	// "<package>::<export>" (at most one driver).
	AllowRegistryIDs bool `yaml:"allow_registry_ids"`
	// RegistryVersion is the version registry ids run (default latest).
	RegistryVersion string `yaml:"registry_version"`
	// TraceDir, if set, keeps a redacted JSONL trace of every exchange
	// with the executor, one file per request.
	TraceDir string `yaml:"trace_dir"`
}

func newConfig() *DriverConfig {
	return &DriverConfig{
		HealthTimeout:    defaultHealthTimeout,
		CallTimeout:      defaultCallTimeout,
		MaxResponseBytes: defaultMaxResponseBytes,
		RegistryVersion:  defaultVersion,
	}
}

// Validate implements drivers.Config.
func (c *DriverConfig) Validate(drivers.Validation) error {
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want the executor's http:// or https:// base URL", c.URL)
	}
	if c.APIKeyEnv != "" && !ident.EnvName.MatchString(c.APIKeyEnv) {
		return fmt.Errorf("api_key_env %q: not an environment variable name", c.APIKeyEnv)
	}
	if c.HealthTimeout < 0 || c.CallTimeout < 0 || c.MaxResponseBytes < 0 {
		return drivers.SectionError("timeouts and sizes must not be negative")
	}
	if c.RegistryVersion != "" {
		if err := ValidateVersion(c.RegistryVersion); err != nil {
			return fmt.Errorf("registry_version: %w", err)
		}
	}
	return nil
}

// Build implements drivers.Config: the driver's probes start at once and
// run until env.Background ends.
func (c *DriverConfig) Build(_ context.Context, name string, env drivers.BuildEnv) (drivers.Driver, error) {
	tc := Config{
		Name:             name,
		URL:              c.URL,
		HealthTimeout:    c.HealthTimeout,
		CallTimeout:      c.CallTimeout,
		MaxResponseBytes: c.MaxResponseBytes,
		Logger:           env.Logger,
	}
	if c.APIKeyEnv != "" {
		if tc.APIKey = env.Getenv(c.APIKeyEnv); tc.APIKey == "" {
			return nil, drivers.KeyError{Key: "api_key_env", Err: fmt.Errorf("environment variable %s is empty or unset", c.APIKeyEnv)}
		}
	}
	if c.TraceDir != "" {
		if err := os.MkdirAll(c.TraceDir, 0o750); err != nil {
			return nil, drivers.KeyError{Key: "trace_dir", Err: err}
		}
		if env.Trace == nil {
			return nil, drivers.KeyError{Key: "trace_dir", Err: errors.New("this gateway keeps no traces")}
		}
		w, err := env.Trace(c.TraceDir)
		if err != nil {
			return nil, drivers.KeyError{Key: "trace_dir", Err: err}
		}
		tc.Trace = w
	}
	d, err := New(tc)
	if err != nil {
		return nil, err
	}
	d.Start(env.Background)
	return d, nil
}

// Footprint implements drivers.HostUser: the executor's API key is a
// secret, and the trace folder is the gateway's own.
func (c *DriverConfig) Footprint(getenv func(string) string) drivers.Footprint {
	var f drivers.Footprint
	if c.APIKeyEnv != "" {
		if v := getenv(c.APIKeyEnv); v != "" {
			f.Secrets = []string{v}
		}
	}
	if c.TraceDir != "" {
		f.OwnPaths = []drivers.NamedPath{{Key: "trace_dir", Path: c.TraceDir}}
		f.TraceFolder = c.TraceDir
	}
	return f
}

// RegistryIDs implements drivers.RegistryHost.
func (c *DriverConfig) RegistryIDs() (string, bool) { return c.RegistryVersion, c.AllowRegistryIDs }

// BindTool implements drivers.ToolBinder: a tool is named by package,
// export and version (default latest).
func (c *DriverConfig) BindTool(t drivers.ToolSpec) (drivers.Binding, error) {
	if t.Target != "" {
		return drivers.Binding{}, errors.New("target: a tpmjs tool is named by package and export")
	}
	if err := ValidatePackageName(t.Package); err != nil {
		return drivers.Binding{}, fmt.Errorf("package: %w", err)
	}
	if err := ValidateExportName(t.Export); err != nil {
		return drivers.Binding{}, fmt.Errorf("export: %w", err)
	}
	version := t.Version
	if version == "" {
		version = defaultVersion
	} else if err := ValidateVersion(version); err != nil {
		return drivers.Binding{}, fmt.Errorf("version: %w", err)
	}
	return drivers.Binding{Target: t.Export, Package: t.Package, Version: version}, nil
}
