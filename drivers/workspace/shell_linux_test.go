package workspace

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/drivers"
)

// hostProcessesWith returns the pids of live host processes whose command
// line contains marker.
func hostProcessesWith(t *testing.T, marker string) []string {
	t.Helper()
	cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), marker) {
			continue // ended meanwhile, or another process
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if err != nil {
			continue
		}
		if _, rest, ok := strings.Cut(string(stat), ") "); ok && (strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")) {
			continue
		}
		found = append(found, filepath.Base(filepath.Dir(p)))
	}
	return found
}

// waitNoHostProcessWith fails unless no host process carries marker within
// ten seconds; the escapes tried would live for 300.
func waitNoHostProcessWith(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		live := hostProcessesWith(t, marker)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v started by the command survived the call", live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func randomMarker(t *testing.T) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	return "tgmark" + hex.EncodeToString(b[:])
}

// landlockABI returns the kernel's Landlock ABI version, 0 without it.
func landlockABI() int {
	const createRulesetVersion = 1
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, createRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func TestSandboxEscapesLeaveNoProcessBehind(t *testing.T) {
	// Not parallel: it bounds wall-clock time, which tests sharing the
	// machine's two cores would take from it.
	escapes := []struct {
		name   string
		launch string // starts one process whose command line holds MARK
	}{
		{"setsid", `setsid sh -c 'sleep 300; : MARK' &`},
		{"double fork", `(sh -c 'sleep 300; : MARK' &) &`},
		{"nohup", `nohup sh -c 'sleep 300; : MARK' >/dev/null 2>&1 &`},
		{"setsid and a new process group from a subshell", `sh -c 'setsid sh -c "sleep 300; : MARK" & exit 0'`},
	}
	ends := []struct {
		name    string
		tail    string
		timeout int
	}{
		{"after a normal end", "sleep 1; echo done", 0},
		// A timeout long enough for a sandbox to start on a loaded
		// machine, and far enough below the 30 s sleep to tell a kill
		// from a command left running.
		{"after a timeout", "sleep 30", 5000},
	}
	for _, e := range escapes {
		for _, end := range ends {
			t.Run(e.name+" "+end.name, func(t *testing.T) {
				d, _ := newTestDriver(t)
				marker := randomMarker(t)
				args := map[string]any{"command": strings.ReplaceAll(e.launch, "MARK", marker) + "\n" + end.tail}
				if end.timeout > 0 {
					args["timeout"] = end.timeout
				}
				// The escapee must really run on the host during the call,
				// or its absence afterwards would prove nothing.
				var seen atomic.Bool
				stop := make(chan struct{})
				watched := make(chan struct{})
				go func() {
					defer close(watched)
					for {
						select {
						case <-stop:
							return
						default:
						}
						if len(hostProcessesWith(t, marker)) > 0 {
							seen.Store(true)
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
				start := time.Now()
				res := run(t, d, "shell", args)
				close(stop)
				<-watched
				if elapsed := time.Since(start); elapsed > 15*time.Second {
					t.Errorf("call took %v", elapsed)
				}
				if !seen.Load() {
					t.Fatalf("the escaping process never ran (stdout %q, stderr %q)", res.Stdout, res.Stderr)
				}
				waitNoHostProcessWith(t, marker)
			})
		}
	}
}

func TestShellWithoutSandboxKillsItsProcessGroup(t *testing.T) {
	t.Parallel()
	d, _ := newTestDriverConfig(t, Config{Sandbox: SandboxNone})
	for _, tail := range []string{"echo done", "sleep 30"} {
		t.Run(tail, func(t *testing.T) {
			marker := randomMarker(t)
			res := run(t, d, "shell", map[string]any{
				"command": fmt.Sprintf("sh -c 'sleep 300; : %[1]s' & sh -c 'sh -c \"sleep 300; : %[1]s\" & sleep 300' & sleep 0.3; %[2]s", marker, tail),
				"timeout": 1000,
			})
			if res.Stdout != "" && res.Stdout != "done\n" {
				t.Errorf("stdout %q", res.Stdout)
			}
			waitNoHostProcessWith(t, marker)
		})
	}
}

// gatewayTree lays out a gateway's own files beside a workspace, as a
// deployment from one folder does, and returns the folder and the paths
// to hide.
func gatewayTree(t *testing.T) (dir string, hide []string) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{
		"policies/policy.default.cedar":                 "permit (principal, action, resource); // POLICY-SENTINEL",
		"toolgate-evidence/requests/other/request.json": `{"request_id": "other", "x": "EVIDENCE-SENTINEL"}`,
		"toolgate-spool/queued.json":                    "SPOOL-SENTINEL",
		"signing.key":                                   "SIGNING-KEY-SENTINEL",
		"toolgate.yaml":                                 "# CONFIG-SENTINEL",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"policies", "toolgate-evidence", "toolgate-spool", "signing.key", "toolgate.yaml"} {
		hide = append(hide, filepath.Join(dir, name))
	}
	return dir, hide
}

func TestSandboxHidesTheGatewaysFiles(t *testing.T) {
	t.Parallel()
	dir, hide := gatewayTree(t)
	// A configuration kept in a system folder is visible through the
	// read-only bind of /etc unless masked.
	etcDir := filepath.Join("/etc", randomMarker(t))
	if err := os.MkdirAll(etcDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etcDir) })
	etcFile := etcDir + ".key"
	if err := os.WriteFile(etcFile, []byte("ETC-KEY-SENTINEL"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(etcFile) })
	if err := os.WriteFile(filepath.Join(etcDir, "toolgate.yaml"), []byte("ETC-CONFIG-SENTINEL"), 0o600); err != nil {
		t.Fatal(err)
	}
	hide = append(hide, etcDir, etcFile)
	d, root := newTestDriverConfig(t, Config{Root: filepath.Join(dir, "workspace"), Hide: hide})

	attacks := []struct {
		name    string
		command string
	}{
		{"absolute paths", fmt.Sprintf("cat %[1]s/policies/* %[1]s/signing.key %[1]s/toolgate.yaml %[1]s/toolgate-evidence/requests/other/request.json %[1]s/toolgate-spool/*", dir)},
		{"relative paths out of the workspace", "cat ../policies/* ../signing.key ../toolgate.yaml ../toolgate-evidence/requests/other/request.json"},
		{"a listing of the parent folder", "ls -laR .. 2>&1; find / -name '*.cedar' 2>/dev/null"},
		{"a config in /etc", fmt.Sprintf("cat %s/toolgate.yaml %s; ls -la %s", etcDir, etcFile, etcDir)},
		{"grep over every readable file", "grep -rl SENTINEL / 2>/dev/null"},
		{"symlink from the workspace", fmt.Sprintf("ln -s %s/signing.key k && cat k; ln -s %s e && cat e/toolgate.yaml", dir, etcDir)},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			res := run(t, d, "shell", map[string]any{"command": a.command})
			if strings.Contains(res.Stdout+res.Stderr, "SENTINEL") {
				t.Errorf("the command read a gateway file:\nstdout %s\nstderr %s", res.Stdout, res.Stderr)
			}
		})
	}

	t.Run("rm -rf of the evidence and of another request", func(t *testing.T) {
		res := run(t, d, "shell", map[string]any{"command": fmt.Sprintf(
			"rm -rf %[1]s/toolgate-evidence/requests/other %[1]s/toolgate-evidence ../toolgate-evidence %[1]s/policies %[1]s/signing.key %[2]s; echo tried",
			dir, etcDir)})
		if !strings.Contains(res.Stdout, "tried") {
			t.Fatalf("the command did not run: %q %q", res.Stdout, res.Stderr)
		}
		for _, p := range []string{"toolgate-evidence/requests/other/request.json", "policies/policy.default.cedar", "signing.key"} {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("%s after the command: %v", p, err)
			}
		}
		if _, err := os.Stat(filepath.Join(etcDir, "toolgate.yaml")); err != nil {
			t.Errorf("config in /etc after the command: %v", err)
		}
	})

	t.Run("the workspace itself stays writable", func(t *testing.T) {
		res := run(t, d, "shell", map[string]any{"command": "echo made > made.txt && mkdir -p sub && echo x > $TMPDIR/t && cat made.txt"})
		wantSuccess(t, res)
		if b, err := os.ReadFile(filepath.Join(root, "made.txt")); err != nil || string(b) != "made\n" {
			t.Errorf("made.txt = %q, %v", b, err)
		}
	})

	t.Run("system folders are read-only", func(t *testing.T) {
		victim := etcDir + "-written"
		res := run(t, d, "shell", map[string]any{"command": fmt.Sprintf("echo x > %s; touch /usr/pwned; echo end", victim)})
		if _, err := os.Stat(victim); err == nil {
			os.Remove(victim)
			t.Error("the command wrote into the host's /etc")
		}
		if _, err := os.Stat("/usr/pwned"); err == nil {
			os.Remove("/usr/pwned")
			t.Error("the command wrote into the host's /usr")
		}
		if !strings.Contains(res.Stdout, "end") {
			t.Errorf("stdout %q", res.Stdout)
		}
	})
}

