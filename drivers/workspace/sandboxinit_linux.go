package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// systemDirs are the host folders a sandboxed command sees, read-only,
// where they exist. Everything else of the host is absent.
var systemDirs = []string{"/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// devices are the host's device nodes bound into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// File descriptors a sandbox stage inherits beyond stdio.
const (
	specFD   = 3 // read end of a pipe carrying the sandboxSpec as JSON
	statusFD = 4 // write end of the status pipe (see execSandboxed)
)

// maxSpecBytes bounds what a stage reads as its spec: a command and its
// environment, both bounded by the driver's argument limits.
const maxSpecBytes = 16 << 20

// MaybeRunSandbox runs this process as a stage of the workspace shell
// sandbox when the workspace driver started it as one, and then exits; in
// every other process it returns at once without doing anything.
//
// The driver runs a sandboxed command by starting the current executable
// (/proc/self/exe) again inside fresh namespaces, so every binary that
// serves workspace.shell with the sandbox on must call MaybeRunSandbox
// first thing in main, before flags are parsed or goroutines started; so
// must the TestMain of every test binary whose tests run shell commands.
// A binary that does not is detected by the driver, and its shell calls
// fail without running anything.
func MaybeRunSandbox() {
	stage, ok := os.LookupEnv(sandboxStageEnv)
	if !ok {
		return
	}
	os.Unsetenv(sandboxStageEnv)
	status := os.NewFile(statusFD, "sandbox status")
	var err error
	switch stage {
	case stageInit:
		var code int
		if code, err = runInit(status); err == nil {
			exitNow(code)
		}
	case stageLaunch:
		var code int
		if code, err = runLauncher(status); err == nil {
			exitNow(code)
		}
	case stageExec:
		err = runExec(status)
	default:
		err = fmt.Errorf("unknown stage %q", stage)
	}
	msg := fmt.Sprintf("workspace sandbox %s: %v", stage, err)
	fmt.Fprintln(os.Stderr, msg)
	if status != nil {
		status.WriteString(msg)
	}
	exitNow(exitSandboxSetup)
}

// exitNow ends the process at once. The init's exit is what kills the
// command's leftovers and ends the call, so nothing may delay it (a
// race-enabled build, for one, sleeps a second in os.Exit).
func exitNow(code int) {
	unix.Exit(code)
}

// runLauncher starts the init in fresh namespaces, hands it the spec and
// the status pipe, and exits as it does. The driver kills the launcher's
// process group, which holds the init, to end a call.
func runLauncher(status *os.File) (int, error) {
	if status == nil {
		return 0, errors.New("no status pipe")
	}
	spec, err := readSpec()
	if err != nil {
		return 0, err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("spec pipe: %w", err)
	}
	cmd := &exec.Cmd{Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{specR, status}}
	initCommand(cmd, spec.Network)
	err = cmd.Start()
	specR.Close()
	if err != nil {
		specW.Close()
		return 0, fmt.Errorf("start init (are user namespaces enabled?): %w", err)
	}
	// The init and the exec stage hold the status pipe from here on.
	status.Close()
	err = json.NewEncoder(specW).Encode(spec)
	specW.Close()
	if err != nil {
		return 0, fmt.Errorf("send spec to init: %w", err)
	}
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// readSpec decodes the spec from its pipe.
func readSpec() (sandboxSpec, error) {
	var spec sandboxSpec
	f := os.NewFile(specFD, "sandbox spec")
	if f == nil {
		return spec, errors.New("no spec pipe")
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, maxSpecBytes)).Decode(&spec); err != nil {
		return spec, fmt.Errorf("read spec: %w", err)
	}
	return spec, nil
}

// runInit is PID 1 of a call's namespaces. It proves to the driver that it
// is the sandbox init, builds the call's root, starts the exec stage in it
// and reaps every process until the shell exits, whose status it returns.
// When it returns the process exits, and the kernel kills whatever is left
// in the PID namespace.
func runInit(status *os.File) (int, error) {
	if status == nil {
		return 0, errors.New("no status pipe")
	}
	// Only the driver, from outside, may end the init; a signal from a
	// command inside must not cut its own call's bookkeeping short.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	if _, err := status.Write([]byte{statusInitStarted}); err != nil {
		return 0, fmt.Errorf("status pipe: %w", err)
	}
	if os.Getpid() != 1 {
		return 0, errors.New("not PID 1 of a new PID namespace")
	}
	spec, err := readSpec()
	if err != nil {
		return 0, err
	}
	if err := buildRoot(spec); err != nil {
		return 0, fmt.Errorf("build root: %w", err)
	}
	child, err := startExecStage(spec, status)
	if err != nil {
		return 0, err
	}
	// The exec stage holds the status pipe now; it closes when the shell
	// starts, which is how the driver learns that setup succeeded.
	status.Close()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait: %w", err)
		}
		if pid != child {
			continue // an orphan adopted by the init, now reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}

// startExecStage starts this executable again as the exec stage, handing
// it the spec and the status pipe.
func startExecStage(spec sandboxSpec, status *os.File) (int, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("spec pipe: %w", err)
	}
	defer specR.Close()
	// The old root is gone, but the kernel still resolves /proc/self/exe
	// to this executable.
	cmd := exec.Command("/proc/self/exe", sandboxGuardArg)
	cmd.Args[0] = "toolgate-sandbox-exec"
	cmd.Env = []string{sandboxStageEnv + "=" + stageExec}
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{specR, status}
	if err := cmd.Start(); err != nil {
		specW.Close()
		return 0, fmt.Errorf("start exec stage: %w", err)
	}
	err = json.NewEncoder(specW).Encode(spec)
	specW.Close()
	if err != nil {
		return 0, fmt.Errorf("send spec to exec stage: %w", err)
	}
	return cmd.Process.Pid, nil
}

