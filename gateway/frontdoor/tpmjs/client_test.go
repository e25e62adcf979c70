package tpmjsdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// npmDir holds the published client: package.json and package-lock.json
// pin it, drive.mjs runs it, and .ci/test.sh installs node_modules.
const npmDir = "testdata/npm"

// installCommand is what installs the client, for the failure message.
const installCommand = "(cd gateway/frontdoor/tpmjs/testdata/npm && npm ci --ignore-scripts --no-audit --no-fund)"

// requireClient fails the test, never skips it, when node or the
// installed client is missing.
func requireClient(t *testing.T) {
	t.Helper()
	for _, pkg := range []string{"registry-execute", "registry-search"} {
		if _, err := os.Stat(filepath.Join(npmDir, "node_modules", "@tpmjs", pkg, "package.json")); errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the published TPMJS client is not installed (%s is missing); run, from the repository root:\n\t%s",
				filepath.Join(npmDir, "node_modules", "@tpmjs", pkg), installCommand)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH; the TPMJS front door's tests run the published client with it: %v", err)
	}
}

// runClient runs the unmodified client once with the given inputs (see
// drive.mjs) and returns what it handed back to the model.
func runClient(t *testing.T, baseURL string, env map[string]string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "drive.mjs")
	cmd.Dir = npmDir
	cmd.Env = append(os.Environ(), "TPMJS_URL="+baseURL)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node drive.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		t.Fatalf("the client printed no JSON object: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return out
}

// TestPublishedClient runs @tpmjs/registry-execute and
// @tpmjs/registry-search 0.1.5, unmodified, with the door as their only
// URL and the caller's key in its path.
func TestPublishedClient(t *testing.T) {
	requireClient(t)
	e := newTestEnv(t, envOptions{})
	base := e.serve(nil) + "/k/" + testKey
	tool := tpmjstest.Package + "::" + tpmjstest.EchoTool

	t.Run("an allowed call returns the tool's output", func(t *testing.T) {
		secret := "sk-test-0123456789abcdef"
		out := runClient(t, base, map[string]string{"TOOL_ID": tool, "PARAMS": `{"greeting":"Hello"}`, "ENV": `{"API_KEY":"` + secret + `"}`})
		got, _ := json.Marshal(out["output"])
		// The tool echoes its env: the caller's secret reached the executor,
		// and like any caller secret it is redacted from what comes back.
		if out["error"] != nil || string(got) != `{"env":{"API_KEY":"[REDACTED:caller-secret]"},"params":{"greeting":"Hello"}}` {
			t.Fatalf("client result: %v", out)
		}
		reqs := e.exec.Requests()
		if !bytes.Contains(reqs[len(reqs)-1].Body, []byte(secret)) {
			t.Fatal("the executor did not get the caller's env")
		}
	})

	t.Run("a denied call is POLICY_DENIED and the executor gets nothing", func(t *testing.T) {
		before := e.executions()
		out := runClient(t, base, map[string]string{"TOOL_ID": tool, "PARAMS": `{"greeting":"HELLO"}`})
		msg, _ := out["message"].(map[string]any)
		if out["error"] != true || msg["code"] != "POLICY_DENIED" || !strings.Contains(msg["message"].(string), "no_shouting") {
			t.Fatalf("client result: %v", out)
		}
		if e.executions() != before {
			t.Fatal("a denied call reached the executor")
		}
	})

	t.Run("a retry with one Idempotency-Key runs once", func(t *testing.T) {
		before, folders := e.executions(), len(e.requestFolders())
		in := map[string]string{"TOOL_ID": tool, "PARAMS": `{"greeting":"again"}`, "IDEM": "client-retry-1"}
		first, second := runClient(t, base, in), runClient(t, base, in)
		a, _ := json.Marshal(first["output"])
		b, _ := json.Marshal(second["output"])
		if first["error"] != nil || string(a) != string(b) {
			t.Fatalf("first %v\nsecond %v", first, second)
		}
		if e.executions() != before+1 || len(e.requestFolders()) != folders+1 {
			t.Fatalf("executor calls +%d, request folders +%d; want +1 and +1", e.executions()-before, len(e.requestFolders())-folders)
		}
		if e.requestJSON("client-retry-1")["front_door"] != "tpmjs" {
			t.Fatal("the retried call is not recorded under its key")
		}
	})

	t.Run("the search lists only tools policy allows", func(t *testing.T) {
		out := runClient(t, base, map[string]string{"MODE": "search", "QUERY": "fake-tools"})
		raw, _ := json.Marshal(out)
		for _, want := range []string{`"echoTool"`, `"caughtErrorTool"`} {
			if !bytes.Contains(raw, []byte(want)) {
				t.Errorf("%s not found by the client: %s", want, raw)
			}
		}
		if bytes.Contains(raw, []byte(`"failTool"`)) {
			t.Errorf("the forbidden tool was listed: %s", raw)
		}
	})

	t.Run("a wrong key in the path fails at the search", func(t *testing.T) {
		before := len(e.requestFolders())
		out := runClient(t, e.serve(nil)+"/k/not-a-key", map[string]string{"TOOL_ID": tool, "PARAMS": `{}`})
		if out["error"] != true || out["message"] != "Failed to fetch tool metadata: Unauthorized" {
			t.Fatalf("client result: %v", out)
		}
		if len(e.requestFolders()) != before {
			t.Fatal("a call with a wrong key was recorded")
		}
	})
}
