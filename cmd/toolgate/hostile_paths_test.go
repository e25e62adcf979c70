package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostilePathPolicy allows the workspace and forbids three files by path,
// in the patterns the README recommends, and the etc folder as a shell cwd.
const hostilePathPolicy = `
@id("allow_workspace") @reason("the workspace is open")
permit (principal, action, resource in Driver::"workspace");
@id("no_etc") @reason("etc is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path like "etc/*" };
@id("no_secret") @reason("the secret is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path == "conf/secret.txt" };
@id("no_menu") @reason("the menu is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path == "` + "caf\u00e9/menu.txt" + `" };
@id("no_etc_cwd") @reason("commands never start in etc")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has cwd && (context.args.cwd == "etc" || context.args.cwd like "etc/*") };
`

// hostileFiles are the files hostilePathPolicy protects.
var hostileFiles = map[string]string{
	"etc/passwd":         "root:x:0:0:ETC-SECRET\n",
	"conf/secret.txt":    "CONF-SECRET\n",
	"caf\u00e9/menu.txt": "MENU-SECRET\n",
}

// hostileCallOutcome is what one `toolgate call` came to.
type hostileCallOutcome struct {
	code           int
	stdout, stderr string
	resp           struct {
		OK          bool `json:"ok"`
		PolicyCheck struct {
			Decision string `json:"decision"`
			RuleID   string `json:"rule_id"`
		} `json:"policy_check"`
		ToolResult *struct {
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		} `json:"tool_result"`
	}
}

// hostileCall runs one call through the real binary.
func hostileCall(t *testing.T, srv *server, id, tool string, args map[string]any) hostileCallOutcome {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	var o hostileCallOutcome
	o.stdout, o.stderr, o.code = runTool(t, srv.dir, "call", "--addr", srv.addr, "--request-id", id, "--tool", tool, "--args", string(raw))
	if o.code != exitError {
		if err := json.Unmarshal([]byte(o.stdout), &o.resp); err != nil {
			t.Fatalf("call output is not JSON: %v\n%s", err, o.stdout)
		}
	}
	return o
}

// check asserts want: "deny <rule>", "invalid" (INVALID_ARGUMENT naming the
// argument) or "link" (the driver refused a path through a symbolic link),
// and that no protected content came back.
func (o hostileCallOutcome) check(t *testing.T, want string) {
	t.Helper()
	for _, content := range hostileFiles {
		if strings.Contains(o.stdout, strings.TrimSpace(content)) {
			t.Fatalf("protected content reached the caller:\n%s", o.stdout)
		}
	}
	switch {
	case want == "invalid":
		if o.code != exitError || !strings.Contains(o.stderr, "InvalidArgument") || !strings.Contains(o.stderr, "args.") {
			t.Fatalf("exit %d, stderr %q; want INVALID_ARGUMENT naming the argument", o.code, o.stderr)
		}
	case strings.HasPrefix(want, "deny "):
		pc := o.resp.PolicyCheck
		if o.code != exitFailure || pc.Decision != "deny" || pc.RuleID != strings.TrimPrefix(want, "deny ") || o.resp.ToolResult != nil {
			t.Fatalf("exit %d, output %s; want %s and no tool_result", o.code, o.stdout, want)
		}
	case want == "link":
		if o.code != exitFailure || o.resp.ToolResult == nil || !strings.Contains(o.resp.ToolResult.Stderr, "is a symbolic link") {
			t.Fatalf("exit %d, output %s; want the driver to refuse the link", o.code, o.stdout)
		}
	default:
		t.Fatalf("bad want %q", want)
	}
}

