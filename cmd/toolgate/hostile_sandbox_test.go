package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/syncbuf"
)

// The hostile-input suite for class 5 of issue 11: a caller whom policy
// lets run workspace.shell tries to reach the gateway's secrets, files and
// host through the shell, on the real binary.

// hostileSecret is the value of an environment variable of the gateway
// that no configuration names as a secret, as an API key or a key seed in
// the environment would be.
const hostileSecret = "hostile-env-secret-9f3a61c07d2b48e5"

// sandboxDeployment is a gateway laid out as a real deployment from one
// folder: configuration, policies permitting the shell, a signing key,
// evidence and a spool beside the workspace.
type sandboxDeployment struct {
	dir string
	srv *server
	pem string // the signing key's PEM text
	n   int    // calls made, for request ids
}

func startSandboxDeployment(t *testing.T, driverKeys string) *sandboxDeployment {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("shell_for_all") permit (principal, action, resource in Driver::"workspace");`)
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "signing.pem"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	pem, err := os.ReadFile(filepath.Join(dir, "signing.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`# hostile sandbox deployment CONFIG-SENTINEL
evidence:
  url: file://./toolgate-evidence
  spool_dir: ./toolgate-spool
  signing_key: {file: ./signing.pem}
drivers:
  workspace:
    type: workspace
    root: ./workspace
%s`, driverKeys)
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"TOOLGATE_HOSTILE_SECRET=" + hostileSecret}, "--config", "toolgate.yaml")
	return &sandboxDeployment{dir: dir, srv: srv, pem: string(pem)}
}

// shellResult is what a caller sees of one workspace.shell call.
type shellResult struct {
	OK         bool `json:"ok"`
	ToolResult struct {
		ExitCode int            `json:"exit_code"`
		Stdout   string         `json:"stdout"`
		Stderr   string         `json:"stderr"`
		Data     map[string]any `json:"data"`
	} `json:"tool_result"`
	raw string
}

// shell runs command through the gateway and returns the response.
func (d *sandboxDeployment) shell(t *testing.T, command string, timeoutMs int) shellResult {
	t.Helper()
	d.n++
	args, _ := json.Marshal(map[string]any{"command": command, "timeout": timeoutMs})
	out, stderr, _ := runTool(t, d.dir, "call", "--addr", d.srv.addr, "--request-id", fmt.Sprintf("hostile-%d", d.n),
		"--tool", "workspace.shell", "--args", string(args), "--timeout", "60s")
	var res shellResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("call: %v\n%s%s", err, out, stderr)
	}
	res.raw = out
	return res
}

// evidenceText is every evidence file's content, concatenated.
func (d *sandboxDeployment) evidenceText(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(filepath.Join(d.dir, "toolgate-evidence"), func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			b.Write(data)
		}
		return nil
	})
	return b.String()
}

func TestHostileSandboxSecrets(t *testing.T) {
	t.Parallel()
	d := startSandboxDeployment(t, "")
	victim := d.shell(t, "echo victim", 5000)
	if !victim.OK {
		t.Fatalf("a plain shell call failed: %s", victim.raw)
	}
	evDir := filepath.Join(d.dir, "toolgate-evidence")
	attacks := []struct {
		name    string
		command string
	}{
		{"the gateway's environ through PPID", "cat /proc/$PPID/environ"},
		{"PID 1's environ", "cat /proc/1/environ"},
		{"every environ in /proc", "for f in /proc/*/environ; do cat $f; echo; done"},
		{"the signing key by absolute path", "cat " + filepath.Join(d.dir, "signing.pem")},
		{"the signing key through ../", "cat ../signing.pem"},
		{"the policies", fmt.Sprintf("cat %s/policies/* ../policies/*", d.dir)},
		{"the config file", fmt.Sprintf("cat %s/toolgate.yaml ../toolgate.yaml", d.dir)},
		{"another request's evidence", fmt.Sprintf("cat %s/requests/hostile-1/*.json ../toolgate-evidence/requests/hostile-1/*.json", evDir)},
		{"a search of the whole file system", "grep -rl -e 'CONFIG-SENT[I]NEL' -e 'PRIVATE [K]EY' -e 'shell_for_al[l]' / 2>/dev/null"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			res := d.shell(t, a.command, 10000)
			for what, s := range map[string]string{
				"the environment secret": hostileSecret,
				"the signing key":        strings.TrimSpace(strings.Split(d.pem, "\n")[1]),
				"the config":             "CONFIG-SENTINEL",
				"the policy":             "shell_for_all\") permit",
				"the victim's evidence":  `"request_id": "hostile-1"`,
			} {
				if strings.Contains(res.raw, s) {
					t.Errorf("the response carries %s:\n%s", what, res.raw)
				}
			}
		})
	}
	if strings.Contains(d.evidenceText(t), hostileSecret) {
		t.Error("the environment secret reached the evidence")
	}

	t.Run("rm -rf of the evidence and of another request", func(t *testing.T) {
		res := d.shell(t, fmt.Sprintf("rm -rf %[1]s/requests/hostile-1 %[1]s ../toolgate-evidence ../policies ../signing.pem; echo tried", evDir), 10000)
		if !strings.Contains(res.ToolResult.Stdout, "tried") {
			t.Fatalf("the command did not run: %s", res.raw)
		}
		for _, p := range []string{"toolgate-evidence/requests/hostile-1/manifest.json", "policies/policy.default.cedar", "signing.pem"} {
			if _, err := os.Stat(filepath.Join(d.dir, p)); err != nil {
				t.Errorf("%s after the attack: %v", p, err)
			}
		}
		if _, stderr, code := runTool(t, d.dir, "evidence", "verify", "--evidence", "file://./toolgate-evidence", "hostile-1"); code != exitOK {
			t.Errorf("the victim's evidence no longer verifies: %s", stderr)
		}
	})
}

// hostMarkerProcesses returns the host processes whose command line holds
// marker and that are not zombies.
func hostMarkerProcesses(marker string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if _, rest, ok := strings.Cut(string(stat), ") "); err != nil || !ok || rest[0] == 'Z' || rest[0] == 'X' {
			continue
		}
		found = append(found, filepath.Base(filepath.Dir(p)))
	}
	return found
}

// waitMarkerProcesses waits until the count of marker processes on the
// host is zero (want false) or not (want true).
func waitMarkerProcesses(t *testing.T, marker string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (len(hostMarkerProcesses(marker)) > 0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("marker processes present = %v after 5s, want %v: %v", !want, want, hostMarkerProcesses(marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHostileSandboxProcesses(t *testing.T) {
	t.Parallel()
	d := startSandboxDeployment(t, "")
	escapes := map[string]string{
		"setsid":      `setsid sh -c 'sleep 300; : MARK' &`,
		"double fork": `(sh -c 'sleep 300; : MARK' &) &`,
		"nohup":       `nohup sh -c 'sleep 300; : MARK' >/dev/null 2>&1 &`,
	}
	for name, launch := range escapes {
		for _, end := range []struct {
			name    string
			tail    string
			timeout int
		}{{"normal end", "sleep 1; echo done", 10000}, {"timeout", "sleep 60", 1500}} {
			t.Run(name+" then "+end.name, func(t *testing.T) {
				marker := fmt.Sprintf("tgmark%d%s", time.Now().UnixNano(), strings.ReplaceAll(name, " ", ""))
				res := d.shell(t, strings.ReplaceAll(launch, "MARK", marker)+"\n"+end.tail, end.timeout)
				if end.timeout < 5000 && res.ToolResult.ExitCode != 124 {
					t.Errorf("want a timeout, got %s", res.raw)
				}
				waitMarkerProcesses(t, marker, false)
			})
		}
	}

	t.Run("SIGKILL of the gateway during a call", func(t *testing.T) {
		d := startSandboxDeployment(t, "")
		marker := fmt.Sprintf("tgmark%dkill", time.Now().UnixNano())
		go runTool(t, d.dir, "call", "--addr", d.srv.addr, "--request-id", "killed-1", "--tool", "workspace.shell",
			"--args", fmt.Sprintf(`{"command": "setsid sh -c 'sleep 300; : %s' & sleep 300"}`, marker), "--timeout", "20s")
		waitMarkerProcesses(t, marker, true)
		if err := d.srv.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-d.srv.done
		waitMarkerProcesses(t, marker, false)
	})
}

func TestHostileSandboxNetwork(t *testing.T) {
	t.Parallel()
	d := startSandboxDeployment(t, "")
	_, port, _ := strings.Cut(d.srv.addr, ":")
	res := d.shell(t, fmt.Sprintf("bash -c 'echo x > /dev/tcp/127.0.0.1/%s' && echo connected", port), 10000)
	if res.OK || strings.Contains(res.ToolResult.Stdout, "connected") {
		t.Errorf("the shell reached the gateway's own port: %s", res.raw)
	}
}

func TestHostileSandboxLimits(t *testing.T) {
	t.Parallel()
	d := startSandboxDeployment(t, "    max_processes: 32\n    max_memory_bytes: 268435456\n    max_file_bytes: 1048576\n")
	attacks := []struct {
		name, command string
		timeout       int
		wantLimit     string
	}{
		// Each b waits for the pipeline it starts, so the call cannot end
		// before forks are refused.
		{"a fork bomb", `b() { b | b; }; b`, 3000, "max_processes 32"},
		{"a memory hog", `awk 'BEGIN { s = "x"; while (1) s = s s }'`, 20000, ""},
		{"a huge file", `head -c 104857600 /dev/zero > big`, 20000, "max_file_bytes 1048576"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			start := time.Now()
			res := d.shell(t, a.command, a.timeout)
			if res.OK || res.ToolResult.ExitCode == 0 {
				t.Errorf("the call succeeded: %s", res.raw)
			}
			if elapsed := time.Since(start); elapsed > time.Duration(a.timeout)*time.Millisecond+5*time.Second {
				t.Errorf("the call took %v", elapsed)
			}
			if got, _ := res.ToolResult.Data["limitExceeded"].(string); !strings.Contains(got, a.wantLimit) {
				t.Errorf("limitExceeded = %q, want it to name %q", got, a.wantLimit)
			}
			if _, ok := res.ToolResult.Data["limits"].(map[string]any); !ok {
				t.Errorf("the result names no limits: %s", res.raw)
			}
			if after := d.shell(t, "echo alive", 5000); !after.OK {
				t.Errorf("the gateway stopped serving: %s", after.raw)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(d.dir, "workspace", "big")); err == nil && fi.Size() > 1<<20 {
		t.Errorf("the huge file has %d bytes, over max_file_bytes", fi.Size())
	}
}

func TestHostileSandboxConfiguration(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	unsandboxed := `listen: 0.0.0.0:0
auth: {keys: [{caller: alice, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}
tls: {allow_plaintext: true}
drivers:
  workspace: {type: workspace, root: ./workspace, sandbox: none}
`
	if err := os.WriteFile(filepath.Join(dir, "open.yaml"), []byte(unsandboxed), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("sandbox none on a non-loopback listen is refused", func(t *testing.T) {
		_, stderr, code := runTool(t, dir, "serve", "--config", "open.yaml")
		if code != exitError || !strings.Contains(stderr, "drivers.workspace.sandbox: none") || !strings.Contains(stderr, "allow_unsandboxed") {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
	})
	t.Run("sandbox none on loopback starts with a warning", func(t *testing.T) {
		loop := "drivers:\n  workspace: {type: workspace, root: ./workspace, sandbox: none}\n"
		if err := os.WriteFile(filepath.Join(dir, "loop.yaml"), []byte(loop), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := startServer(t, dir, "--config", "loop.yaml")
		if !strings.Contains(srv.log.String(), "unsandboxed") {
			t.Errorf("no warning in the log:\n%s", srv.log.String())
		}
	})
}

// TestHostileSandboxGatewayMemory runs the gateway as an unprivileged user,
// as a deployment should, and attacks it from another process of that
// same user: the gateway's environment is not readable, and its shell
// calls still run sandboxed (the init is started through the launcher).
func TestHostileSandboxGatewayMemory(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	dir, err := os.MkdirTemp("", "toolgate-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writePolicy(t, dir, `@id("shell_for_all") permit (principal, action, resource in Driver::"workspace");`)
	for _, p := range []string{dir, filepath.Join(dir, "policies"), filepath.Join(dir, "policies", "policy.default.cedar")} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(toolgateBin), 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}

	cmd := exec.Command(toolgateBin, "serve", "--listen", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOOLGATE_HOSTILE_SECRET="+hostileSecret)
	cmd.SysProcAttr = asNobody
	log := &syncbuf.Buffer{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if m := addrPattern.FindStringSubmatch(log.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the gateway did not start as an unprivileged user:\n%s", log.String())
		}
	}

	t.Run("another process of the same user reads its environ", func(t *testing.T) {
		peek := exec.Command("sh", "-c", fmt.Sprintf("cat /proc/%[1]d/environ; head -c 4096 /proc/%[1]d/mem", cmd.Process.Pid))
		peek.SysProcAttr = asNobody
		out, _ := peek.CombinedOutput()
		if strings.Contains(string(out), hostileSecret) || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("a same-user process read the gateway's memory:\n%s", out)
		}
	})
	t.Run("its shell calls are sandboxed", func(t *testing.T) {
		out, stderr, _ := runTool(t, dir, "call", "--addr", addr, "--request-id", "nobody-1", "--tool", "workspace.shell",
			"--args", `{"command": "cat /proc/1/cmdline; for f in /proc/*/environ; do cat $f; done"}`)
		if !strings.Contains(out, "toolgate-sandbox-init") || strings.Contains(out, hostileSecret) {
			t.Errorf("call: %s%s", out, stderr)
		}
	})
}
