package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// cafeMenu is the NFC spelling of a forbidden file with a non-ASCII name.
const cafeMenu = "caf\u00e9/menu.txt"

// canonicalPolicy allows the workspace but forbids, by path, the files that
// forbiddenFiles plants, in the rule patterns the README recommends.
const canonicalPolicy = `
@id("allow_workspace") @reason("tests may use the workspace")
permit (principal, action, resource in Driver::"workspace");
@id("run_sandbox") permit (principal, action == Action::"RunTool", resource == Tool::"sandbox.run");
@id("no_etc") @reason("etc is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path like "etc/*" };
@id("no_secret") @reason("the secret is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path == "conf/secret.txt" };
@id("no_menu") @reason("the menu is off limits")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has path && context.args.path == "` + cafeMenu + `" };
@id("no_etc_cwd") @reason("commands never start in etc")
forbid (principal, action, resource in Driver::"workspace")
when { context.args has cwd && (context.args.cwd == "etc" || context.args.cwd like "etc/*") };
`

// forbiddenFiles are the files canonicalPolicy protects, with contents a
// leak would show.
var forbiddenFiles = map[string]string{
	"etc/passwd":      "root:x:0:0:ETC-SECRET\n",
	"conf/secret.txt": "CONF-SECRET\n",
	cafeMenu:          "MENU-SECRET\n",
}

// plantForbidden writes forbiddenFiles into the workspace root, plus links
// inside -> etc and cfg -> conf that a caller (or a shell command) could
// have made.
func plantForbidden(t *testing.T, root string) {
	t.Helper()
	for p, content := range forbiddenFiles {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"inside": "etc", "cfg": "conf"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
}

// checkForbiddenUntouched fails the test unless every forbidden file still
// holds its content and nothing was added beside it.
func checkForbiddenUntouched(t *testing.T, root string) {
	t.Helper()
	for p, content := range forbiddenFiles {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil || string(got) != content {
			t.Errorf("%s = %q, %v; want it untouched", p, got, err)
		}
		entries, err := os.ReadDir(filepath.Dir(filepath.Join(root, filepath.FromSlash(p))))
		if err != nil || len(entries) != 1 {
			t.Errorf("the folder of %s holds %d entries (%v), want only the file", p, len(entries), err)
		}
	}
}

// respellings are ways to name a forbidden file other than the one the
// policy names, and what must become of each: "deny <rule>" (canonicalised,
// then denied), "invalid" (no canonical form: INVALID_ARGUMENT, nothing
// claimed) or "link" (allowed as written, then refused by the driver because
// the path goes through a symbolic link).
var respellings = []struct{ name, path, want string }{
	{"a leading ./", "./etc/passwd", "deny no_etc"},
	{"a doubled slash", "etc//passwd", "deny no_etc"},
	{"a ./ segment", "etc/./passwd", "deny no_etc"},
	{"a doubled slash in an exact match", "conf//secret.txt", "deny no_secret"},
	{"a ./ segment in an exact match", "conf/./secret.txt", "deny no_secret"},
	{"a leading ./ on an exact match", "./conf/secret.txt", "deny no_secret"},
	{"the NFD spelling of a non-ASCII name", "cafe\u0301/menu.txt", "deny no_menu"},
	{"an in-workspace symlink to etc", "inside/passwd", "link"},
	{"an in-workspace symlink to conf", "cfg/secret.txt", "link"},
	{"a trailing /.", "etc/passwd/.", "invalid"},
	{"a '..' back into etc", "conf/../etc/passwd", "invalid"},
	{"a zero-width space", "conf/\u200bsecret.txt", "invalid"},
	{"a bidi override", "etc/\u202edwssap", "invalid"},
}

// TestForbiddenPathsCannotBeRespelled is the attack of issue 11, class 2:
// every respelling of a forbidden path, through every file operation, is
// denied by the rule that names the file, refused as having no canonical
// form, or refused by the driver for going through a link. No forbidden
// content reaches the caller and no forbidden file changes.
func TestForbiddenPathsCannotBeRespelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": canonicalPolicy}})
	plantForbidden(t, e.workspace)
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
	n := 0
	for _, sp := range respellings {
		for _, op := range ops {
			n++
			id := fmt.Sprintf("respell-%d", n)
			t.Run(op.tool+" through "+sp.name, func(t *testing.T) {
				resp, err := e.call(context.Background(), id, op.tool, op.args(sp.path))
				checkRespelled(t, e, id, sp.want, resp, err)
			})
		}
	}
	checkForbiddenUntouched(t, e.workspace)
}

