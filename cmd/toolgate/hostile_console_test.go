package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
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

// consoleClient is a browser without JavaScript against a real console:
// it sends the session cookie by hand (it is Secure; the listener is
// plain loopback HTTP) and keeps the last CSRF token a page carried.
type consoleClient struct {
	t      *testing.T
	base   string
	cookie string
	csrf   string
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *consoleClient) do(method, path string, form url.Values) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != "" {
		req.Header.Set("Cookie", "toolgate_console="+c.cookie)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, ck := range resp.Cookies() {
		if ck.Name == "toolgate_console" {
			c.cookie = ck.Value
		}
	}
	if m := consoleCSRF.FindStringSubmatch(string(data)); m != nil {
		c.csrf = m[1]
	}
	return resp.StatusCode, string(data)
}

// TestHostileConsolePeople: through the real gateway's console, a person
// reads only what Cedar's ReadEvidence lets them, cannot decide an
// approval without the session's CSRF token nor their own held call, and
// a wrong key signs nobody in.
func TestHostileConsolePeople(t *testing.T) {
	t.Parallel()
	d, base := startConsoleDeployment(t)
	for _, c := range []struct{ caller, id string }{{"alice", "alice-read"}, {"bob", "bob-read"}} {
		if out, _, code := d.as(t, c.caller, "call", "--request-id", c.id, "--tool", "workspace.readFile", "--args", `{"path":"evil.html"}`); code != exitOK {
			t.Fatalf("%s: exit %d\n%s", c.id, code, out)
		}
	}
	out, _, code := d.as(t, "alice", "call", "--request-id", "held-2", "--tool", "workspace.createFile", "--args", `{"path":"x.txt","content":"x"}`)
	approvalID := regexp.MustCompile(`"approval_id":\s*"([^"]+)"`).FindStringSubmatch(out)
	if code != exitPending || approvalID == nil {
		t.Fatalf("held call: exit %d\n%s", code, out)
	}
	waitIndexed(t, base, "k-alice-0123456789", "held-2")

	mallory := &consoleClient{t: t, base: base}
	for _, key := range []string{"", "k-nobody", "k-alice-012345678", "anonymous", strings.Repeat("k", 20000)} {
		status, _ := mallory.do(http.MethodPost, "/signin", url.Values{"key": {key}})
		if (status != http.StatusUnauthorized && status != http.StatusBadRequest) || mallory.cookie != "" {
			t.Errorf("sign-in with a %d-byte key: %d, cookie %q; want 401 (400 past the form's cap) and none", len(key), status, mallory.cookie)
		}
	}
	if status, _ := mallory.do(http.MethodPost, "/approvals/"+approvalID[1], url.Values{"decision": {"approve"}, "reason": {"x"}}); status != http.StatusUnauthorized {
		t.Errorf("approving without a session: %d, want 401", status)
	}

	alice := &consoleClient{t: t, base: base}
	if status, _ := alice.do(http.MethodPost, "/signin", url.Values{"key": {"k-alice-0123456789"}}); status != http.StatusSeeOther {
		t.Fatalf("alice's sign-in: %d", status)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, body = alice.do(http.MethodGet, "/requests", nil); strings.Contains(body, "held-2") {
			break
		}
	}
	if !strings.Contains(body, "alice-read") || !strings.Contains(body, "held-2") || strings.Contains(body, "bob-read") {
		t.Fatalf("alice's listing: want her calls only\n%s", body)
	}
	if status, body := alice.do(http.MethodGet, "/requests/bob-read", nil); status != http.StatusNotFound || strings.Contains(body, "evil.html") {
		t.Errorf("alice opening bob's call: %d", status)
	}
	form := url.Values{"decision": {"approve"}, "reason": {"mine"}}
	if status, _ := alice.do(http.MethodPost, "/approvals/"+approvalID[1], form); status != http.StatusForbidden {
		t.Errorf("approving without the CSRF token: %d, want 403", status)
	}
	alice.do(http.MethodGet, "/approvals", nil)
	form.Set("csrf", alice.csrf)
	if status, body := alice.do(http.MethodPost, "/approvals/"+approvalID[1], form); status != http.StatusForbidden || !strings.Contains(body, "not recorded") {
		t.Errorf("alice approving her own call: %d, want 403 (self-approval refused)\n%s", status, body)
	}
	if _, _, code := d.as(t, "alice", "call", "--request-id", "held-2", "--tool", "workspace.createFile", "--args", `{"path":"x.txt","content":"x"}`); code != exitPending {
		t.Errorf("the held call after alice's refused approval: exit %d, want still pending", code)
	}
}

