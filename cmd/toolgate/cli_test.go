package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// runInProcess runs the command line args in this process with buffers
// for its streams and env for its environment, and fails the test if the
// command touched the process's own standard streams: every command must
// read and write through the stdio it is given. The process's stdin is a
// file a command would read "os.Stdin was read" from. It swaps the
// process's os.Stdin, os.Stdout and os.Stderr, so the tests that call it
// do not run in parallel.
func runInProcess(t *testing.T, stdin string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	procIn := filepath.Join(dir, "stdin")
	if err := os.WriteFile(procIn, []byte("os.Stdin was read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(procIn)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()

	saved := [3]*os.File{os.Stdin, os.Stdout, os.Stderr}
	os.Stdin, os.Stdout, os.Stderr = in, out, errf
	var outb, errb bytes.Buffer
	code = run(context.Background(), args, stdio{
		In: strings.NewReader(stdin), Out: &outb, Err: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	os.Stdin, os.Stdout, os.Stderr = saved[0], saved[1], saved[2]

	if n, _ := in.Seek(0, io.SeekCurrent); n != 0 {
		t.Errorf("%q read the process's standard input (%d bytes) instead of the stdio it was given", args, n)
	}
	for _, f := range []*os.File{out, errf} {
		if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
			written, _ := os.ReadFile(f.Name())
			t.Errorf("%q wrote to the process's %s instead of the stdio it was given: %q", args, filepath.Base(f.Name()), written)
		}
	}
	return outb.String(), errb.String(), code
}

// leafCommand is a command that takes flags, with the line its usage
// starts with.
type leafCommand struct {
	args  []string
	usage string
}

// leafCommands is every command that takes flags but serve, which is run
// as a process (TestServeAnswersHelpAndBadFlagsAsEveryCommand).
func leafCommands() []leafCommand {
	return []leafCommand{
		{[]string{"call"}, "usage: toolgate call --request-id ID --tool TOOL [flags]"},
		{[]string{"tools"}, "usage: toolgate tools [flags] [QUERY]"},
		{[]string{"approvals", "ls"}, "usage: toolgate approvals ls"},
		{[]string{"approvals", "show"}, "usage: toolgate approvals show ID"},
		{[]string{"approvals", "approve"}, "usage: toolgate approvals approve ID --reason TEXT"},
		{[]string{"approvals", "deny"}, "usage: toolgate approvals deny ID --reason TEXT"},
		{[]string{"policy", "validate"}, "usage: toolgate policy validate DIR"},
		{[]string{"policy", "check"}, "usage: toolgate policy validate DIR"},
		{[]string{"policy", "authorize"}, "usage: toolgate policy authorize --caller C --tool T [flags]"},
		{[]string{"policy", "test"}, "usage: toolgate policy test DIR"},
		{[]string{"policy", "schema"}, "usage: toolgate policy schema"},
		{[]string{"check", "config"}, "usage: toolgate check config FILE..."},
		{[]string{"evidence", "ls"}, "usage: toolgate evidence ls"},
		{[]string{"evidence", "show"}, "usage: toolgate evidence show"},
		{[]string{"evidence", "verify"}, "usage: toolgate evidence verify [flags] (REQUEST_ID | --all)"},
		{[]string{"evidence", "prove"}, "usage: toolgate evidence prove"},
		{[]string{"evidence", "verify-proof"}, "usage: toolgate evidence verify-proof FILE --pubkey KEY"},
		{[]string{"evidence", "cosign"}, "usage: toolgate evidence cosign --witness-url URL..."},
		{[]string{"evidence", "vkey"}, "usage: toolgate evidence vkey --pubkey FILE"},
		{[]string{"evidence", "pubkey"}, "usage: toolgate evidence pubkey [--config FILE | --key FILE | --key-env VAR]"},
		{[]string{"evidence", "keygen"}, "usage: toolgate evidence keygen --out FILE"},
		{[]string{"redact"}, "usage: toolgate redact [flags] [FILE]"},
		{[]string{"bench"}, "usage: toolgate bench [--evidence URL]"},
		{[]string{"version"}, "usage: toolgate version"},
	}
}

func TestEveryCommandAnswersHelpWithItsUsageAndExitZero(t *testing.T) {
	for _, c := range leafCommands() {
		for _, help := range []string{"-h", "--help"} {
			t.Run(strings.Join(c.args, " ")+" "+help, func(t *testing.T) {
				out, stderr, code := runInProcess(t, "", nil, append(c.args, help)...)
				if code != exitOK {
					t.Errorf("exit %d, want 0: help is not an error", code)
				}
				if !strings.HasPrefix(stderr, c.usage) {
					t.Errorf("stderr does not start with the usage %q:\n%s", c.usage, stderr)
				}
				if out != "" {
					t.Errorf("help printed to stdout: %q", out)
				}
			})
		}
	}
}

func TestEveryCommandRefusesAnUnknownFlagWithItsUsageAndExitTwo(t *testing.T) {
	for _, c := range leafCommands() {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, stderr, code := runInProcess(t, "", nil, append(c.args, "--no-such-flag")...)
			if code != exitError {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr, "flag provided but not defined: -no-such-flag\n"+c.usage) {
				t.Errorf("stderr does not name the flag, then show the usage %q:\n%s", c.usage, stderr)
			}
			if out != "" {
				t.Errorf("a usage error printed to stdout: %q", out)
			}
		})
	}
}

func TestACommandThatTakesNoArgumentsRefusesOneWithItsUsage(t *testing.T) {
	for _, args := range [][]string{{"version", "extra"}, {"policy", "schema", "extra"}, {"policy", "validate", "a", "b"}, {"check", "config"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, stderr, code := runInProcess(t, "", nil, args...)
			if code != exitError || !strings.HasPrefix(stderr, "usage: toolgate "+args[0]) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and the usage on stderr only", code, out, stderr)
			}
		})
	}
}

