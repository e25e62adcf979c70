//go:build unix && !linux

package workspace

import (
	"errors"
	"os/exec"
)

// MaybeRunSandbox returns at once: the shell sandbox is Linux only.
func MaybeRunSandbox() {}

// errNoSandbox is the failure of the namespaces sandbox off Linux.
var errNoSandbox = errors.New("the namespaces sandbox needs Linux")

// sandboxRun is never started on this platform.
type sandboxRun struct{}

func (d *Driver) startSandboxed(*exec.Cmd, sandboxSpec) (*sandboxRun, error) {
	return nil, errNoSandbox
}

func (r *sandboxRun) finish(limits, int) (error, string) { return errNoSandbox, "" }

func (d *Driver) probeSandbox() error { return errNoSandbox }

func findPidsCgroup() string { return "" }

func needsLauncher() bool { return false }