// TestShellCwdCannotBeRespelled does the same for the shell's cwd: a
// command never starts in etc, however the caller spells it.
func TestShellCwdCannotBeRespelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": canonicalPolicy}})
	plantForbidden(t, e.workspace)
	for i, sp := range []struct{ name, cwd, want string }{
		{"a leading ./", "./etc", "deny no_etc_cwd"},
		{"a trailing slash", "etc/", "deny no_etc_cwd"},
		{"a trailing /.", "etc/.", "deny no_etc_cwd"},
		{"doubled slashes", ".//etc//", "deny no_etc_cwd"},
		{"an in-workspace symlink to etc", "inside", "link"},
		{"a symlink with a trailing /.", "./inside/.", "link"},
		{"a '..' back into etc", "conf/../etc", "invalid"},
		{"a newline", "etc\n", "invalid"},
	} {
		id := fmt.Sprintf("cwd-%d", i)
		t.Run(sp.name, func(t *testing.T) {
			resp, err := e.call(context.Background(), id, "workspace.shell",
				map[string]any{"command": "cat passwd; echo ran > marker", "cwd": sp.cwd})
			checkRespelled(t, e, id, sp.want, resp, err)
		})
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "etc", "marker")); err == nil {
		t.Error("a command ran in etc")
	}
	checkForbiddenUntouched(t, e.workspace)
}

// checkRespelled asserts the outcome want (see respellings) and that no
// forbidden content reached the caller.
func checkRespelled(t *testing.T, e *env, id, want string, resp *toolgatev1.RunToolResponse, err error) {
	t.Helper()
	for _, content := range forbiddenFiles {
		if out := resp.GetToolResult().GetStdout(); strings.Contains(out, strings.TrimSpace(content)) {
			t.Fatalf("forbidden content reached the caller: %q", out)
		}
	}
	switch {
	case want == "invalid":
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "args.") {
			t.Fatalf("got %v, %v; want INVALID_ARGUMENT naming the argument", resp, err)
		}
		if names := e.artifactNames(id); len(names) != 0 {
			t.Errorf("a refused call claimed its id: %v", names)
		}
	case err != nil:
		t.Fatalf("RunTool: %v", err)
	case strings.HasPrefix(want, "deny "):
		if pc := resp.GetPolicyCheck(); pc.GetDecision() != "deny" || pc.GetRuleId() != strings.TrimPrefix(want, "deny ") {
			t.Fatalf("policy_check = %v, want %s", pc, want)
		}
		if resp.GetToolResult() != nil {
			t.Errorf("a denied call has a tool_result: %v", resp.GetToolResult())
		}
	case want == "link":
		if resp.GetOk() || !strings.Contains(resp.GetToolResult().GetStderr(), "is a symbolic link") {
			t.Fatalf("through a link: %v; want the driver to refuse the link", resp)
		}
	default:
		t.Fatalf("bad want %q", want)
	}
}

// TestRespelledCallIsTheSameRequest: the canonical request hash is over the
// canonical arguments, so a retry that spells the path differently is a
// replay of the first call, and request.json records the canonical path.
func TestRespelledCallIsTheSameRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	first := e.mustCall("same-1", "workspace.createFile", map[string]any{"path": "./notes//new.txt", "content": "x"})
	if !first.GetOk() {
		t.Fatalf("first call: %v", first)
	}
	again := e.mustCall("same-1", "workspace.createFile", map[string]any{"path": "notes/./new.txt", "content": "x"})
	if again.GetToolResult().GetStdout() != first.GetToolResult().GetStdout() || !again.GetOk() {
		t.Errorf("the respelled retry was not a replay: %v", again)
	}
	req := decodeJSON(t, e.artifact("same-1", evidence.ArtifactRequest))
	if args, _ := req["args"].(map[string]any); args["path"] != "notes/new.txt" {
		t.Errorf("request.json args = %v, want the canonical path", req["args"])
	}
	_, err := e.call(context.Background(), "same-1", "workspace.createFile", map[string]any{"path": "notes/other.txt", "content": "x"})
	wantCode(t, err, codes.AlreadyExists, "different request")
}