// TestEveryGroupAnswersTheSameWay: a command made of subcommands shows
// its list of subcommands on stderr with exit 2 when none or an unknown
// one is given, and on stdout with exit 0 when help is asked for.
func TestEveryGroupAnswersTheSameWay(t *testing.T) {
	groups := []struct {
		name  []string
		usage string
	}{
		{nil, "toolgate is a policy-gated evidence gateway"},
		{[]string{"policy"}, "toolgate policy validate DIR"},
		{[]string{"approvals"}, "toolgate approvals approve ID --reason TEXT"},
		{[]string{"evidence"}, "Usage: toolgate evidence <command>"},
		{[]string{"check"}, "toolgate check config FILE..."},
	}
	for _, g := range groups {
		name := strings.Join(append([]string{"toolgate"}, g.name...), " ")
		t.Run(name+" without a command is a usage error", func(t *testing.T) {
			out, stderr, code := runInProcess(t, "", nil, g.name...)
			if code != exitError || !strings.Contains(stderr, g.usage) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and the usage on stderr", code, out, stderr)
			}
		})
		t.Run(name+" with an unknown command is a usage error", func(t *testing.T) {
			out, stderr, code := runInProcess(t, "", nil, append(g.name, "frob")...)
			if code != exitError || !strings.HasPrefix(stderr, name+`: unknown command "frob"`) || !strings.Contains(stderr, g.usage) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 2, the command named and the usage on stderr", code, out, stderr)
			}
		})
		for _, help := range []string{"-h", "--help", "help"} {
			t.Run(name+" "+help+" prints the usage asked for", func(t *testing.T) {
				out, stderr, code := runInProcess(t, "", nil, append(g.name, help)...)
				if code != exitOK || !strings.Contains(out, g.usage) || stderr != "" {
					t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant exit 0 and the usage on stdout", code, stderr, out)
				}
			})
		}
	}
}

// TestServeAnswersHelpAndBadFlagsAsEveryCommand runs serve as a process:
// in-process it would make the test process non-dumpable first.
func TestServeAnswersHelpAndBadFlagsAsEveryCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, stderr, code := runTool(t, dir, "serve", "-h")
	if code != exitOK || !strings.Contains(stderr, "toolgate serve") || !strings.Contains(stderr, "-config") || out != "" {
		t.Errorf("serve -h: exit %d, stdout %q, stderr:\n%s\nwant exit 0 and the flags on stderr", code, out, stderr)
	}
	out, stderr, code = runTool(t, dir, "serve", "--no-such-flag")
	if code != exitError || !strings.Contains(stderr, "flag provided but not defined: -no-such-flag") || !strings.Contains(stderr, "-config") || out != "" {
		t.Errorf("serve --no-such-flag: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and the flags on stderr", code, out, stderr)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("serve -h or a bad flag created files: %v %v", entries, err)
	}
}

