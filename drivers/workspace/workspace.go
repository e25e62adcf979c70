package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/drivers"
)

// Operation names, as passed in drivers.Call.Target.
const (
	opCreateFile = "createFile"
	opReadFile   = "readFile"
	opEditFile   = "editFile"
	opDeleteFile = "deleteFile"
	opShell      = "shell"
)

// Defaults applied by New to zero Config fields.
const (
	defaultOutputLimit = 1 << 20
	defaultTimeout     = 30 * time.Second
	defaultShell       = "/bin/sh"
)

// Modes for what the driver creates. Group access matches a workspace that
// is shared with a service group; others get nothing.
const (
	dirMode  fs.FileMode = 0o750
	fileMode fs.FileMode = 0o640
)

// tmpDirName is the folder inside the workspace that shell commands get as
// TMPDIR.
const tmpDirName = ".tmp"

// Operations returns the names of the operations the driver serves, sorted.
func Operations() []string {
	return []string{opCreateFile, opDeleteFile, opEditFile, opReadFile, opShell}
}

// Config configures a Driver. Zero fields take the documented defaults.
type Config struct {
	// Root is the workspace folder. It is created with mode 0750 if absent.
	Root string
	// OutputLimit caps how many bytes of a shell command's stdout, and
	// separately of its stderr, are kept. Default 1 MiB.
	OutputLimit int
	// DefaultTimeout bounds a shell command whose call gives no timeout.
	// Default 30s; it must lie within the protocol's [1s, 1h].
	DefaultTimeout time.Duration
	// Shell is the absolute path of the shell that runs commands as
	// Shell -c COMMAND. Default /bin/sh.
	Shell string

	// Sandbox is SandboxNamespaces (the default, Linux only) or
	// SandboxNone. With namespaces, New runs a trivial command in the
	// sandbox and fails when the host cannot run one.
	Sandbox string
	// Network is NetworkNone (the default with the sandbox) or NetworkHost
	// (the only choice without it).
	Network string
	// Hide lists paths that a sandboxed command must not reach: the
	// gateway's policies, evidence, spool, keys and configuration. The
	// sandbox shows the host only through read-only system folders and the
	// workspace; any of these paths that lies inside one is masked.
	Hide []string
	// MaxProcesses caps the tasks of a sandboxed call (default 256),
	// through a pids cgroup where the gateway may create one, and
	// RLIMIT_NPROC, which binds only a gateway not running as root.
	MaxProcesses int
	// MaxMemoryBytes caps the address space of each process of a
	// sandboxed call (RLIMIT_AS; default 4 GiB).
	MaxMemoryBytes int64
	// MaxFileBytes caps the size of any file a sandboxed call writes
	// (RLIMIT_FSIZE) and of its /tmp (default 1 GiB).
	MaxFileBytes int64
}

// Driver runs workspace operations in one folder. It implements
// drivers.Driver and is safe for concurrent use.
type Driver struct {
	root *os.Root
	// rootDir is the workspace folder held open, where file operations
	// start their walk (see nofollow.go).
	rootDir        *os.File
	absRoot        string // the folder's absolute path, symbolic links resolved
	outputLimit    int
	defaultTimeout time.Duration
	shell          string
	sandbox        string
	network        string
	limits         limits
	hide           []string // absolute, as given and with links resolved
	pidsCgroup     string   // folder for per-call pids cgroups, or ""
	launcher       bool     // start the init through the launcher stage

	// writeLock serializes the file operations that modify the workspace
	// so that an editFile's read-modify-write cannot interleave with
	// another write made through this Driver. It is a one-slot channel, not
	// a mutex, so that a caller waiting for it gives up at its deadline.
	writeLock chan struct{}

	// targets are the operations' descriptions, built once: the gateway
	// asks for one on every call.
	targets map[string]drivers.Target
}

var _ drivers.Driver = (*Driver)(nil)

// New opens (creating it if needed) the workspace folder cfg.Root.
func New(cfg Config) (*Driver, error) {
	if cfg.Root == "" {
		return nil, errors.New("workspace: Config.Root is required")
	}
	d := &Driver{
		outputLimit:    cfg.OutputLimit,
		defaultTimeout: cfg.DefaultTimeout,
		shell:          cfg.Shell,
		writeLock:      make(chan struct{}, 1),
	}
	if d.outputLimit == 0 {
		d.outputLimit = defaultOutputLimit
	}
	if d.outputLimit < 0 {
		return nil, fmt.Errorf("workspace: Config.OutputLimit must not be negative, got %d", cfg.OutputLimit)
	}
	if d.defaultTimeout == 0 {
		d.defaultTimeout = defaultTimeout
	}
	if d.defaultTimeout < minTimeout || d.defaultTimeout > maxTimeout {
		return nil, fmt.Errorf("workspace: Config.DefaultTimeout must be between %v and %v, got %v",
			minTimeout, maxTimeout, cfg.DefaultTimeout)
	}
	if d.shell == "" {
		d.shell = defaultShell
	}
	if !filepath.IsAbs(d.shell) {
		return nil, fmt.Errorf("workspace: Config.Shell must be an absolute path, got %q", d.shell)
	}
	if fi, err := os.Stat(d.shell); err != nil {
		return nil, fmt.Errorf("workspace: Config.Shell: %w", err)
	} else if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("workspace: Config.Shell %s is not an executable file", d.shell)
	}

	if err := os.MkdirAll(cfg.Root, dirMode); err != nil {
		return nil, fmt.Errorf("workspace: create root: %w", err)
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("workspace: resolve root: %w", err)
	}
	// The shell gets directories as absolute paths joined to this one; with
	// links resolved they name the same folders that os.Root opened.
	if d.absRoot, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("workspace: resolve root: %w", err)
	}
	if d.root, err = os.OpenRoot(d.absRoot); err != nil {
		return nil, fmt.Errorf("workspace: open root: %w", err)
	}
	if d.rootDir, err = os.Open(d.absRoot); err != nil {
		d.root.Close()
		return nil, fmt.Errorf("workspace: open root: %w", err)
	}
	if err := d.startSandbox(cfg); err != nil {
		d.Close()
		return nil, err
	}
	d.targets = describeOperations()
	return d, nil
}

