package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// checkRun is one `toolgate check config` run of the real binary.
type checkRun struct {
	stdout, stderr string
	code           int
	maxRSSKiB      int64
}

// checkBin runs `toolgate check config ARGS...` in dir, failing the test
// if it has not finished within 30 s: a check that blocks or reads for
// ever is what these attacks try to cause.
func checkBin(t *testing.T, dir string, args ...string) checkRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolgateBin, append([]string{"check", "config"}, args...)...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("check config %v did not finish in 30s:\n%s", args, errb.String())
	}
	r := checkRun{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSSKiB = ru.Maxrss
	}
	return r
}

// wantCheckFailure fails the test unless r is a check that found problems
// and printed want among them.
func wantCheckFailure(t *testing.T, r checkRun, want string) {
	t.Helper()
	if r.code != exitFailure {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitFailure, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
	}
}

// checkDir is a folder with a valid policy set and the configuration cfg.
func checkDir(t *testing.T, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"policies/policy.default.cedar": checkPolicy, "cfg.yaml": cfg})
	return dir
}

// TestHostileCheckConfigSize: whatever FILE names, check and serve read at
// most 4 MiB of it (gateway.MaxConfigBytes), so a huge or endless file is
// refused instead of exhausting memory; before, both read it whole.
//
// It is not parallel: os/exec starts a child with vfork, so the child's
// maximum RSS starts at this test process's peak, which tests running
// beside it would raise past the bound.
func TestHostileCheckConfigSize(t *testing.T) {
	t.Run("a 100 MB configuration is refused after 4 MiB", func(t *testing.T) {
		dir := t.TempDir()
		f, err := os.Create(filepath.Join(dir, "cfg.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("listen: 127.0.0.1:1\n#"); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(100 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:1: larger than 4194304 bytes, too large to be a configuration file")
		if r.maxRSSKiB > 512<<10 {
			t.Errorf("the check used %d MiB", r.maxRSSKiB>>10)
		}
	})
	t.Run("/dev/zero is refused, not read for ever", func(t *testing.T) {
		r := checkBin(t, t.TempDir(), "/dev/zero")
		wantCheckFailure(t, r, "/dev/zero:1: larger than 4194304 bytes")
	})
	t.Run("serve refuses /dev/zero as its configuration instead of reading it for ever", func(t *testing.T) {
		stderr := serveMustRefuse(t, t.TempDir(), "--config", "/dev/zero")
		if !strings.Contains(stderr, "config: /dev/zero: larger than 4194304 bytes") {
			t.Errorf("stderr: %s", stderr)
		}
	})
	t.Run("an endless stream through a named pipe is refused", func(t *testing.T) {
		dir := t.TempDir()
		fifo := filepath.Join(dir, "cfg.yaml")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer w.Close()
			line := []byte(strings.Repeat("# endless\n", 1000))
			for {
				if _, err := w.Write(line); err != nil {
					return // the reader has gone
				}
			}
		}()
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "larger than 4194304 bytes")
		<-done
	})
}

// aliasBomb is a "billion laughs" YAML value, indented by indent: ten
// levels of nine aliases, 9^10 strings if expanded.
func aliasBomb(indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sa0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n", indent)
	for i := 1; i <= 10; i++ {
		refs := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 9), ", ")
		fmt.Fprintf(&b, "%sa%d: &a%d [%s]\n", indent, i, i, refs)
	}
	return b.String()
}

// TestHostileCheckConfigAliasBombs: an alias bomb anywhere in the file, in
// a part decoded with the file or a section a driver or a door decodes
// later, is refused or reported in bounded time and memory. Not parallel,
// for the reason TestHostileCheckConfigSize gives.
func TestHostileCheckConfigAliasBombs(t *testing.T) {
	cases := []struct {
		name, cfg, want string
	}{
		{"a bomb in a tool's input schema is refused as excessive aliasing",
			"tools:\n  x.y:\n    driver: workspace\n    input_schema:\n" + aliasBomb("      "),
			"cfg.yaml:1: yaml: document contains excessive aliasing"},
		{"a bomb in a driver's section is reported, not expanded",
			"drivers:\n  w:\n    type: workspace\n    root: ./w\n    bomb:\n" + aliasBomb("      "),
			"cfg.yaml:5: field bomb not found in type workspace.DriverConfig"},
		{"a bomb in a front door's section is reported, not expanded",
			"front_doors:\n  mcp:\n    listen: 127.0.0.1:8788\n    bomb:\n" + aliasBomb("      "),
			"cfg.yaml:4: front_doors.mcp: field bomb not found in type mcpdoor.Config"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := checkBin(t, checkDir(t, c.cfg), "cfg.yaml")
			wantCheckFailure(t, r, c.want)
			if r.maxRSSKiB > 512<<10 {
				t.Errorf("the check used %d MiB", r.maxRSSKiB>>10)
			}
		})
	}
}

