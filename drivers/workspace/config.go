package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/drivers"
)

// Type is the drivers.<name>.type of a workspace driver.
const Type = "workspace"

func init() {
	drivers.Register(drivers.Kind{Type: Type, New: func() drivers.Config { return newConfig() }})
}

// DriverConfig is a drivers.<name> section of type workspace.
type DriverConfig struct {
	// Root is the workspace folder; required.
	Root string `yaml:"root"`
	// OutputLimit caps each of a shell's stdout and stderr, in bytes
	// (default 1 MiB).
	OutputLimit int `yaml:"output_limit"`
	// DefaultTimeout applies to shell commands that set none (default
	// 30s).
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	// Sandbox isolates shell commands: "namespaces" (the default; Linux
	// user, PID, mount, IPC and network namespaces, with Landlock where the
	// kernel has it) or "none" (commands run as the gateway's user and see
	// what it sees).
	Sandbox string `yaml:"sandbox"`
	// Network is a sandboxed command's network: "none" (the default with
	// the sandbox: no interface at all) or "host" (the only choice
	// without it).
	Network string `yaml:"network"`
	// AllowUnsandboxed accepts sandbox: none on a listen address that is
	// not loopback.
	AllowUnsandboxed bool `yaml:"allow_unsandboxed"`
	// MaxProcesses caps the processes (tasks) of one sandboxed call
	// (default 256).
	MaxProcesses int `yaml:"max_processes"`
	// MaxMemoryBytes caps the address space of each process of a
	// sandboxed call (default 4 GiB).
	MaxMemoryBytes int64 `yaml:"max_memory_bytes"`
	// MaxFileBytes caps the size of a file a sandboxed call writes, and of
	// its /tmp (default 1 GiB).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

// newConfig is a section holding the defaults. Network stays unset: its
// default depends on the sandbox.
func newConfig() *DriverConfig {
	return &DriverConfig{
		OutputLimit:    defaultOutputLimit,
		DefaultTimeout: defaultTimeout,
		Sandbox:        SandboxNamespaces,
		MaxProcesses:   defaultMaxProcesses,
		MaxMemoryBytes: defaultMaxMemoryBytes,
		MaxFileBytes:   defaultMaxFileBytes,
	}
}

// Validate implements drivers.Config.
func (c *DriverConfig) Validate(v drivers.Validation) error {
	if c.Root == "" {
		return errors.New("root: required for a workspace driver")
	}
	if c.OutputLimit < 0 {
		return errors.New("output_limit: must not be negative")
	}
	if c.DefaultTimeout < 0 {
		return errors.New("default_timeout: must not be negative")
	}
	return c.validateSandbox(v.Loopback)
}

// validateSandbox checks the sandbox keys.
func (c *DriverConfig) validateSandbox(loopback bool) error {
	switch c.Sandbox {
	case "", SandboxNamespaces:
	case SandboxNone:
		if !loopback && !c.AllowUnsandboxed {
			return errors.New("sandbox: none on a listen address that is not loopback lets remote callers' " +
				"commands run unsandboxed as the gateway's user, next to its keys and evidence; " +
				"set allow_unsandboxed: true to accept that")
		}
		if c.Network == NetworkNone {
			return errors.New("network: none needs sandbox: namespaces; without the sandbox commands use the host's network")
		}
	default:
		return fmt.Errorf("sandbox %q: want namespaces or none", c.Sandbox)
	}
	if c.Network != "" && c.Network != NetworkNone && c.Network != NetworkHost {
		return fmt.Errorf("network %q: want none or host", c.Network)
	}
	switch {
	case c.MaxProcesses < 0:
		return errors.New("max_processes: must not be negative")
	case c.MaxMemoryBytes < 0:
		return errors.New("max_memory_bytes: must not be negative")
	case c.MaxFileBytes < 0:
		return errors.New("max_file_bytes: must not be negative")
	}
	return nil
}

// Build implements drivers.Config.
func (c *DriverConfig) Build(_ context.Context, name string, env drivers.BuildEnv) (drivers.Driver, error) {
	if c.Sandbox == SandboxNone && env.Logger != nil {
		env.Logger.Warn("workspace shell commands run unsandboxed, as the gateway's user, able to read what it reads",
			"driver", name, "key", "drivers."+name+".sandbox")
	}
	return New(Config{
		Root:           c.Root,
		OutputLimit:    c.OutputLimit,
		DefaultTimeout: c.DefaultTimeout,
		Sandbox:        c.Sandbox,
		Network:        c.Network,
		Hide:           env.Hide,
		MaxProcesses:   c.MaxProcesses,
		MaxMemoryBytes: c.MaxMemoryBytes,
		MaxFileBytes:   c.MaxFileBytes,
	})
}

// Footprint implements drivers.HostUser: the workspace is a folder callers
// write; it keeps no files of the gateway and reads no secrets.
func (c *DriverConfig) Footprint(func(string) string) drivers.Footprint {
	if c.Root == "" {
		return drivers.Footprint{}
	}
	return drivers.Footprint{Workspaces: []drivers.NamedPath{{Key: "root", Path: c.Root}}}
}

// SetWorkspaceRoot implements drivers.WorkspaceRooter.
func (c *DriverConfig) SetWorkspaceRoot(dir string) { c.Root = dir }

// BindTool implements drivers.ToolBinder: a tool entry names one of the
// operations.
func (c *DriverConfig) BindTool(t drivers.ToolSpec) (drivers.Binding, error) {
	if !slices.Contains(Operations(), t.Target) {
		return drivers.Binding{}, fmt.Errorf("target %q: a workspace driver serves %v", t.Target, Operations())
	}
	if t.Package != "" || t.Export != "" || t.Version != "" || t.HasEnv {
		return drivers.Binding{}, errors.New("target: a workspace tool takes no package, export, version or env")
	}
	return drivers.Binding{Target: t.Target}, nil
}

// Published implements drivers.Publisher: every operation is a tool.
func (c *DriverConfig) Published() []drivers.PublishedTool {
	out := make([]drivers.PublishedTool, 0, len(descriptions))
	for _, op := range Operations() {
		out = append(out, drivers.PublishedTool{Target: op, Description: descriptions[op], Tags: []string{"workspace"}})
	}
	return out
}

// descriptions describe the operations for discovery.
var descriptions = map[string]string{
	opCreateFile: "Create a file in the workspace (path, content, encoding, overwrite).",
	opReadFile:   "Read a file of the workspace (path, encoding).",
	opEditFile:   "Apply search-and-replace edits to a workspace file, all or nothing (path, edits).",
	opDeleteFile: "Delete a file of the workspace (path).",
	opShell:      "Run a shell command in the workspace (command, cwd, timeout, env).",
}