// TestNestedCallsAreCanonicalisedToo: guest code's tool calls go through the
// same pipeline, so a respelled path is denied or refused there as well.
func TestNestedCallsAreCanonicalisedToo(t *testing.T) {
	t.Parallel()
	sb := &sandboxDriver{calls: []nestedStep{
		{"c1", "workspace.readFile", map[string]any{"path": "./etc/passwd"}},
		{"c2", "workspace.readFile", map[string]any{"path": "conf/../etc/passwd"}},
		{"c3", "workspace.readFile", map[string]any{"path": "inside/passwd"}},
	}}
	e := newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": canonicalPolicy},
		extra:    map[string]drivers.Driver{"sandbox": sb},
	})
	plantForbidden(t, e.workspace)
	resp := e.mustCall("guest-1", "sandbox.run", nil)
	outcomes := resp.GetToolResult().GetData().GetListValue().GetValues()
	if len(outcomes) != 3 {
		t.Fatalf("outcomes: %v", outcomes)
	}
	for i, want := range []struct{ code, msg string }{
		{"tool_error", "no_etc"}, {"validation_error", "args.path"}, {"tool_error", "symbolic link"},
	} {
		f := outcomes[i].GetStructValue().GetFields()
		if f["ok"].GetBoolValue() || f["code"].GetStringValue() != want.code || !strings.Contains(f["message"].GetStringValue(), want.msg) {
			t.Errorf("nested call %d: %v; want %s mentioning %q", i+1, f, want.code, want.msg)
		}
	}
	if strings.Contains(fmt.Sprint(outcomes), "ETC-SECRET") {
		t.Error("guest code read etc/passwd")
	}
}

// recordingDecider remembers the arguments policy saw, per request id, and
// runs after (when set) once each decision is made, before the driver.
type recordingDecider struct {
	Decider
	mu    sync.Mutex
	seen  map[string]map[string]any
	after func()
}

func (r *recordingDecider) Decide(ctx context.Context, req policy.Request) policy.Decision {
	r.mu.Lock()
	r.seen[req.RequestID] = req.Args
	r.mu.Unlock()
	d := r.Decider.Decide(ctx, req)
	if r.after != nil {
		r.after()
	}
	return d
}

func (r *recordingDecider) path(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, _ := r.seen[id]["path"].(string)
	return p
}

