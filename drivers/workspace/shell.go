package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// drainGrace bounds how long Run waits for a command's output after its
// process group is gone. Only a process that left the group (setsid) can
// still hold the pipes then, and the call must not wait for it.
const drainGrace = time.Second

// basePath is the PATH commands get unless the caller sets one.
const basePath = "/usr/local/bin:/usr/bin:/bin"

func (d *Driver) runShell(ctx context.Context, a args, r *report) {
	s, err := parseShell(a, d.defaultTimeout)
	if err != nil {
		r.invalid(err)
		return
	}
	r.data["command"] = s.command

	dir := d.absRoot
	if s.cwd != "" {
		// Like a file operation's path, cwd is walked without following
		// a symbolic link, so policy saw the folder the command starts in.
		fd, err := d.openDir(s.cwd, false)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.failed(fmt.Errorf("cwd %s does not exist", s.cwd))
			return
		case errors.Is(err, syscall.ENOTDIR):
			r.failed(fmt.Errorf("cwd %s is not a directory", s.cwd))
			return
		case err != nil:
			r.failed(fmt.Errorf("cwd: %w", err))
			return
		}
		syscall.Close(fd)
		dir = filepath.Join(d.absRoot, filepath.FromSlash(s.cwd))
	}
	if err := d.root.Mkdir(tmpDirName, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		r.failed(fmt.Errorf("create TMPDIR %s: %w", tmpDirName, err))
		return
	}

	// The call's own deadline may come before the command's timeout; the
	// message then says which of the two ended the command.
	callDeadline, hasCallDeadline := ctx.Deadline()
	callDeadlineFirst := hasCallDeadline && callDeadline.Before(time.Now().Add(s.timeout))
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	x := d.execute(ctx, s.command, dir, d.environ(s.env), s.timeout)

	if x.startErr != nil {
		r.failed(x.startErr)
		return
	}
	r.stdout = x.stdout
	r.stderr = x.stderr
	r.exitCode = x.exitCode
	r.data["exitCode"] = x.exitCode
	r.data["durationMs"] = x.duration.Milliseconds()
	r.data["timedOut"] = x.timedOut
	r.data["stdoutTruncated"] = x.stdoutTruncated
	r.data["stderrTruncated"] = x.stderrTruncated
	r.data["success"] = x.exitCode == 0
	r.data["sandbox"] = d.sandbox
	if d.sandbox == SandboxNamespaces {
		r.data["network"] = d.network
		r.data["limits"] = d.callLimits(s.timeout).data()
	}
	if x.limitHit != "" {
		r.data["limitExceeded"] = x.limitHit
	}

	var failure error
	switch {
	case x.timedOut:
		failure = fmt.Errorf("command timed out after %v and was killed", s.timeout)
		if callDeadlineFirst {
			failure = errors.New("command killed at the call's deadline, before its own timeout")
		}
		r.exitCode = exitTimeout
		r.data["exitCode"] = exitTimeout
		r.data["category"] = categoryTimeout
	case x.canceled:
		failure = fmt.Errorf("command killed because the call was canceled: %w", context.Canceled)
		r.data["category"] = categoryExecution
	case x.limitHit != "":
		// A command that was refused what it asked for did not do its
		// work, whatever status it chose to exit with.
		failure = errors.New("sandbox: " + x.limitHit)
		if r.exitCode == 0 {
			r.exitCode = exitExecution
			r.data["exitCode"] = exitExecution
		}
		r.data["category"] = categoryExecution
	default:
		return
	}
	if x.limitHit != "" && (x.timedOut || x.canceled) {
		failure = fmt.Errorf("%w (sandbox: %s)", failure, x.limitHit)
	}
	r.cause = failure
	r.data["success"] = false
	r.data["error"] = failure.Error()
	if r.stderr != "" && r.stderr[len(r.stderr)-1] != '\n' {
		r.stderr += "\n"
	}
	r.stderr += failure.Error() + "\n"
}