// startSandbox checks the sandbox settings and, with namespaces, that a
// sandboxed command runs on this host.
func (d *Driver) startSandbox(cfg Config) error {
	if err := d.validateSandbox(cfg); err != nil {
		return err
	}
	for _, p := range cfg.Hide {
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("workspace: Config.Hide %q: %w", p, err)
		}
		d.hide = append(d.hide, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			d.hide = append(d.hide, real)
		}
	}
	if d.sandbox == SandboxNone {
		return nil
	}
	d.pidsCgroup = findPidsCgroup()
	d.launcher = needsLauncher()
	if err := d.probeSandbox(); err != nil {
		return fmt.Errorf("workspace: the shell sandbox (namespaces) cannot run on this host: %w; "+
			"it needs user namespaces (see user.max_user_namespaces and kernel.unprivileged_userns_clone); "+
			"sandbox: none runs commands unsandboxed", err)
	}
	return nil
}

// Close releases the workspace folder. Calls to Run after Close fail.
func (d *Driver) Close() error {
	return errors.Join(d.root.Close(), d.rootDir.Close())
}

// Engine names the downstream engine: "workspace".
func (d *Driver) Engine() string { return "workspace" }

// Run performs the operation call.Target with call.Args. A failed operation
// is reported in the Result; Run returns an error only when call.Target is
// not an operation of this driver (wrapping drivers.ErrUnknownTarget) or the
// workspace folder itself is unusable.
func (d *Driver) Run(ctx context.Context, call drivers.Call) (drivers.Result, error) {
	var op func(context.Context, args, *report)
	switch call.Target {
	case opCreateFile:
		op = d.createFile
	case opReadFile:
		op = d.readFile
	case opEditFile:
		op = d.editFile
	case opDeleteFile:
		op = d.deleteFile
	case opShell:
		op = d.runShell
	default:
		return drivers.Result{}, fmt.Errorf("workspace: %w %q (operations: %s)",
			drivers.ErrUnknownTarget, call.Target, strings.Join(Operations(), ", "))
	}
	if err := d.usable(); err != nil {
		return drivers.Result{}, err
	}
	r := &report{data: map[string]any{"type": call.Target, "success": false}}
	op(ctx, args(call.Args), r)
	if errors.Is(r.cause, os.ErrClosed) {
		return drivers.Result{}, fmt.Errorf("workspace: %w", r.cause)
	}
	return drivers.Result{ExitCode: r.exitCode, Stdout: r.stdout, Stderr: r.stderr, Data: r.data}, nil
}

// usable reports an error when the workspace folder can no longer serve
// operations: the driver was closed or the folder was removed under it.
func (d *Driver) usable() error {
	fi, err := d.root.Stat(".")
	if err != nil {
		return fmt.Errorf("workspace: root %s unusable: %w", d.absRoot, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 0 {
		return fmt.Errorf("workspace: root %s was removed", d.absRoot)
	}
	return nil
}

// Error categories reported in Data["category"].
const (
	categoryValidation = "validation"
	categoryExecution  = "execution"
	categoryTimeout    = "timeout"
)

// Exit codes of failures that are not a command's own.
const (
	exitExecution  = 1
	exitValidation = 2
	exitTimeout    = 124
)

// report collects what an operation produced before Run turns it into a
// drivers.Result.
type report struct {
	data           map[string]any
	stdout, stderr string
	exitCode       int
	cause          error // the failure, for Run to tell a broken root apart
}

// fail records a failure of the given category.
func (r *report) fail(category string, exitCode int, err error) {
	r.cause = err
	r.exitCode = exitCode
	r.data["success"] = false
	r.data["error"] = err.Error()
	r.data["category"] = category
	r.stderr = err.Error() + "\n"
}

func (r *report) invalid(err error) { r.fail(categoryValidation, exitValidation, err) }
func (r *report) failed(err error)  { r.fail(categoryExecution, exitExecution, err) }

// MaxRunTime implements drivers.Bounded: the longest shell timeout a call
// may ask for, and time to kill and reap what the command started.
func (d *Driver) MaxRunTime() time.Duration { return maxTimeout + killAndReapGrace }

// killAndReapGrace bounds the clean-up after a command's timeout.
const killAndReapGrace = 10 * time.Second