// runExec drops every privilege the namespaces gave, applies Landlock and
// the limits, and replaces itself with the shell. It returns only on
// failure.
func runExec(status *os.File) error {
	// Credentials, securebits and no_new_privs are per thread; the exec
	// below must come from the thread they were set on.
	runtime.LockOSThread()
	if status == nil {
		return errors.New("no status pipe")
	}
	// The shell must not inherit the status pipe: its closing on exec is
	// the driver's sign that the command started.
	unix.CloseOnExec(statusFD)
	spec, err := readSpec()
	if err != nil {
		return err
	}
	if err := os.Chdir(spec.Dir); err != nil {
		return fmt.Errorf("cwd: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := restrictLandlock(spec); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	// Everything exec needs is built before the limits: under the address
	// space limit this stage's Go runtime may fail to map another span,
	// and syscall.Exec allocates. The raw execve below allocates nothing.
	argv0, err := unix.BytePtrFromString(spec.Shell)
	if err != nil {
		return fmt.Errorf("exec %s: %w", spec.Shell, err)
	}
	argv, err := syscall.SlicePtrFromStrings([]string{spec.Shell, "-c", spec.Command})
	if err != nil {
		return fmt.Errorf("exec %s: %w", spec.Shell, err)
	}
	envv, err := syscall.SlicePtrFromStrings(spec.Env)
	if err != nil {
		return fmt.Errorf("exec %s: %w", spec.Shell, err)
	}
	if err := setLimits(spec.Limits); err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return fmt.Errorf("exec %s: %w", spec.Shell, errno)
}

// restrictLandlock confines file access to what the mount namespace shows
// anyway: read-only system folders and /proc, the workspace and /tmp
// read-write. It is a second layer, applied as far as the kernel's Landlock
// ABI allows and not at all on a kernel without Landlock.
func restrictLandlock(spec sandboxSpec) error {
	return landlock.V7.BestEffort().RestrictPaths(
		landlock.RODirs(append(append([]string{}, systemDirs...), "/proc")...).IgnoreIfMissing(),
		landlock.RWDirs(spec.Root, "/tmp"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full"),
		landlock.ROFiles("/dev/random", "/dev/urandom"),
	)
}

// dropCapabilities leaves the process with no capability in any user
// namespace, now or after exec: uid 0 inside the sandbox (the gateway's
// own uid outside) must not be able to undo the mounts that hide the
// gateway's files.
func dropCapabilities() error {
	// The securebits of linux/securebits.h: uid 0 gains no capability on
	// exec, and none of this can be changed back.
	const (
		noRoot                  = 1 << 0
		noRootLocked            = 1 << 1
		noSetuidFixup           = 1 << 2
		noSetuidFixupLocked     = 1 << 3
		keepCapsLocked          = 1 << 5
		noCapAmbientRaise       = 1 << 6
		noCapAmbientRaiseLocked = 1 << 7
		secure                  = noRoot | noRootLocked | noSetuidFixup | noSetuidFixupLocked |
			keepCapsLocked | noCapAmbientRaise | noCapAmbientRaiseLocked
	)
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secure, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("bounding set: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// setLimits applies the call's rlimits. They come last before exec: from
// here on the Go runtime of this stage may not map much more memory.
func setLimits(l limits) error {
	// The table and the Rlimit values live on this frame, so the last
	// setrlimit is followed by no allocation.
	set := [...]struct {
		name     string
		resource int
		value    uint64
	}{
		{"core size", unix.RLIMIT_CORE, 0},
		{"max_file_bytes", unix.RLIMIT_FSIZE, uint64(l.FileBytes)},
		{"cpu seconds", unix.RLIMIT_CPU, uint64(l.CPUSeconds)},
		{"max_processes", unix.RLIMIT_NPROC, uint64(l.Processes)},
		{"max_memory_bytes", unix.RLIMIT_AS, uint64(l.MemoryBytes)},
	}
	for _, s := range set {
		rl := unix.Rlimit{Cur: s.value, Max: s.value}
		if err := unix.Setrlimit(s.resource, &rl); err != nil {
			return fmt.Errorf("rlimit %s: %w", s.name, err)
		}
	}
	return nil
}

// buildRoot makes the call's root file system and moves into it: the
// system folders read-only, the workspace read-write at its own path, a
// fresh /proc, a tmpfs /tmp, a minimal /dev, the gateway's files masked,
// and nothing else of the host.
func buildRoot(spec sandboxSpec) error {
	// Nothing done here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// A scratch tmpfs becomes the root for the time of the build, with the
	// host's root below it at /old, so that host paths stay reachable
	// whatever the new root covers.
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=64k"); err != nil {
		return fmt.Errorf("scratch tmpfs: %w", err)
	}
	if err := os.Mkdir("/tmp/old", 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot("/tmp", "/tmp/old"); err != nil {
		return fmt.Errorf("pivot_root to scratch: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := populateRoot(spec, "/new"); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the scratch root on top of the new one;
	// detaching it takes the host's root, below it, away for good.
	if err := os.Chdir("/new"); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make root read-only: %w", err)
	}
	return nil
}

// populateRoot builds the new root at dir, taking host paths from /old.
func populateRoot(spec sandboxSpec, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, d := range systemDirs {
		if err := bindSystemDir("/old"+d, dir+d); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	if err := mkdirMount("proc", dir+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	tmpOpts := "mode=1777,size=" + strconv.FormatInt(spec.Limits.FileBytes, 10)
	if err := mkdirMount("tmpfs", dir+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return fmt.Errorf("/tmp: %w", err)
	}
	if err := buildDev(dir + "/dev"); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := os.MkdirAll(dir+spec.Root, 0o755); err != nil {
		return fmt.Errorf("workspace mount point: %w", err)
	}
	if err := bind("/old"+spec.Root, dir+spec.Root, false); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	for _, p := range spec.Hide {
		if err := mask(dir + p); err != nil {
			return fmt.Errorf("hide %s: %w", p, err)
		}
	}
	return nil
}

// bindSystemDir makes the host's folder src visible read-only at dst, or
// copies it when it is a symbolic link (merged /usr has /bin -> usr/bin).
func bindSystemDir(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.IsDir() {
		return nil
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	return bind(src, dst, true)
}

// bind mounts src at dst, with the mounts below src, nosuid and nodev,
// and read-only throughout when readOnly.
func bind(src, dst string, readOnly bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, &attr)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	// Before Linux 5.12 a recursive read-only bind cannot be made in one
	// step; a bind without the mounts below src is read-only throughout.
	if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", dst, "", flags, "")
}

// buildDev makes a read-only /dev holding the harmless host devices and
// the usual links into /proc.
func buildDev(dev string) error {
	if err := mkdirMount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range devices {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/old/dev/"+n, filepath.Join(dev, n), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// mask covers path, if it exists in the new root: a folder with an empty
// read-only tmpfs, anything else with the null device.
func mask(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return unix.Mount("tmpfs", path, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0000,size=4k")
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		// The driver passes resolved paths, so the link's target is masked
		// on its own; a mount here would follow the link.
		return nil
	}
	if err := unix.Mount("/old/dev/null", path, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// mkdirMount creates the folder dir and mounts a file system on it.
func mkdirMount(source, dir, fstype string, flags uintptr, data string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return unix.Mount(source, dir, fstype, flags, data)
}
