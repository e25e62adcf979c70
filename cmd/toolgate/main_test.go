package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/syncbuf"
)

// toolgateBin is the binary under test, built once by TestMain.
var toolgateBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolgate-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	toolgateBin = filepath.Join(dir, "toolgate")
	// A race-enabled binary sleeps a second before every exit; the tests
	// run it hundreds of times.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	build := exec.Command("go", "build", "-race", "-o", toolgateBin, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building toolgate:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a `toolgate serve` process.
type server struct {
	cmd  *exec.Cmd
	addr string
	// doors holds each front door's listening address by door name, as
	// the server logged it before it logged addr.
	doors map[string]string
	dir   string
	log   *syncbuf.Buffer
	done  chan error
}

var (
	addrPattern     = regexp.MustCompile(`msg="toolgate serving" addr=(\S+)`)
	doorAddrPattern = regexp.MustCompile(`msg="front door serving" door=(\S+) addr=(\S+)`)
)

// doorURL is the base URL of the front door named door. Doors in the
// tests listen on port 0, so nothing else can take their port between a
// test choosing it and the server binding it.
func (s *server) doorURL(t *testing.T, door string) string {
	t.Helper()
	addr, ok := s.doors[door]
	if !ok {
		t.Fatalf("the %s door's address is not in the log:\n%s", door, s.log.String())
	}
	return "http://" + addr
}

// startServer runs `toolgate serve ARGS...` in dir and waits until it
// listens. It always adds --listen 127.0.0.1:0 so tests can run in parallel.
func startServer(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	return startServerEnv(t, dir, nil, args...)
}

