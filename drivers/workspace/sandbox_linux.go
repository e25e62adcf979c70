package workspace

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxGuardArg is passed to every sandbox stage. A binary that serves
// workspace.shell calls MaybeRunSandbox before it looks at its arguments;
// a test binary that forgot to must run no tests when started as a stage,
// rather than the whole suite again inside the sandbox.
const sandboxGuardArg = "-test.run=^$"

// statusInitStarted is the first byte the init writes to its status pipe,
// proof that the executable ran MaybeRunSandbox rather than its own main.
const statusInitStarted = 'I'

// sandboxTaskHeadroom is added to the pids cgroup's cap for the sandbox's
// own tasks: the init's runtime threads and, briefly, the exec stage's.
const sandboxTaskHeadroom = 32

// sandboxRun is one started sandbox: the driver's side of its status pipe
// and its pids cgroup.
type sandboxRun struct {
	status chan []byte // everything the stages wrote to the status pipe
	cgroup string      // the call's pids cgroup folder, or ""
}

// startSandboxed starts cmd, whose Stdout and Stderr are set, as the init
// of a new sandbox that runs spec, and returns once the init holds the
// spec. The init is the process cmd.Process names; killing its process
// group ends everything the command started.
func (d *Driver) startSandboxed(cmd *exec.Cmd, spec sandboxSpec) (*sandboxRun, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer specR.Close()
	defer specW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{specR, statusW}
	if d.launcher {
		stageCommand(cmd, stageLaunch)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	} else {
		initCommand(cmd, spec.Network)
		cmd.SysProcAttr.Setpgid = true
	}
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		statusR.Close()
		return nil, fmt.Errorf("start sandbox (are user namespaces enabled?): %w", err)
	}
	run := &sandboxRun{status: make(chan []byte, 1)}
	go func() {
		defer statusR.Close()
		b, _ := io.ReadAll(io.LimitReader(statusR, 64<<10))
		run.status <- b
	}()
	// The init waits for its spec, so nothing has run yet when it joins
	// the cgroup.
	if d.pidsCgroup != "" {
		if run.cgroup, err = newCallCgroup(d.pidsCgroup, d.limits.Processes+sandboxTaskHeadroom, cmd.Process.Pid); err != nil {
			killGroup(cmd.Process.Pid)
			return run, fmt.Errorf("sandbox: pids cgroup: %w", err)
		}
	}
	if err := json.NewEncoder(specW).Encode(spec); err != nil {
		killGroup(cmd.Process.Pid)
		return run, fmt.Errorf("sandbox: send spec: %w", err)
	}
	return run, nil
}

// stageCommand makes cmd start this executable as a sandbox stage.
func stageCommand(cmd *exec.Cmd, stage string) {
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{"toolgate-sandbox-" + stage, sandboxGuardArg}
	cmd.Env = []string{sandboxStageEnv + "=" + stage}
	cmd.Dir = "/"
}

// initCommand makes cmd start the sandbox init in fresh namespaces, as
// root in its user namespace, mapped to this process's uid and gid.
func initCommand(cmd *exec.Cmd, network string) {
	stageCommand(cmd, stageInit)
	flags := syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
	if network == NetworkNone {
		flags |= syscall.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  uintptr(flags),
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// The kernel kills the init, and with it the whole PID namespace,
		// when its parent dies.
		Pdeathsig: syscall.SIGKILL,
	}
}

// needsLauncher reports whether the init must be started from a launcher
// stage rather than from this process. A child inherits its parent's
// non-dumpable state until it executes, and the uid_map of a non-dumpable
// process can be written only by root: a gateway that is non-dumpable (as
// serve makes it) and not root cannot map the init's user namespace
// itself. The launcher, freshly executed, is dumpable.
func needsLauncher() bool {
	if os.Geteuid() == 0 {
		return false
	}
	dumpable, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	return err == nil && dumpable != 1
}