func TestSandboxHidesTheGatewaysEnvironment(t *testing.T) {
	const secret = "gw-secret-5bd1f0c2a7e94e6b"
	t.Setenv("TOOLGATE_TEST_SIGNING_SEED", secret)
	d, _ := newTestDriver(t)
	attacks := []string{
		"cat /proc/$PPID/environ",
		"cat /proc/1/environ",
		"for f in /proc/*/environ; do cat $f; done",
		fmt.Sprintf("cat /proc/%d/environ /proc/%d/cmdline", os.Getpid(), os.Getpid()),
		"ls /proc; cat /proc/*/cmdline",
		// With capabilities inside the user namespace the command could
		// mount the host's proc or lift the masks; it has none.
		"mkdir -p m && mount -t proc proc m && cat m/*/environ",
		"umount -l /etc; umount -l /usr; cat /proc/self/status | grep -i cap",
	}
	for _, a := range attacks {
		t.Run(a, func(t *testing.T) {
			res := run(t, d, "shell", map[string]any{"command": a})
			if strings.Contains(res.Stdout+res.Stderr, secret) {
				t.Errorf("the gateway's environment leaked:\n%s%s", res.Stdout, res.Stderr)
			}
		})
	}
	t.Run("no capabilities", func(t *testing.T) {
		res := run(t, d, "shell", map[string]any{"command": "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"})
		wantSuccess(t, res)
		for line := range strings.Lines(res.Stdout) {
			if !strings.HasSuffix(strings.TrimSpace(line), "0000000000000000") {
				t.Errorf("capability set %q is not empty", strings.TrimSpace(line))
			}
		}
	})
}