// startServerEnv is startServer with extra environment variables.
func startServerEnv(t *testing.T, dir string, env []string, args ...string) *server {
	t.Helper()
	s, err := launchServer(t, dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// launchServer starts `toolgate serve` as startServerEnv does, and
// returns an error carrying its log when it exits, or does not listen,
// within 30s.
func launchServer(t *testing.T, dir string, env []string, args ...string) (*server, error) {
	t.Helper()
	return launchWrapped(t, dir, env, nil, args...)
}

// launchWrapped is launchServer running the binary through wrap (a
// command and its arguments, the binary's path and its arguments
// appended), as a shell that sets a resource limit first.
func launchWrapped(t *testing.T, dir string, env, wrap []string, args ...string) (*server, error) {
	t.Helper()
	// The admin listener takes a free port too: a fixed one would clash
	// between servers. A test's own --admin-listen comes later and wins.
	argv := append([]string{toolgateBin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)
	argv = append(append([]string(nil), wrap...), argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, dir: dir, doors: map[string]string{}, log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	addrCh := make(chan string, 1)
	go func() {
		serving := false
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.log.Write([]byte(line + "\n"))
			// The doors are logged before the gRPC address; the test
			// reads s.doors only after addrCh hands it that, and the map
			// is not written again.
			if m := doorAddrPattern.FindStringSubmatch(line); m != nil && !serving {
				s.doors[m[1]] = m[2]
			}
			if m := addrPattern.FindStringSubmatch(line); m != nil && !serving {
				serving = true
				addrCh <- m[1]
			}
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	select {
	case s.addr = <-addrCh:
		return s, nil
	case err := <-s.done:
		return nil, fmt.Errorf("toolgate serve exited early (%v):\n%s", err, s.log.String())
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("toolgate serve did not start:\n%s", s.log.String())
	}
}

// startNamingItsAddr starts `toolgate serve --config toolgate.yaml` in dir
// when the configuration must name a listening address before the server
// binds it (an OAuth resource URL, an OIDC redirect URL): configure writes
// the configuration for addr. Another process can take the port between
// its choice and the bind, so a start refused with "address already in
// use" is tried again on another port.
func startNamingItsAddr(t *testing.T, dir string, env []string, configure func(addr string)) (*server, string) {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		configure(addr)
		s, err := launchServer(t, dir, env, "--config", "toolgate.yaml")
		if err == nil {
			return s, addr
		}
		if attempt == attempts || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("%s was taken before the server bound it; trying another port", addr)
	}
}

// runTool runs the toolgate binary to completion and returns its outputs
// and exit code.
func runTool(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runToolEnv(t, dir, nil, args...)
}

// runToolEnv is runTool with extra environment variables.
func runToolEnv(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(toolgateBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// tourDir is a fresh folder holding a copy of the shipped policies, as a
// user who cloned the repository has.
func tourDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "policies"), os.DirFS("../../policies")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writePolicy(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeTour follows the README's tour on the embedded default
// configuration: a denied shell call, an allowed read, the evidence files.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	srv := startServer(t, dir)

	out, _, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "tour-1",
		"--tool", "workspace.shell", "--args", `{"command": "touch pwned"}`)
	if code != exitFailure || !strings.Contains(out, `"decision": "deny"`) || !strings.Contains(out, `"rule_id": "default_deny"`) {
		t.Fatalf("denied call: exit %d, output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "workspace", "pwned")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the denied shell command ran")
	}

	if err := os.WriteFile(filepath.Join(dir, "workspace", "notes.txt"), []byte("hello from the workspace\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code = runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "tour-2",
		"--tool", "workspace.readFile", "--args", `{"path": "notes.txt"}`)
	if code != exitOK {
		t.Fatalf("allowed call: exit %d, output:\n%s", code, out)
	}
	var resp struct {
		OK         bool `json:"ok"`
		ToolResult struct {
			Stdout string `json:"stdout"`
		} `json:"tool_result"`
		EvidenceRefs []string `json:"evidence_refs"`
		EngineRef    string   `json:"engine_ref"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("call output is not JSON: %v\n%s", err, out)
	}
	if !resp.OK || resp.ToolResult.Stdout != "hello from the workspace\n" || !strings.HasPrefix(resp.EngineRef, "toolgate/0.1.0@") {
		t.Fatalf("allowed call answered %+v", resp)
	}
	for _, ref := range resp.EvidenceRefs {
		if _, err := os.Stat(filepath.Join(dir, "toolgate-evidence", ref)); err != nil {
			t.Errorf("evidence ref %s: %v", ref, err)
		}
	}
	if len(resp.EvidenceRefs) != 6 {
		t.Errorf("evidence_refs = %v, want six artifacts (request, decision, dispatch marker, result, response, manifest)", resp.EvidenceRefs)
	}

	// The audit the tour ends with: signed by the key serve created, and
	// both requests in the log once its next checkpoint is out.
	pub, stderr, code := runTool(t, dir, "evidence", "pubkey")
	if code != exitOK {
		t.Fatalf("pubkey: %s", stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "toolgate.pub"), []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the tour's audit passes", func() error {
		out, _, code := runTool(t, dir, "evidence", "verify", "--all", "--pubkey", "toolgate.pub", "--require-signature", "--require-log")
		if want := "verified 2 requests: 2 ok\nlogs: 1 checked, 4 entries in all\n"; code != exitOK || out != want {
			return fmt.Errorf("exit %d:\n%s\nwant:\n%s", code, out, want)
		}
		return nil
	})
}

// TestGrpcurl calls the gateway the way an operator without our proto files
// would: grpcurl with server reflection. The test command installs grpcurl.
func TestGrpcurl(t *testing.T) {
	t.Parallel()
	grpcurl, err := exec.LookPath("grpcurl")
	if err != nil {
		t.Fatal("grpcurl is not on PATH: run the tests with `bash .ci/test.sh`, which installs the pinned version")
	}
	dir := tourDir(t)
	srv := startServer(t, dir)
	tests := []struct {
		name string
		args []string // the address goes between flags and the rest
		rest []string
		want string
	}{
		{"list services", nil, []string{"list"}, "toolgate.v1.ToolGateway"},
		{"describe", nil, []string{"describe", "toolgate.v1.ToolGateway.RunTool"}, "RunToolRequest"},
		{"health", nil, []string{"grpc.health.v1.Health/Check"}, `"status": "SERVING"`},
		{"run tool", []string{"-d", `{"request_id":"curl-1","tool_id":"workspace.shell","args":{"command":"id"}}`},
			[]string{"toolgate.v1.ToolGateway/RunTool"}, `"decision": "deny"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{"-plaintext"}, tc.args...), srv.addr), tc.rest...)
			out, err := exec.Command(grpcurl, args...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("grpcurl %v: %v\n%s", args, err, out)
			}
		})
	}
}