// finish is called once the init has been reaped. It returns the setup
// failure the stages reported, if any, and the limit the call ran into
// that the driver can tell, if any.
func (r *sandboxRun) finish(l limits, exitCode int) (setupErr error, limitHit string) {
	status := <-r.status
	switch {
	case len(status) == 0:
		setupErr = errors.New("sandbox: the init did not run: this executable does not call workspace.MaybeRunSandbox first thing in main")
	case status[0] != statusInitStarted:
		setupErr = fmt.Errorf("sandbox setup failed, the command did not run: %s", status)
	case len(status) > 1:
		setupErr = fmt.Errorf("sandbox setup failed, the command did not run: %s", status[1:])
	}
	if r.cgroup != "" {
		if events, err := os.ReadFile(filepath.Join(r.cgroup, "pids.events")); err == nil && pidsMaxHit(string(events)) {
			limitHit = fmt.Sprintf("process limit reached (max_processes %d)", l.Processes)
		}
		removeCgroup(r.cgroup)
	}
	switch exitCode {
	case 128 + int(syscall.SIGXFSZ):
		limitHit = fmt.Sprintf("file size limit reached (max_file_bytes %d)", l.FileBytes)
	case 128 + int(syscall.SIGXCPU):
		limitHit = fmt.Sprintf("CPU time limit reached (%d s)", l.CPUSeconds)
	}
	return setupErr, limitHit
}

// pidsMaxHit reports whether a pids.events file counts refused forks.
func pidsMaxHit(events string) bool {
	for line := range strings.Lines(events) {
		if n, ok := strings.CutPrefix(strings.TrimSpace(line), "max "); ok && n != "0" {
			return true
		}
	}
	return false
}

// probeSandbox runs a trivial command in the sandbox, so that a host where
// it cannot work is found when the driver starts, not at the first call.
func (d *Driver) probeSandbox() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x := d.execute(ctx, "exit 0", d.absRoot, d.environ(nil), 10*time.Second)
	switch {
	case x.startErr != nil:
		return x.startErr
	case x.timedOut:
		return errors.New("a trivial command did not finish within 30s")
	case x.exitCode != 0:
		return fmt.Errorf("a trivial command exited %d: %s", x.exitCode, strings.TrimSpace(x.stderr))
	}
	return nil
}

// findPidsCgroup returns a cgroup folder in which this process may create
// child cgroups with the pids controller, or "" when there is none: the
// gateway's own cgroup in a cgroup v1 pids hierarchy, or in the cgroup v2
// hierarchy when pids is delegated to it.
func findPidsCgroup() string {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	var v1, v2 string // mount points
	sc := bufio.NewScanner(strings.NewReader(string(mounts)))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup" && slices.Contains(strings.Split(g[2], ","), "pids"):
			v1 = f[4]
		case g[0] == "cgroup2" && v2 == "":
			v2 = f[4]
		}
	}
	for line := range strings.Lines(string(own)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case v1 != "" && slices.Contains(strings.Split(parts[1], ","), "pids"):
			dir = filepath.Join(v1, parts[2])
		case v1 == "" && v2 != "" && parts[0] == "0":
			dir = filepath.Join(v2, parts[2])
		default:
			continue
		}
		if probe, err := newCallCgroup(dir, 1, 0); err == nil {
			removeCgroup(probe)
			return dir
		}
	}
	return ""
}

// newCallCgroup creates a child cgroup of parent capped at max tasks and,
// unless pid is 0, moves pid into it.
func newCallCgroup(parent string, max, pid int) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	dir := filepath.Join(parent, "toolgate-shell-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		removeCgroup(dir)
		return "", err
	}
	if pid != 0 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			removeCgroup(dir)
			return "", err
		}
	}
	return dir, nil
}

// removeCgroup removes a call's cgroup. Its tasks are gone by now, but
// the kernel may take a moment to notice.
func removeCgroup(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
