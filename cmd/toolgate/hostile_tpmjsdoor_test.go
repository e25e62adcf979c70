package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// The TPMJS front door's attacks, over the wire against the real binary:
// a gateway with the door on, a tpmjs driver in front of a fake executor,
// auth keys, and a policy that forbids one of two tools.

const tpmjsDoorKey = "door-key-0123456789abcdef"

const tpmjsDoorPolicy = `
@id("allow_echo") @reason("echo is fine")
permit (principal, action == Action::"RunTool", resource == Tool::"fake.echo");
@id("no_fail") @reason("failing on purpose is not allowed")
forbid (principal, action == Action::"RunTool", resource == Tool::"fake.fail");
`

// tpmjsDoorGateway starts the binary with the TPMJS door on and returns
// the door's base URL, the executor and the gateway's folder.
func tpmjsDoorGateway(t *testing.T) (string, *tpmjstest.Executor, *server) {
	t.Helper()
	return tpmjsDoorGatewayWith(t, tpmjsDoorPolicy)
}

// tpmjsDoorGatewayWith is tpmjsDoorGateway under policy.
func tpmjsDoorGatewayWith(t *testing.T, policy string) (string, *tpmjstest.Executor, *server) {
	t.Helper()
	exec := tpmjstest.New(t, tpmjstest.NodeV10)
	dir := t.TempDir()
	writePolicy(t, dir, policy)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
auth:
  keys:
    - caller: agent
      env: TOOLGATE_DOOR_KEY
evidence:
  url: file://./evidence
drivers:
  tpmjs:
    type: tpmjs
    url: %s
tools:
  fake.echo: {driver: tpmjs, package: %q, version: "1.0.0", export: %s, caller_env: [API_KEY]}
  fake.fail: {driver: tpmjs, package: %q, version: "1.0.0", export: %s}
front_doors:
  tpmjs: {listen: 127.0.0.1:0, max_body_bytes: 4096}
`, exec.URL, tpmjstest.Package, tpmjstest.EchoTool, tpmjstest.Package, tpmjstest.FailTool)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600))
	srv := startServerEnv(t, dir, []string{"TOOLGATE_DOOR_KEY=" + tpmjsDoorKey}, "--config", "toolgate.yaml")
	base := srv.doorURL(t, "tpmjs")
	waitListening(t, base+"/health")
	return base, exec, srv
}

// waitListening waits until url answers.
func waitListening(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the TPMJS door at %s never answered: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// doorPost posts body to url with headers and returns the status and the
// decoded answer.
func doorPost(t *testing.T, url, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	status, raw := postRaw(t, url, strings.NewReader(body), header)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("answer %d is not JSON: %s", status, raw)
	}
	return status, m
}

// postRaw posts body as JSON to url with headers and returns the status
// and the answer's bytes.
func postRaw(t *testing.T, url string, body io.Reader, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func doorCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// doorExecutions counts the executions the fake executor received.
func doorExecutions(e *tpmjstest.Executor) int {
	n := 0
	for _, r := range e.Requests() {
		if strings.HasSuffix(r.Path, "/execute-tool") {
			n++
		}
	}
	return n
}

// requestFolders lists the recorded request ids.
func doorRequestFolders(t *testing.T, srv *server) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(srv.dir, "evidence", "requests"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

func doorBody(export, params, env string) string {
	return fmt.Sprintf(`{"packageName":%q,"name":%q,"version":"1.0.0","params":%s,"env":%s}`, tpmjstest.Package, export, params, env)
}

// TestHostileTPMJSDoorKeys: without the right key nothing runs and nothing
// is recorded, and a key given in the path never shows up in the logs or
// the evidence.
func TestHostileTPMJSDoorKeys(t *testing.T) {
	t.Parallel()
	base, exec, srv := tpmjsDoorGateway(t)
	for _, tc := range []struct {
		name, url string
		header    map[string]string
	}{
		{"no key at all", base + "/execute-tool", nil},
		{"a wrong key in the path", base + "/k/not-the-key/execute-tool", nil},
		{"a wrong bearer key", base + "/execute-tool", map[string]string{"Authorization": "Bearer not-the-key"}},
		{"a path key and a different bearer key", base + "/k/" + tpmjsDoorKey + "/execute-tool", map[string]string{"Authorization": "Bearer other"}},
		{"the key's prefix only", base + "/k/" + tpmjsDoorKey[:10] + "/execute-tool", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, m := doorPost(t, tc.url, doorBody(tpmjstest.EchoTool, `{}`, `{}`), tc.header)
			if status != http.StatusUnauthorized || doorCode(m) != "UNAUTHORIZED" {
				t.Fatalf("got %d %v", status, m)
			}
		})
	}
	if n := doorExecutions(exec); n != 0 || len(doorRequestFolders(t, srv)) != 0 {
		t.Fatalf("unauthenticated requests ran (%d) or were recorded (%v)", n, doorRequestFolders(t, srv))
	}
	status, m := doorPost(t, base+"/k/"+tpmjsDoorKey+"/execute-tool", doorBody(tpmjstest.EchoTool, `{"a":1}`, `{}`), nil)
	if status != http.StatusOK || m["success"] != true {
		t.Fatalf("the right path key: %d %v", status, m)
	}
	if strings.Contains(srv.log.String(), tpmjsDoorKey) {
		t.Fatal("the path key is in the server's log")
	}
	err := filepath.WalkDir(filepath.Join(srv.dir, "evidence"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), tpmjsDoorKey) {
			t.Errorf("the path key is in %s", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostileTPMJSDoorSmuggling: what a client adds to a call cannot widen
// it: an importUrl is never forwarded, env reaches only the variables the
// tool's caller_env names, params cannot carry a second _env, a version
// the catalog does not serve and a request id that is a path are refused,
// all before anything is recorded or run.
func TestHostileTPMJSDoorSmuggling(t *testing.T) {
	t.Parallel()
	base, exec, srv := tpmjsDoorGateway(t)
	url := base + "/execute-tool"
	auth := map[string]string{"Authorization": "Bearer " + tpmjsDoorKey}
	for _, tc := range []struct {
		name, body, key string
	}{
		{"an env variable outside caller_env", doorBody(tpmjstest.EchoTool, `{}`, `{"NODE_OPTIONS":"--require /tmp/x.js"}`), "smuggle-env"},
		{"a second _env in params beside env", doorBody(tpmjstest.EchoTool, `{"_env":{"NODE_OPTIONS":"x"}}`, `{"API_KEY":"k"}`), "smuggle-params-env"},
		{"a version the catalog does not serve", strings.Replace(doorBody(tpmjstest.EchoTool, `{}`, `{}`), "1.0.0", "6.6.6", 1), "smuggle-version"},
		{"a request id that climbs out of its folder", doorBody(tpmjstest.EchoTool, `{}`, `{}`), "../../etc"},
		{"a body over max_body_bytes", doorBody(tpmjstest.EchoTool, `{"s":"`+strings.Repeat("a", 5000)+`"}`, `{}`), "smuggle-big"},
		{"a second JSON object after the first", doorBody(tpmjstest.EchoTool, `{}`, `{}`) + `{"packageName":"x","name":"y"}`, "smuggle-trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"Authorization": auth["Authorization"], "Idempotency-Key": tc.key}
			status, m := doorPost(t, url, tc.body, h)
			if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
				t.Fatalf("got %d %v, want 400 or 413", status, m)
			}
		})
	}
	if n := doorExecutions(exec); n != 0 || len(doorRequestFolders(t, srv)) != 0 {
		t.Fatalf("refused requests ran (%d) or were recorded (%v)", n, doorRequestFolders(t, srv))
	}
	body := `{"packageName":"` + tpmjstest.Package + `","name":"echoTool","version":"1.0.0","importUrl":"https://evil.example/x.js","params":{}}`
	status, m := doorPost(t, url, body, map[string]string{"Authorization": auth["Authorization"], "Idempotency-Key": "import-url"})
	if status != http.StatusOK || m["success"] != true {
		t.Fatalf("a call with an importUrl: %d %v", status, m)
	}
	reqs := exec.Requests()
	if got := string(reqs[len(reqs)-1].Body); strings.Contains(got, "evil.example") {
		t.Fatalf("the importUrl reached the executor: %s", got)
	}
	req, err := os.ReadFile(filepath.Join(srv.dir, "evidence", "requests", "import-url", "request.json"))
	if err != nil || strings.Contains(string(req), "evil.example") || !strings.Contains(string(req), `"front_door": "tpmjs"`) {
		t.Fatalf("request.json = %s (%v)", req, err)
	}
}

// TestHostileTPMJSDoorDeny: a forbidden tool is refused by policy through
// the door as over gRPC: POLICY_DENIED, recorded, the executor never
// called; a retry with the same key does not run it either.
func TestHostileTPMJSDoorDeny(t *testing.T) {
	t.Parallel()
	base, exec, srv := tpmjsDoorGateway(t)
	h := map[string]string{"Authorization": "Bearer " + tpmjsDoorKey, "Idempotency-Key": "deny-1"}
	for range 2 {
		status, m := doorPost(t, base+"/execute-tool", doorBody(tpmjstest.FailTool, `{}`, `{}`), h)
		if status != http.StatusOK || doorCode(m) != "POLICY_DENIED" {
			t.Fatalf("got %d %v", status, m)
		}
	}
	if n := doorExecutions(exec); n != 0 {
		t.Fatalf("the executor got %d calls of a forbidden tool", n)
	}
	if got := doorRequestFolders(t, srv); len(got) != 1 || got[0] != "deny-1" {
		t.Fatalf("request folders %v, want the one denied request", got)
	}
}