// TestHostileCheckConfigPaths: files and folders the configuration names
// that would block, loop or mislead the check.
func TestHostileCheckConfigPaths(t *testing.T) {
	t.Parallel()
	t.Run("a folder given as FILE is a problem at line 1", func(t *testing.T) {
		dir := t.TempDir()
		r := checkBin(t, dir, dir)
		wantCheckFailure(t, r, dir+":1: read "+dir+": is a directory")
	})
	t.Run("a policy folder linked from elsewhere is read through the link, as serve reads it", func(t *testing.T) {
		outside := t.TempDir()
		writeFiles(t, outside, map[string]string{"policy.a.cedar": checkPolicy, "policy.b.cedar": checkPolicy})
		dir := checkDir(t, "policies: {dir: ./linked}\n")
		if err := os.Symlink(outside, filepath.Join(dir, "linked")); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		if r.code != exitOK || !strings.Contains(r.stdout, "2 policy set(s) in ./linked") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("a policy file linked to a named pipe is refused without blocking", func(t *testing.T) {
		dir := checkDir(t, "policies: {dir: ./policies}\n")
		fifo := filepath.Join(dir, "pipe")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fifo, filepath.Join(dir, "policies", "policy.pipe.cedar")); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:1: policies.dir: policies/policy.pipe.cedar is a named pipe, not a policy file")
	})
	t.Run("a policy schema linked to /dev/zero is refused without reading it", func(t *testing.T) {
		dir := checkDir(t, "policies:\n  dir: ./policies\n")
		if err := os.Symlink("/dev/zero", filepath.Join(dir, "policies", "toolgate.cedarschema")); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:2: policies.dir: policies/toolgate.cedarschema is a device, not a policy file")
	})
	t.Run("folders nested deep in the policy folder are skipped, as serve skips them", func(t *testing.T) {
		dir := checkDir(t, "policies: {dir: ./policies}\n")
		deep := filepath.Join(dir, "policies")
		for range 100 {
			deep = filepath.Join(deep, "x.cedar")
		}
		if err := os.MkdirAll(deep, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..", filepath.Join(dir, "policies", "loop.cedar")); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		if r.code != exitOK || !strings.Contains(r.stdout, "1 policy set(s)") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("a gateway-owned key that is a symbolic link is refused, as serve refuses it", func(t *testing.T) {
		dir := checkDir(t, "evidence:\n  signing_key: {file: ./k.key, create: true}\n")
		writeFiles(t, dir, map[string]string{"real.key": newKeyPEM(t)})
		if err := os.Symlink("real.key", filepath.Join(dir, "k.key")); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:2: evidence.signing_key: ./k.key is a symbolic link")
	})
	t.Run("a key file that is a named pipe is refused without blocking", func(t *testing.T) {
		dir := checkDir(t, "evidence:\n  signing_key: {file: ./k.key}\n")
		if err := syscall.Mkfifo(filepath.Join(dir, "k.key"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:2: evidence.signing_key: ./k.key is a named pipe, not a key file")
	})
	t.Run("a redaction rules file that is /dev/zero is refused without reading it", func(t *testing.T) {
		r := checkBin(t, checkDir(t, "redact:\n  rules_file: /dev/zero\n"), "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:2: redact.rules_file: /dev/zero is a device, not a rules file\n")
	})
	t.Run("a fingerprint key that is a named pipe and a webhook secret that is /dev/zero are refused without reading them", func(t *testing.T) {
		dir := checkDir(t, "redact:\n  fingerprint_key: {file: ./fp.key}\napprovals:\n  webhook:\n"+
			"    url: http://127.0.0.1:9/hook\n    secret: {file: /dev/zero}\n")
		if err := syscall.Mkfifo(filepath.Join(dir, "fp.key"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := checkBin(t, dir, "cfg.yaml")
		wantCheckFailure(t, r, "cfg.yaml:2: redact.fingerprint_key: ./fp.key is a named pipe, not a key file\n"+
			"cfg.yaml:6: approvals.webhook.secret: /dev/zero is a device, not a key file\n")
	})
}

// TestHostileCheckConfigEncoding: bytes that are not YAML text are a
// problem at a line, never a crash.
func TestHostileCheckConfigEncoding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cfg, want string
	}{
		{"a file that is not UTF-8 is refused", "listen: \"\xff\xfe\"\n", "cfg.yaml:1: yaml: invalid leading UTF-8 octet"},
		{"a NUL byte is refused", "listen: 127.0.0.1:1\x00\n", "cfg.yaml:1: yaml: control characters are not allowed"},
		{"a key path of odd characters falls back to a line", "tools:\n  \"a\\u00e9.\\u2028\": {driver: workspace, target: readFile}\n",
			"cfg.yaml:2: tools.aé.\u2028: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := checkBin(t, checkDir(t, c.cfg), "cfg.yaml")
			wantCheckFailure(t, r, c.want)
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine") {
				t.Errorf("the check crashed:\n%s", r.stderr)
			}
		})
	}
}

// TestHostileCheckConfigStartsNothing: a configuration whose listeners,
// store, drivers and identity provider are all one address the test holds
// checks fine, and nothing connects to that address, nothing listens on
// it, and no file appears.
func TestHostileCheckConfigStartsNothing(t *testing.T) {
	t.Parallel()
	lis := listenCounting(t)
	addr := lis.Addr().String()
	cfg := fmt.Sprintf(`listen: %[1]s
evidence:
  url: s3://bucket/prefix?endpoint=http://%[1]s&region=us-east-1&path_style=true
  spool_dir: ./spool
drivers:
  workspace: {type: workspace, root: ./ws}
  tpmjs: {type: tpmjs, url: http://%[1]s, trace_dir: ./traces}
  sandbox: {type: execbox, url: ws://%[1]s/run}
front_doors:
  mcp:
    listen: 127.0.0.1:0
    oauth:
      resource: http://127.0.0.1/mcp
      issuer: https://%[1]s
      jwks_url: https://%[1]s/jwks.json
`, addr)
	dir := checkDir(t, cfg)
	before := listFiles(t, dir)
	r := checkBin(t, dir, "cfg.yaml")
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := lis.accepted.Load(); n != 0 {
		t.Errorf("the check connected to the store, a driver or the identity provider %d time(s)", n)
	}
	if after := listFiles(t, dir); after != before {
		t.Errorf("the check changed the folder:\nbefore: %s\nafter:  %s", before, after)
	}
}

// listFiles lists every path under dir.
func listFiles(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		names = append(names, strings.TrimPrefix(path, dir))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}