var readOnlyConsolePattern = regexp.MustCompile(`serving (http://\S+)/`)

// TestHostileReadOnlyConsole: `toolgate evidence console` serves a bucket
// without a gateway, on loopback only unless told otherwise, with no
// approvals inbox and every page under the console's headers.
func TestHostileReadOnlyConsole(t *testing.T) {
	t.Parallel()
	d, _ := startConsoleDeployment(t)
	if out, _, code := d.as(t, "alice", "call", "--request-id", "ro-1", "--tool", "workspace.readFile", "--args", `{"path":"evil.html"}`); code != exitOK {
		t.Fatalf("call: exit %d\n%s", code, out)
	}
	if _, stderr, code := runTool(t, d.dir, "evidence", "console", "--evidence", "file://./audit", "--listen", "0.0.0.0:0"); code != exitError || !strings.Contains(stderr, "not a loopback address") {
		t.Fatalf("a non-loopback read-only console: exit %d\n%s", code, stderr)
	}
	cmd := exec.Command(toolgateBin, "evidence", "console", "--evidence", "file://./audit", "--listen", "127.0.0.1:0", "--policies", "policies")
	cmd.Dir = d.dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := readOnlyConsolePattern.FindStringSubmatch(sc.Text()); m != nil {
				base <- m[1]
			}
		}
	}()
	var c *consoleClient
	select {
	case b := <-base:
		c = &consoleClient{t: t, base: b}
	case <-time.After(30 * time.Second):
		t.Fatal("the read-only console did not start")
	}
	status, body := c.do(http.MethodGet, "/requests", nil)
	if status != http.StatusOK || !strings.Contains(body, "ro-1") || !strings.Contains(body, "Read-only bucket") {
		t.Fatalf("requests: %d\n%s", status, body)
	}
	if status, body := c.do(http.MethodGet, "/requests/ro-1", nil); status != http.StatusOK || !strings.Contains(body, "permit") ||
		!strings.Contains(body, "&lt;script&gt;") || strings.Contains(body, "<script>window") {
		t.Fatalf("request page: %d, want the rule's text and the output as text\n%s", status, body)
	}
	if status, _ := c.do(http.MethodGet, "/approvals", nil); status != http.StatusNotFound {
		t.Errorf("approvals on a bucket: %d, want 404", status)
	}
	c.do(http.MethodGet, "/verify", nil) // its form carries the session's token
	if status, _ := c.do(http.MethodPost, "/approvals/x", url.Values{"csrf": {c.csrf}, "decision": {"approve"}}); status != http.StatusNotFound {
		t.Errorf("deciding on a bucket: %d, want 404", status)
	}
}

// TestConsoleServesTLSWhenTheGatewayDoes: with tls configured the console
// speaks only TLS, with the gateway's certificate, and signs in over it.
func TestConsoleServesTLSWhenTheGatewayDoes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, consolePolicy)
	cert, key := writeSelfSigned(t, dir)
	cfg := "tls: {cert_file: " + cert + ", key_file: " + key + "}\n" +
		"auth: {keys: [{caller: bob, env: KEY_BOB, groups: [ops]}]}\n" +
		"evidence: {url: file://./audit}\ndrivers: {workspace: {type: workspace, root: ./ws}}\n" +
		"console: {listen: '127.0.0.1:0'}\n"
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"KEY_BOB=k-bob-0123456789"}, "--config", "toolgate.yaml")
	m := consoleAddrPattern.FindStringSubmatch(srv.log.String())
	if m == nil || !strings.Contains(srv.log.String(), `msg="console serving" addr=`+m[1]+" tls=true") {
		t.Fatalf("the console did not say it serves TLS:\n%s", srv.log.String())
	}
	pemData, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemData)
	hc := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := hc.PostForm("https://"+m[1]+"/signin", url.Values{"key": {"k-bob-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Fatalf("sign-in over TLS: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp, err := http.Get("http://" + m[1] + "/signin"); err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(data), "API key") {
			t.Fatal("the console answered plain HTTP beside TLS")
		}
	}
}