// TestRedactReadsTheStandardInputItIsGiven: redact without a FILE
// redacts stdio.In, not the process's standard input.
func TestRedactReadsTheStandardInputItIsGiven(t *testing.T) {
	token := "ghp_" + "R7kQ2mX9vL4pT8wZ1nB6cY3dF5gH0jK2sA4e"
	out, stderr, code := runInProcess(t, "cloning with "+token+"\n", nil, "redact")
	if code != exitFailure || out != "cloning with [REDACTED:github-pat]\n" || !strings.Contains(stderr, `"github-pat"`) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and the token redacted", code, out, stderr)
	}
	out, _, code = runInProcess(t, `{"password": "hunter2-Kx"}`, nil, "redact", "--json")
	if code != exitFailure || out != `{"password": "[REDACTED:secret-key-name]"}` {
		t.Errorf("--json: exit %d, stdout %q; want exit 1 and the password redacted", code, out)
	}
}

// toolsFake is a gateway that answers ListTools with one tool.
type toolsFake struct {
	toolgatev1.UnimplementedToolGatewayServer
}

func (toolsFake) ListTools(context.Context, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return &toolgatev1.ListToolsResponse{Tools: []*toolgatev1.ToolInfo{{ToolId: "workspace.readFile", Driver: "workspace", Description: "reads a file"}}}, nil
}

// TestEveryCommandFamilyRunsInProcess runs one ordinary command of each
// family in this process, through stdio alone.
func TestEveryCommandFamilyRunsInProcess(t *testing.T) {
	_, addr := newFake(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	toolgatev1.RegisterToolGatewayServer(srv, toolsFake{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	toolsAddr := lis.Addr().String()
	dir := t.TempDir()
	key := filepath.Join(dir, "signing.key")
	store := filepath.Join(dir, "evidence")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // on stdout
	}{
		{"version", nil, []string{"version"}, exitOK, versionString() + "\n"},
		{"policy validate", nil, []string{"policy", "validate", "../../policies"}, exitOK, "ok: 1 policy set(s)"},
		{"policy test", nil, []string{"policy", "test", "../../policies"}, exitOK, " passed, 0 failed\n"},
		{"policy authorize", nil, []string{"policy", "authorize", "--policies", "../../policies", "--caller", "a", "--tool", "workspace.readFile", "--args", `{"path": "x"}`}, exitOK, "decision:   allow"},
		{"policy schema", nil, []string{"policy", "schema"}, exitOK, "entity Tool"},
		{"evidence keygen", nil, []string{"evidence", "keygen", "--out", key}, exitOK, "-----BEGIN PUBLIC KEY-----"},
		{"evidence pubkey", nil, []string{"evidence", "pubkey", "--key", key}, exitOK, "-----BEGIN PUBLIC KEY-----"},
		{"evidence ls of an empty store", nil, []string{"evidence", "ls", "--evidence", "file://" + store}, exitOK, "received_at\trequest_id"},
		{"evidence verify of an empty store", nil, []string{"evidence", "verify", "--all", "--evidence", "file://" + store}, exitOK, "verified 0 requests"},
		{"tools", map[string]string{"KEY": "k"}, []string{"tools", "--addr", toolsAddr, "--key-env", "KEY"}, exitOK, "workspace.readFile\tworkspace\t-\treads a file\n"},
		{"approvals ls", nil, []string{"approvals", "ls", "--addr", addr}, exitOK, aprOne},
		{"call of an unreachable gateway", nil, []string{"call", "--addr", "127.0.0.1:1", "--timeout", "2s", "--request-id", "r", "--tool", "t"}, exitError, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runInProcess(t, "", c.env, c.args...)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, want %d; stdout lacks %q?\n%s%s", code, c.code, c.want, out, stderr)
			}
		})
	}
}