// startHostilePathServer serves hostilePathPolicy on the embedded default
// configuration, with the protected files and two in-workspace links
// (inside -> etc, cfg -> conf) planted.
func startHostilePathServer(t *testing.T) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, hostilePathPolicy)
	srv := startServer(t, dir)
	ws := filepath.Join(dir, "workspace")
	for p, content := range hostileFiles {
		full := filepath.Join(ws, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"inside": "etc", "cfg": "conf"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	return srv, ws
}

// checkHostileFilesUntouched fails unless every protected file holds its
// content and nothing was added beside it.
func checkHostileFilesUntouched(t *testing.T, ws string) {
	t.Helper()
	for p, content := range hostileFiles {
		full := filepath.Join(ws, filepath.FromSlash(p))
		got, err := os.ReadFile(full)
		if err != nil || string(got) != content {
			t.Errorf("%s = %q, %v; want it untouched", p, got, err)
		}
		if entries, _ := os.ReadDir(filepath.Dir(full)); len(entries) != 1 {
			t.Errorf("the folder of %s holds %d entries, want only the file", p, len(entries))
		}
	}
}

// TestHostilePaths: a path policy forbids is forbidden however the caller
// spells it. Each respelling (./, //, /./, NFD, an in-workspace link, a
// trailing /., '..', invisible characters) is denied by the rule that names
// the file, refused as INVALID_ARGUMENT, or refused by the driver for
// going through a link, for readFile, createFile, editFile and deleteFile;
// the shell's cwd is canonicalised the same way, so a command never starts
// in a folder policy forbids. The protected files are neither read nor
// changed.
func TestHostilePaths(t *testing.T) {
	t.Parallel()
	srv, ws := startHostilePathServer(t)
	edits := []any{map[string]any{"oldContent": "SECRET", "newContent": "pwned"}}
	ops := []struct {
		tool string
		args func(p string) map[string]any
	}{
		{"workspace.readFile", func(p string) map[string]any { return map[string]any{"path": p} }},
		{"workspace.createFile", func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned", "overwrite": true} }},
		{"workspace.editFile", func(p string) map[string]any { return map[string]any{"path": p, "edits": edits} }},
		{"workspace.deleteFile", func(p string) map[string]any { return map[string]any{"path": p} }},
	}
	for i, sp := range []struct{ name, path, want string }{
		{"a leading ./ is denied", "./etc/passwd", "deny no_etc"},
		{"a doubled slash is denied", "etc//passwd", "deny no_etc"},
		{"a ./ segment is denied", "etc/./passwd", "deny no_etc"},
		{"a doubled slash against an exact match is denied", "conf//secret.txt", "deny no_secret"},
		{"a ./ segment against an exact match is denied", "conf/./secret.txt", "deny no_secret"},
		{"a leading ./ against an exact match is denied", "./conf/secret.txt", "deny no_secret"},
		{"the NFD spelling of a non-ASCII name is denied", "cafe\u0301/menu.txt", "deny no_menu"},
		{"a path through an in-workspace symlink is refused", "inside/passwd", "link"},
		{"a path through a second symlink is refused", "cfg/secret.txt", "link"},
		{"a trailing /. is invalid", "etc/passwd/.", "invalid"},
		{"a '..' back into etc is invalid", "conf/../etc/passwd", "invalid"},
		{"a zero-width space is invalid", "conf/\u200bsecret.txt", "invalid"},
		{"a bidi override is invalid", "etc/\u202edwssap", "invalid"},
	} {
		t.Run(sp.name, func(t *testing.T) {
			for j, op := range ops {
				hostileCall(t, srv, fmt.Sprintf("path-%d-%d", i, j), op.tool, op.args(sp.path)).check(t, sp.want)
			}
		})
	}
	for i, sp := range []struct{ name, cwd, want string }{
		{"a leading ./ is denied", "./etc", "deny no_etc_cwd"},
		{"a trailing /. is denied", "etc/.", "deny no_etc_cwd"},
		{"doubled slashes are denied", ".//etc//", "deny no_etc_cwd"},
		{"an in-workspace symlink is refused", "inside", "link"},
		{"a '..' back into etc is invalid", "conf/../etc", "invalid"},
	} {
		t.Run("shell cwd: "+sp.name, func(t *testing.T) {
			hostileCall(t, srv, fmt.Sprintf("cwd-%d", i), "workspace.shell",
				map[string]any{"command": "cat passwd; echo ran > marker", "cwd": sp.cwd}).check(t, sp.want)
		})
	}
	if _, err := os.Stat(filepath.Join(ws, "etc", "marker")); err == nil {
		t.Error("a command ran in etc")
	}
	checkHostileFilesUntouched(t, ws)
}

// TestPolicyAuthorizeDecidesOnTheCanonicalPath: the dry run decides as the
// gateway would, so a policy author who tries a respelled path sees the
// deny the gateway would give, not an allow it never would.
func TestPolicyAuthorizeDecidesOnTheCanonicalPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, hostilePathPolicy)
	tests := []struct {
		name, args string
		code       int
		want       string
	}{
		{"a respelled path is denied by the rule naming the file", `{"path":"./etc//passwd"}`, exitFailure, "no_etc"},
		{"an NFD spelling is denied", `{"path":"cafe\u0301/menu.txt"}`, exitFailure, "no_menu"},
		{"a path with no canonical form is refused", `{"path":"conf/../etc/passwd"}`, exitError, "args.path: must not contain a '..'"},
		{"a canonical path that no rule forbids is allowed", `{"path":"notes.txt"}`, exitOK, "allow_workspace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runTool(t, dir, "policy", "authorize", "--caller", "alice",
				"--tool", "workspace.readFile", "--args", tc.args)
			if code != tc.code || !strings.Contains(out+stderr, tc.want) {
				t.Fatalf("exit %d, output:\n%s%s\nwant exit %d mentioning %q", code, out, stderr, tc.code, tc.want)
			}
		})
	}
}