// newRecordingGateway is a gateway over a real workspace and file store,
// on a loopback listener, deciding with policyText and recording it.
func newRecordingGateway(t *testing.T, policyText string) (toolgatev1.ToolGatewayClient, *recordingDecider, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := evidence.NewFileStore(filepath.Join(dir, "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	root := filepath.Join(dir, "workspace")
	ws, err := workspace.New(workspace.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	tools := map[string]Tool{}
	for _, op := range workspace.Operations() {
		tools["workspace."+op] = Tool{Driver: "workspace", Target: op}
	}
	auth, _ := callerauth.New(nil, nil)
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingDecider{Decider: engine, seen: map[string]map[string]any{}}
	g, err := New(Options{
		Decider: rec, Store: store, Redactor: red, Auth: auth, Instance: "test-host",
		Drivers: map[string]drivers.Driver{"workspace": ws}, Tools: tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	return toolgatev1.NewToolGatewayClient(serve(t, g)), rec, root
}

// randomSpelling spells the canonical path segs in one of the many ways
// that name it: leading "./", separators "//", "/./", and each segment in
// NFC or NFD.
func randomSpelling(r *rand.Rand, segs []string) string {
	var b strings.Builder
	for range r.IntN(3) {
		b.WriteString("./")
	}
	for i, s := range segs {
		if i > 0 {
			b.WriteString([]string{"/", "//", "/./", "/.//", "/././"}[r.IntN(5)])
		}
		if r.IntN(2) == 0 {
			s = norm.NFD.String(s)
		}
		b.WriteString(s)
	}
	return b.String()
}

// snapshot maps every file under root (but TMPDIR) to its content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestPolicyViewAndOpenedFileAgree is the property of issue 11: for random
// spellings of random paths, the path policy saw is the file the driver
// created (the one file on disk that changed) and the file it read.
func TestPolicyViewAndOpenedFileAgree(t *testing.T) {
	t.Parallel()
	client, rec, root := newRecordingGateway(t, permitWorkspace)
	r := rand.New(rand.NewPCG(11, 2))
	dirs := []string{"a", "docs", "caf\u00e9", "\u00c5ngstr\u00f6m", "\u1e9b\u0323"}
	names := []string{"x.txt", "\u00e9t\u00e9.md", "n\u00f1.txt", "plain", "\uac00.txt"}
	var created [][]string
	for i := range 60 {
		segs := []string{names[r.IntN(len(names))]}
		for range r.IntN(3) {
			segs = append([]string{dirs[r.IntN(len(dirs))]}, segs...)
		}
		if i%2 == 1 && len(created) > 0 {
			segs = created[r.IntN(len(created))]
		}
		want := norm.NFC.String(strings.Join(segs, "/"))
		spelling := randomSpelling(r, segs)
		id := fmt.Sprintf("prop-%d", i)
		before := snapshot(t, root)
		content := fmt.Sprintf("content %d", i)
		resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
			RequestId: id, ToolId: "workspace.createFile",
			Args: mustStruct(t, map[string]any{"path": spelling, "content": content, "overwrite": true}),
		})
		if err != nil || !resp.GetOk() {
			t.Fatalf("create %q: %v, %v", spelling, resp, err)
		}
		created = append(created, segs)
		var changed []string
		for p, c := range snapshot(t, root) {
			if before[p] != c {
				changed = append(changed, p)
			}
		}
		saw := rec.path(id)
		if len(changed) != 1 || changed[0] != saw || saw != want {
			t.Fatalf("create %q: policy saw %q, files changed %q, want %q", spelling, saw, changed, want)
		}

		spelling = randomSpelling(r, segs)
		id = fmt.Sprintf("prop-read-%d", i)
		resp, err = client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
			RequestId: id, ToolId: "workspace.readFile", Args: mustStruct(t, map[string]any{"path": spelling}),
		})
		if err != nil || resp.GetToolResult().GetStdout() != content || rec.path(id) != want {
			t.Fatalf("read %q: policy saw %q, read %q (%v), want %q from %q", spelling, rec.path(id), resp.GetToolResult().GetStdout(), err, content, want)
		}
	}
}

// TestLinkSwappedInAfterTheDecisionFailsTheCall: policy allows d/passwd,
// then (between the decision and the driver) d is replaced by a link to
// etc. The operation fails on the link; it never acts on etc/passwd.
func TestLinkSwappedInAfterTheDecisionFailsTheCall(t *testing.T) {
	t.Parallel()
	client, rec, root := newRecordingGateway(t, canonicalPolicy)
	plantForbidden(t, root)
	edits := []any{map[string]any{"oldContent": "SECRET", "newContent": "pwned"}}
	for i, args := range []map[string]any{
		{"tool": "workspace.readFile", "path": "d/passwd"},
		{"tool": "workspace.createFile", "path": "d/passwd", "content": "pwned", "overwrite": true},
		{"tool": "workspace.editFile", "path": "d/passwd", "edits": edits},
		{"tool": "workspace.deleteFile", "path": "d/passwd"},
	} {
		d := filepath.Join(root, "d")
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "passwd"), []byte("harmless SECRET\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		rec.after = func() {
			if err := os.RemoveAll(d); err != nil {
				t.Error(err)
			}
			if err := os.Symlink("etc", d); err != nil {
				t.Error(err)
			}
		}
		tool := args["tool"].(string)
		delete(args, "tool")
		resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
			RequestId: fmt.Sprintf("swap-%d", i), ToolId: tool, Args: mustStruct(t, args),
		})
		if err != nil || resp.GetPolicyCheck().GetDecision() != "allow" {
			t.Fatalf("%s: %v, %v; want the decision to allow d/passwd", tool, resp, err)
		}
		tr := resp.GetToolResult()
		if resp.GetOk() || !strings.Contains(tr.GetStderr(), "d is a symbolic link") || strings.Contains(tr.GetStdout(), "ETC-SECRET") {
			t.Errorf("%s after the swap: ok %v, stdout %q, stderr %q; want a failure on the link", tool, resp.GetOk(), tr.GetStdout(), tr.GetStderr())
		}
	}
	checkForbiddenUntouched(t, root)
}
