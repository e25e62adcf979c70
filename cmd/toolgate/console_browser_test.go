package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consolePolicy holds workspace.createFile for ops, lets everyone read
// workspace files, lets people read their own calls in the console and
// ops read everyone's.
const consolePolicy = heldCreatePolicy + `
@id("read_files") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");

@id("read_own_evidence")
permit (principal, action == Action::"ReadEvidence", resource) when { context.requester == principal };

@id("ops_read_all_evidence")
permit (principal, action == Action::"ReadEvidence", resource) when { principal.groups.contains("ops") };
`

// xssPayload is tool output that would run script if a page took it as
// markup: it sets window.__xss, which the browser script checks.
const xssPayload = `<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>`

var consoleAddrPattern = regexp.MustCompile(`msg="console serving" addr=(\S+)`)

// startConsoleDeployment runs a gateway with the console on, alice (dev)
// and bob (ops), and returns it with the console's base URL.
func startConsoleDeployment(t *testing.T) (*approvalDeployment, string) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, consolePolicy)
	cfg := `auth:
  keys:
    - {caller: alice, env: KEY_ALICE, groups: [dev]}
    - {caller: bob, env: KEY_BOB, groups: [ops]}
evidence: {url: file://./audit}
drivers: {workspace: {type: workspace, root: ./ws}}
console: {listen: '127.0.0.1:0', index_interval: 100ms}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws", "evil.html"), []byte(xssPayload), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KEY_ALICE=k-alice-0123456789", "KEY_BOB=k-bob-0123456789"}
	srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")
	m := consoleAddrPattern.FindStringSubmatch(srv.log.String())
	if m == nil {
		t.Fatalf("the console did not say where it serves:\n%s", srv.log.String())
	}
	return &approvalDeployment{dir: dir, srv: srv, env: env}, "http://" + m[1]
}

// browserResult is what console.mjs saw.
type browserResult struct {
	Pages map[string]struct {
		URL     string   `json:"url"`
		Text    string   `json:"text"`
		Fired   bool     `json:"fired"`
		Imgs    int      `json:"imgs"`
		Scripts []string `json:"scripts"`
	} `json:"pages"`
	Axe map[string][]struct {
		ID      string   `json:"id"`
		Impact  string   `json:"impact"`
		Help    string   `json:"help"`
		Targets []string `json:"targets"`
	} `json:"axe"`
	Dialogs  []string `json:"dialogs"`
	XSSFired bool     `json:"xssFired"`
	Filtered []string `json:"filtered"`
	Approved string   `json:"approved"`
	Errors   []string `json:"errors"`
}

// TestConsoleInABrowser drives the gateway's console in headless
// Chromium (installed by .ci/test.sh) with playwright-core, and checks
// every page with axe-core: sign in, filter, a verified request, a
// tampered one, hostile tool output shown as text, a run, an approval
// decided in the browser whose retry then runs once, and a whole-store
// verification. Screenshots land in the test's temp folder, and in
// docs/images when TOOLGATE_CONSOLE_SCREENSHOTS names that folder.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s is missing: run the tests through bash .ci/test.sh, which installs it: %v", chromium, err)
	}
	script, err := filepath.Abs("testdata/console/console.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed: run npm ci in testdata/console (bash .ci/test.sh does): %v", err)
	}
	d, base := startConsoleDeployment(t)

	call := func(caller, id string, args ...string) (string, int) {
		out, stderr, code := d.as(t, caller, append([]string{"call", "--request-id", id, "--run-id", "run-1"}, args...)...)
		return out + stderr, code
	}
	if out, code := call("alice", "xss-read", "--tool", "workspace.readFile", "--args", `{"path":"evil.html"}`); code != exitOK {
		t.Fatalf("read: exit %d\n%s", code, out)
	}
	if out, code := call("alice", "tamper-me", "--tool", "workspace.readFile", "--args", `{"path":"evil.html"}`); code != exitOK {
		t.Fatalf("read: exit %d\n%s", code, out)
	}
	tamper(t, filepath.Join(d.dir, "audit", "requests", "tamper-me", "tool_result.json"))
	held := func() (string, int) {
		return call("alice", "held-1", "--tool", "workspace.createFile", "--args", `{"path":"approved.txt","content":"`+strings.Repeat("long line ", 40)+`"}`)
	}
	out, code := held()
	approvalID := regexp.MustCompile(`"approval_id":\s*"([^"]+)"`).FindStringSubmatch(out)
	if code != exitPending || approvalID == nil {
		t.Fatalf("held call: exit %d, want 3 with an approval id\n%s", code, out)
	}
	waitIndexed(t, base, "k-alice-0123456789", "held-1")

	shots := filepath.Join(t.TempDir(), "screenshots")
	res := runBrowser(t, node, script, []string{
		"CONSOLE_URL=" + base, "SCREENSHOT_DIR=" + shots, "USER_DATA_DIR=" + t.TempDir(),
		"SIGNIN_KEY=k-bob-0123456789", "RUN_ID=run-1", "XSS_ID=xss-read", "TAMPERED_ID=tamper-me", "APPROVAL_ID=" + approvalID[1],
	})
	checkBrowser(t, res)

	// The approval decided in the browser lets the retry run, once.
	target := filepath.Join(d.dir, "ws", "approved.txt")
	if out, code := held(); code != exitOK {
		t.Fatalf("retry after the browser's approval: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the approved call did not run: %v", err)
	}
	os.Remove(target)
	if out, code := held(); code != exitOK {
		t.Fatalf("second retry: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the second retry ran the call again: %v", err)
	}
	// The console tells the same story: one attempt held, one dispatched.
	bob := &consoleClient{t: t, base: base}
	bob.do(http.MethodPost, "/signin", url.Values{"key": {"k-bob-0123456789"}})
	var page string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, page = bob.do(http.MethodGet, "/requests/held-1", nil); strings.Contains(page, "<td>completed</td>") {
			break
		}
	}
	if !strings.Contains(page, "<td>completed</td>") || strings.Count(page, "<td>dispatched</td>") != 1 ||
		strings.Count(page, "<td>not_dispatched</td>") != 1 || !strings.Contains(page, "Verified: ok") {
		t.Fatalf("held-1 after its approved retry: want completed, verified, one attempt held and one dispatched\n%s", page)
	}
	copyScreenshots(t, shots)
}