// TestGracefulShutdown sends SIGTERM while a call runs: the call finishes,
// its evidence is complete, and the server exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	srv := startServer(t, dir)

	type result struct {
		out  string
		code int
	}
	res := make(chan result, 1)
	go func() {
		out, _, code := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", "slow-1",
			"--tool", "workspace.shell", "--args", `{"command": "sleep 2; echo finished"}`)
		res <- result{out, code}
	}()
	waitForFile(t, filepath.Join(dir, "toolgate-evidence", "requests", "slow-1", "policy_decision.json"), "the call never started")
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.code != exitOK || !strings.Contains(r.out, "finished") {
		t.Fatalf("in-flight call: exit %d\n%s", r.code, r.out)
	}
	select {
	case err := <-srv.done:
		if err != nil {
			t.Fatalf("server exit: %v\n%s", err, srv.log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	if _, err := os.Stat(filepath.Join(dir, "toolgate-evidence", "requests", "slow-1", "manifest.json")); err != nil {
		t.Errorf("evidence incomplete after shutdown: %v", err)
	}
}

func TestServeRefusals(t *testing.T) {
	t.Parallel()
	broken := t.TempDir()
	writePolicy(t, broken, "permit (principal, action, resource);\n\n@id(\"x\")\npermit (principal action resource);\n")
	tests := []struct {
		name string
		dir  string
		args []string
		want string
	}{
		{"non-loopback without auth", tourDir(t), []string{"serve", "--listen", "0.0.0.0:0"}, "not a loopback address"},
		{"policy parse error", broken, []string{"serve", "--listen", "127.0.0.1:0"}, "policy.default.cedar:4"},
		{"unknown config key", tourDir(t), []string{"serve", "--config", "bad.yaml"}, "field listne not found"},
		{"unknown flag", tourDir(t), []string{"serve", "--nope"}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(tc.dir, "bad.yaml"), []byte("listne: 127.0.0.1:1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, code := runTool(t, tc.dir, tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d mentioning %q", code, stderr, exitError, tc.want)
			}
		})
	}
}