// environ returns the scrubbed environment of a command: a fixed base that
// the caller's variables may override, and nothing of the gateway's own.
func (d *Driver) environ(extra map[string]string) []string {
	env := map[string]string{
		"PATH":   basePath,
		"HOME":   d.absRoot,
		"LANG":   "C.UTF-8",
		"TMPDIR": filepath.Join(d.absRoot, tmpDirName),
	}
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// execution is the outcome of one command.
type execution struct {
	startErr        error // the command could not be started
	started         time.Time
	duration        time.Duration
	exitCode        int
	stdout, stderr  string
	stdoutTruncated bool
	stderrTruncated bool
	timedOut        bool   // killed at ctx's deadline
	canceled        bool   // killed because ctx was canceled
	limitHit        string // a sandbox limit the command ran into, if known
}

// execute runs command with the shell in its own process group and kills
// the whole group when the shell exits or ctx ends, whichever comes first.
//
// In the namespaces sandbox the process started is the sandbox's init, PID
// 1 of its own PID namespace: when it dies, the kernel kills every process
// the command started, whatever session or group it moved to.
func (d *Driver) execute(ctx context.Context, command, dir string, env []string, timeout time.Duration) execution {
	x := execution{started: time.Now()}
	if err := ctx.Err(); err != nil {
		// Nothing runs for a call that has already ended.
		x.timedOut = errors.Is(err, context.DeadlineExceeded)
		x.canceled = !x.timedOut
		x.exitCode = exitExecution
		return x
	}

	// The command writes into pipes of our own rather than ones os/exec
	// would create, so that waiting for the shell does not also wait for
	// every process that inherited them.
	outR, outW, err := os.Pipe()
	if err != nil {
		x.startErr = fmt.Errorf("start shell: %w", err)
		return x
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		x.startErr = fmt.Errorf("start shell: %w", err)
		return x
	}
	defer errR.Close()

	cmd := exec.Command(d.shell, "-c", command)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = shellProcAttr()
	var sandbox *sandboxRun
	lim := d.callLimits(timeout)
	if d.sandbox == SandboxNamespaces {
		sandbox, err = d.startSandboxed(cmd, sandboxSpec{
			Network: d.network, Shell: d.shell, Command: command, Dir: dir, Env: env,
			Root: d.absRoot, Hide: d.hide, Limits: lim,
		})
	} else {
		err = cmd.Start()
	}
	// The child holds its own copies; ours must go for EOF to arrive.
	outW.Close()
	errW.Close()
	if err != nil {
		if cmd.Process != nil {
			// Started, but the sandbox could not be set up around it.
			awaitExit(cmd)()
			sandbox.finish(lim, 0)
		}
		x.startErr = fmt.Errorf("start shell: %w", err)
		return x
	}

	stdout := capture{limit: d.outputLimit}
	stderr := capture{limit: d.outputLimit}
	var readers sync.WaitGroup
	readers.Go(func() { io.Copy(&stdout, outR) })
	readers.Go(func() { io.Copy(&stderr, errR) })

	pid := cmd.Process.Pid
	var reap func() error
	exited := make(chan struct{})
	go func() {
		reap = awaitExit(cmd)
		close(exited)
	}()
	killed := false
	select {
	case <-exited:
	case <-ctx.Done():
		killGroup(pid)
		killed = true
		<-exited
	}
	// Background processes the shell left behind die with it.
	killGroup(pid)
	waitErr := reap()
	x.duration = time.Since(x.started)

	drained := make(chan struct{})
	go func() {
		readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		outR.SetReadDeadline(time.Now())
		errR.SetReadDeadline(time.Now())
		<-drained
	}
	x.stdout, x.stdoutTruncated = stdout.String()
	x.stderr, x.stderrTruncated = stderr.String()

	if cmd.ProcessState == nil {
		// Only a failed wait system call gets here; the shell's status is
		// unknown.
		x.startErr = fmt.Errorf("wait for shell: %w", waitErr)
		return x
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	x.exitCode = ws.ExitStatus()
	if ws.Signaled() {
		x.exitCode = 128 + int(ws.Signal())
		// A shell that exited on its own just as ctx ended keeps its own
		// status; only a kill of ours counts as a timeout or cancellation.
		if killed {
			x.timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
			x.canceled = !x.timedOut
		}
	}
	if sandbox != nil {
		setupErr, limitHit := sandbox.finish(lim, x.exitCode)
		if setupErr != nil && !killed {
			// Nothing ran: whatever the init's status, this is no
			// command's result.
			x.startErr = setupErr
		}
		x.limitHit = limitHit
	}
	return x
}

// killGroup sends SIGKILL to every process in the group pgid. A group that
// is already gone is not an error worth reporting.
func killGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}