func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	connect := fmt.Sprintf("bash -c 'echo hi > /dev/tcp/127.0.0.1/%d' && echo connected", port)

	t.Run("none: the host's loopback is unreachable", func(t *testing.T) {
		d, _ := newTestDriver(t)
		res := run(t, d, "shell", map[string]any{"command": connect})
		if res.ExitCode == 0 || strings.Contains(res.Stdout, "connected") || accepted.Load() != 0 {
			t.Errorf("the command reached a host listener: exit %d, stdout %q, accepted %d", res.ExitCode, res.Stdout, accepted.Load())
		}
	})
	t.Run("host: the listener is reachable", func(t *testing.T) {
		d, _ := newTestDriverConfig(t, Config{Network: NetworkHost})
		res := run(t, d, "shell", map[string]any{"command": connect})
		if res.ExitCode != 0 || accepted.Load() != 1 {
			t.Errorf("network host: exit %d, stderr %q, accepted %d", res.ExitCode, res.Stderr, accepted.Load())
		}
	})
}

func TestSandboxLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       Config
		command   string
		timeout   int
		wantLimit string // in limitExceeded, when the driver can tell
		check     func(t *testing.T, root string)
	}{
		{
			name: "a fork bomb runs into the process cap",
			cfg:  Config{MaxProcesses: 32},
			// Each b waits for the pipeline it starts, so the shell cannot
			// exit before forks are refused; a backgrounded bomb (b | b &)
			// could finish its first pipeline, and the call, before its
			// children reached the cap.
			command:   `b() { b | b; }; b`,
			timeout:   3000,
			wantLimit: "max_processes 32",
		},
		{
			name:    "a memory hog runs into the address space cap",
			cfg:     Config{MaxMemoryBytes: 256 << 20},
			command: `awk 'BEGIN { s = "x"; while (1) s = s s }'`,
			timeout: 20000,
		},
		{
			name:      "a huge file write runs into the file size cap",
			cfg:       Config{MaxFileBytes: 1 << 20},
			command:   `head -c 10485760 /dev/zero > big`,
			timeout:   10000,
			wantLimit: "max_file_bytes 1048576",
			check: func(t *testing.T, root string) {
				if fi, err := os.Stat(filepath.Join(root, "big")); err != nil || fi.Size() > 1<<20 {
					t.Errorf("big: %v, %v; want at most 1 MiB", fi, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newTestDriverConfig(t, tt.cfg)
			start := time.Now()
			res := run(t, d, "shell", map[string]any{"command": tt.command, "timeout": tt.timeout})
			elapsed := time.Since(start)
			data := dataOf(t, res)
			if res.ExitCode == 0 || data["success"] != false {
				t.Errorf("the call succeeded: exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			if elapsed > time.Duration(tt.timeout)*time.Millisecond+3*time.Second {
				t.Errorf("call took %v", elapsed)
			}
			if _, ok := data["limits"].(map[string]any); !ok {
				t.Errorf("data names no limits: %v", data)
			}
			if got, _ := data["limitExceeded"].(string); !strings.Contains(got, tt.wantLimit) {
				t.Errorf("limitExceeded = %q, want it to name %q (stderr %q)", got, tt.wantLimit, res.Stderr)
			}
			if tt.check != nil {
				tt.check(t, root)
			}
			// The driver keeps serving.
			wantSuccess(t, run(t, d, "shell", map[string]any{"command": "echo alive"}))
		})
	}
}

func TestSandboxLandlockIsASecondLayer(t *testing.T) {
	t.Parallel()
	abi := landlockABI()
	t.Logf("kernel Landlock ABI: %d", abi)
	d, _ := newTestDriver(t)
	// The mount namespace shows / (a read-only tmpfs); Landlock, where the
	// kernel has it, does not even let the command list it.
	res := run(t, d, "shell", map[string]any{"command": "ls / >/dev/null && echo listed"})
	listed := strings.Contains(res.Stdout, "listed")
	if abi > 0 && listed {
		t.Errorf("with Landlock ABI %d the command listed /, outside every rule", abi)
	}
	if abi == 0 && !listed {
		t.Errorf("without Landlock the command could not list /: %q", res.Stderr)
	}
}

func TestSandboxThroughTheLauncher(t *testing.T) {
	t.Parallel()
	// A gateway that is non-dumpable and not root starts the init through
	// the launcher stage; the sandbox it gets is the same.
	d, _ := newTestDriver(t)
	d.launcher = true
	res := run(t, d, "shell", map[string]any{"command": "cat /proc/1/cmdline"})
	wantSuccess(t, res)
	if !strings.HasPrefix(res.Stdout, "toolgate-sandbox-init") {
		t.Errorf("the command does not run under the sandbox init: %q", res.Stdout)
	}
	marker := randomMarker(t)
	res = run(t, d, "shell", map[string]any{"command": "setsid sh -c 'sleep 300; : " + marker + "' & sleep 30", "timeout": 1000})
	wantFailure(t, res, 124, "timeout", "timed out")
	waitNoHostProcessWith(t, marker)
}

func TestSandboxRefusesAShellItCannotRun(t *testing.T) {
	t.Parallel()
	// A shell outside the system folders is not visible in the sandbox:
	// New finds out at once instead of failing every call.
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(t.TempDir(), "mysh")
	if err := os.WriteFile(private, sh, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{Root: filepath.Join(t.TempDir(), "ws"), Shell: private})
	if err == nil || !strings.Contains(err.Error(), "sandbox") || !strings.Contains(err.Error(), "mysh") {
		t.Fatalf("New = %v, want an error naming the sandbox and the shell", err)
	}
	d, err := New(Config{Root: filepath.Join(t.TempDir(), "ws"), Shell: private, Sandbox: SandboxNone})
	if err != nil {
		t.Fatalf("without the sandbox: %v", err)
	}
	d.Close()
}

func TestSandboxInitOutsideANamespaceRefusesToRun(t *testing.T) {
	t.Parallel()
	// The init started by hand, not as PID 1 of fresh namespaces, must not
	// start anything.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	specW.Close()
	cmd := exec.CommandContext(ctx, exe, sandboxGuardArg)
	cmd.Env = []string{sandboxStageEnv + "=" + stageInit}
	cmd.ExtraFiles = []*os.File{specR, statusW}
	out, err := cmd.CombinedOutput()
	statusW.Close()
	specR.Close()
	status := make([]byte, 4096)
	n, _ := statusR.Read(status)
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitSandboxSetup {
		t.Fatalf("init outside a namespace: %v, output %s", err, out)
	}
	if !strings.Contains(string(status[:n]), "not PID 1") {
		t.Errorf("status %q, want it to say why", status[:n])
	}
}

// BenchmarkShellTrue measures what the sandbox adds to one call: the
// shell running `true` with and without it, in the same run.
func BenchmarkShellTrue(b *testing.B) {
	for _, mode := range []string{SandboxNone, SandboxNamespaces} {
		b.Run("sandbox="+mode, func(b *testing.B) {
			d, err := New(Config{Root: filepath.Join(b.TempDir(), "ws"), Sandbox: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			call := drivers.Call{RequestID: "bench", ToolID: "workspace.shell", Target: "shell", Args: map[string]any{"command": "true"}}
			for b.Loop() {
				res, err := d.Run(context.Background(), call)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("Run: %v, exit %d, stderr %q", err, res.ExitCode, res.Stderr)
				}
			}
		})
	}
}