func TestServeWithConfigAndAuth(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	cfg := `
listen: 127.0.0.1:0
instance: gw-test
auth:
  keys:
    - caller: alice
      env: TOOLGATE_TEST_KEY
evidence:
  url: file://./audit
drivers:
  workspace:
    type: workspace
    root: ./ws
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"TOOLGATE_TEST_KEY=k-0123456789"}
	srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")

	_, stderr, code := runToolEnv(t, dir, env, "call", "--addr", srv.addr, "--request-id", "auth-1", "--tool", "workspace.readFile")
	if code != exitError || !strings.Contains(stderr, "Unauthenticated") {
		t.Fatalf("call without key: exit %d\n%s", code, stderr)
	}
	out, stderr, code := runToolEnv(t, dir, env, "call", "--addr", srv.addr, "--request-id", "auth-2",
		"--tool", "workspace.readFile", "--args", `{"path":"missing.txt"}`, "--key-env", "TOOLGATE_TEST_KEY")
	if code != exitFailure || !strings.Contains(out, `"engine_ref": "toolgate/0.1.0@gw-test/workspace"`) {
		t.Fatalf("call with key: exit %d\n%s%s", code, out, stderr)
	}
	req, err := os.ReadFile(filepath.Join(dir, "audit", "requests", "auth-2", "request.json"))
	if err != nil || !strings.Contains(string(req), `"caller": "alice"`) {
		t.Fatalf("request.json = %s (%v), want caller alice", req, err)
	}
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	broken := t.TempDir()
	writePolicy(t, broken, "@id(\"a\")\npermit (principal, action, resource)\nwhen { context.nope };\n")
	tests := []struct {
		name     string
		dir      string
		wantCode int
		want     string
	}{
		{"shipped policies", "../../policies", exitOK, "policy.default"},
		{"schema violation", filepath.Join(broken, "policies"), exitFailure, "policy.default.cedar:"},
		{"missing folder", filepath.Join(broken, "nope"), exitFailure, "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, ".", "policy", "check", tc.dir)
			if code != tc.wantCode || !strings.Contains(out+stderr, tc.want) {
				t.Fatalf("exit %d, output:\n%s%s\nwant exit %d mentioning %q", code, out, stderr, tc.wantCode, tc.want)
			}
		})
	}
}

func TestCallUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing request id", []string{"call", "--tool", "x"}, "--request-id and --tool are required"},
		{"args not an object", []string{"call", "--request-id", "a", "--tool", "x", "--args", "[1]"}, "--args"},
		{"unreachable gateway", []string{"call", "--addr", "127.0.0.1:1", "--request-id", "a", "--tool", "x", "--timeout", "2s"}, "Unavailable"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runTool(t, ".", tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 mentioning %q", code, stderr, tc.want)
			}
		})
	}
}

// TestToolsCommand lists what policy lets the caller run: on the shipped
// policies, only the read-only workspace tool.
func TestToolsCommand(t *testing.T) {
	t.Parallel()
	dir := tourDir(t)
	srv := startServer(t, dir)
	tests := []struct {
		name  string
		args  []string
		want  []string
		avoid []string
	}{
		{"everything allowed", nil, []string{"tool_id\tdriver", "workspace.readFile\tworkspace\tworkspace\tRead a file"}, []string{"workspace.shell", "workspace.createFile"}},
		{"query matching nothing allowed", []string{"shell"}, []string{"tool_id"}, []string{"workspace."}},
		{"unknown policy set", []string{"--policy-ref", "nope"}, []string{"tool_id"}, []string{"workspace."}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, append([]string{"tools", "--addr", srv.addr}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(out, a) {
					t.Errorf("output lists %q, which policy denies:\n%s", a, out)
				}
			}
		})
	}
}

// TestPolicyHotReload changes the policies of a running gateway: a valid
// change takes effect without a restart, an invalid one is rejected and
// the running policies stay, and SIGHUP reloads at once.
func TestPolicyHotReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`)
	cfg := "policies: {dir: ./policies, reload_interval: 50ms}\n"
	if err := os.WriteFile(filepath.Join(dir, "hot.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "--config", "hot.yaml")
	n := 0
	ruleOf := func() string {
		t.Helper()
		n++
		out, stderr, _ := runTool(t, dir, "call", "--addr", srv.addr, "--request-id", fmt.Sprintf("hot-%d", n),
			"--tool", "workspace.readFile", "--args", `{"path": "none.txt"}`)
		var resp struct {
			PolicyCheck struct {
				RuleID string `json:"rule_id"`
			} `json:"policy_check"`
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("call: %v\n%s%s", err, out, stderr)
		}
		return resp.PolicyCheck.RuleID
	}
	waitRule := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for ruleOf() != want {
			if time.Now().After(deadline) {
				t.Fatalf("rule %q never took effect\n%s", want, srv.log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := ruleOf(); got != "reads" {
		t.Fatalf("initial rule %q", got)
	}
	writePolicy(t, dir, `@id("no_reads") forbid (principal, action, resource);
permit (principal, action, resource);`)
	waitRule("no_reads")

	writePolicy(t, dir, "permit (principal, action resource);\n")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(srv.log.String(), "policy change rejected") {
		if time.Now().After(deadline) {
			t.Fatalf("the invalid change was not reported\n%s", srv.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := ruleOf(); got != "no_reads" {
		t.Fatalf("after an invalid change the running policies must stay; rule %q", got)
	}

	// With the checks off, only SIGHUP reloads.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	writePolicy(t, dir, `@id("reads") permit (principal, action, resource == Tool::"workspace.readFile");`)
	if err := os.WriteFile(filepath.Join(dir, "hup.yaml"), []byte("policies: {dir: ./policies, reload_interval: -1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, dir, "--config", "hup.yaml")
	writePolicy(t, dir, `@id("reads_again") permit (principal, action, resource == Tool::"workspace.readFile");`)
	time.Sleep(300 * time.Millisecond)
	if got := ruleOf(); got != "reads" {
		t.Fatalf("with reloads off the running policies must stay until SIGHUP; rule %q", got)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitRule("reads_again")
}

// waitForFile waits up to 20 s for path to exist, polling every 20 ms,
// and fails the test with why when it does not: a call's
// policy_decision.json says the call has started.
func waitForFile(t *testing.T, path, why string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}