// tamper changes one byte of a stored artifact.
func tamper(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o600)
	if err := os.WriteFile(path, bytes.Replace(data, []byte("evil"), []byte("EVIL"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitIndexed waits until the console's index has the held call id: the
// caller whose key is key signs in, and their listing shows it. The index
// refreshes on its own schedule, which a loaded machine stretches.
func waitIndexed(t *testing.T, base, key, id string) {
	t.Helper()
	c := &consoleClient{t: t, base: base}
	if status, _ := c.do(http.MethodPost, "/signin", url.Values{"key": {key}}); status != http.StatusSeeOther {
		t.Fatalf("sign-in to wait for the index: %d", status)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, body := c.do(http.MethodGet, "/requests", nil); strings.Contains(body, id) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console's listing does not show %s after 20s", id)
		}
	}
}

func runBrowser(t *testing.T, node, script string, env []string) browserResult {
	t.Helper()
	cmd := exec.Command(node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("console.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var res browserResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("console.mjs printed no result: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if len(res.Errors) > 0 {
		t.Fatalf("console.mjs failed:\n%s\nstderr:\n%s", strings.Join(res.Errors, "\n"), stderr.String())
	}
	return res
}

func checkBrowser(t *testing.T, res browserResult) {
	t.Helper()
	for _, name := range []string{"signin", "requests", "request", "tampered", "run", "approvals", "verify"} {
		p, ok := res.Pages[name]
		if !ok {
			t.Errorf("no %s page was seen", name)
			continue
		}
		if p.Fired || p.Imgs > 0 || len(p.Scripts) != 1 || !strings.HasSuffix(p.Scripts[0], "/static/console.js") {
			t.Errorf("%s page: script ran %v, %d images, scripts %v", name, p.Fired, p.Imgs, p.Scripts)
		}
		for _, v := range res.Axe[name] {
			if v.Impact == "serious" || v.Impact == "critical" {
				t.Errorf("%s page: axe-core %s violation %s (%s) at %v", name, v.Impact, v.ID, v.Help, v.Targets)
			}
		}
	}
	if res.XSSFired || len(res.Dialogs) > 0 {
		t.Errorf("hostile output ran: xss %v, dialogs %v", res.XSSFired, res.Dialogs)
	}
	checks := []struct{ what, text, want string }{
		{"the filtered list", strings.Join(res.Filtered, "\n"), "xss-read"},
		{"the request page", res.Pages["request"].Text, "Verified: ok"},
		{"the request page", res.Pages["request"].Text, `<img src=x onerror=\"window.__xss=1\"><script>window.__xss=1</script>`},
		{"the tampered page", res.Pages["tampered"].Text, "Tampered with: mismatch"},
		{"the run page", res.Pages["run"].Text, "held-1"},
		{"the approvals page", res.Pages["approvals"].Text, "more bytes: show all"},
		{"after approving", res.Approved, "approved"},
		{"the verify page", res.Pages["verify"].Text, "1 failed (1 tampered with)"},
	}
	for _, c := range checks {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("%s: want %q in\n%s", c.what, c.want, c.text)
		}
	}
	if strings.Contains(strings.Join(res.Filtered, "\n"), "held-1") {
		t.Errorf("the filter by tool let other tools through: %v", res.Filtered)
	}
}

// copyScreenshots copies the screenshots to the folder
// TOOLGATE_CONSOLE_SCREENSHOTS names (docs/images for the README), when
// it is set.
func copyScreenshots(t *testing.T, from string) {
	t.Helper()
	to := os.Getenv("TOOLGATE_CONSOLE_SCREENSHOTS")
	if to == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(from, "console-*.png"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
