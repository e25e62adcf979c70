package workspace

import (
	"fmt"
	"time"
)

// Sandbox modes for Config.Sandbox.
const (
	// SandboxNamespaces runs each shell call in fresh user, PID, mount, IPC
	// and (unless Config.Network is NetworkHost) network namespaces, with
	// Landlock as a second layer where the kernel has it. Linux only.
	SandboxNamespaces = "namespaces"
	// SandboxNone runs shell commands as plain children of the gateway,
	// with the gateway's user and view of the file system.
	SandboxNone = "none"
)

// Network modes for Config.Network.
const (
	// NetworkNone gives each call an empty network namespace: no
	// interface, not even a working loopback.
	NetworkNone = "none"
	// NetworkHost shares the host's network namespace.
	NetworkHost = "host"
)

// Default caps of a sandboxed call, applied by New to zero Config fields.
const (
	defaultMaxProcesses   = 256
	defaultMaxMemoryBytes = 4 << 30
	defaultMaxFileBytes   = 1 << 30
)

// sandboxStageEnv names the environment variable that marks a process as a
// stage of the sandbox (its value is the stage). The driver sets it on the
// init it starts, and every stage removes it first thing.
const sandboxStageEnv = "TOOLGATE_SANDBOX_STAGE"

// Sandbox stages, the values of sandboxStageEnv.
const (
	stageLaunch = "launch" // starts the init where the driver cannot (see needsLauncher)
	stageInit   = "init"   // PID 1 of the call's namespaces: builds the root, reaps
	stageExec   = "exec"   // drops privileges, applies limits, becomes the shell
)

// exitSandboxSetup is the exit status of a sandbox stage that failed before
// the command could start. The driver tells it apart from a command's own
// status 125 by the message the stage writes to its status pipe.
const exitSandboxSetup = 125

// sandboxSpec is what the driver tells the init about one call.
type sandboxSpec struct {
	Network string   // NetworkNone or NetworkHost
	Shell   string   // absolute path of the shell
	Command string   // run as Shell -c Command
	Dir     string   // the command's working directory, absolute
	Env     []string // the command's whole environment
	Root    string   // the workspace, bound read-write at the same path
	Hide    []string // host paths masked wherever they would be visible
	Limits  limits
}

// limits are the caps of one sandboxed call.
type limits struct {
	Processes   int   // tasks in the call's pids cgroup, and RLIMIT_NPROC
	MemoryBytes int64 // RLIMIT_AS of each process
	FileBytes   int64 // RLIMIT_FSIZE, and the size of the sandbox's /tmp
	CPUSeconds  int64 // RLIMIT_CPU of each process, from the command's timeout
}

// callLimits returns the limits of a call with this timeout.
func (d *Driver) callLimits(timeout time.Duration) limits {
	l := d.limits
	l.CPUSeconds = cpuSeconds(timeout)
	return l
}

// cpuSeconds is the CPU time a command with this timeout may use in one
// process: the timeout itself, rounded up, since one process cannot use
// more CPU than wall time without threads that the timeout stops anyway.
func cpuSeconds(timeout time.Duration) int64 {
	return int64((timeout + time.Second - 1) / time.Second)
}

// data lists the limits for the result's data.
func (l limits) data() map[string]any {
	return map[string]any{
		"maxProcesses":   l.Processes,
		"maxMemoryBytes": l.MemoryBytes,
		"maxFileBytes":   l.FileBytes,
		"cpuSeconds":     l.CPUSeconds,
	}
}

// validateSandbox checks the sandbox fields of cfg and fills the defaults
// into d.
func (d *Driver) validateSandbox(cfg Config) error {
	d.sandbox, d.network = cfg.Sandbox, cfg.Network
	if d.sandbox == "" {
		d.sandbox = SandboxNamespaces
	}
	if d.sandbox != SandboxNamespaces && d.sandbox != SandboxNone {
		return fmt.Errorf("workspace: Config.Sandbox %q: want %q or %q", cfg.Sandbox, SandboxNamespaces, SandboxNone)
	}
	if d.network == "" {
		d.network = NetworkNone
		if d.sandbox == SandboxNone {
			d.network = NetworkHost
		}
	}
	if d.network != NetworkNone && d.network != NetworkHost {
		return fmt.Errorf("workspace: Config.Network %q: want %q or %q", cfg.Network, NetworkNone, NetworkHost)
	}
	if d.sandbox == SandboxNone && d.network == NetworkNone {
		return fmt.Errorf("workspace: Config.Network %q needs Config.Sandbox %q: without a sandbox commands use the host's network",
			NetworkNone, SandboxNamespaces)
	}
	d.limits = limits{Processes: cfg.MaxProcesses, MemoryBytes: cfg.MaxMemoryBytes, FileBytes: cfg.MaxFileBytes}
	if d.limits.Processes < 0 || d.limits.MemoryBytes < 0 || d.limits.FileBytes < 0 {
		return fmt.Errorf("workspace: Config.MaxProcesses, MaxMemoryBytes and MaxFileBytes must not be negative")
	}
	if d.limits.Processes == 0 {
		d.limits.Processes = defaultMaxProcesses
	}
	if d.limits.MemoryBytes == 0 {
		d.limits.MemoryBytes = defaultMaxMemoryBytes
	}
	if d.limits.FileBytes == 0 {
		d.limits.FileBytes = defaultMaxFileBytes
	}
	return nil
}
