package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// inspectorDir holds the MCP Inspector: package.json and package-lock.json
// pin it and .ci/test.sh installs node_modules.
const inspectorDir = "testdata/inspector"

// inspectorInstallCommand installs the Inspector, for the failure message.
const inspectorInstallCommand = "(cd gateway/frontdoor/mcp/testdata/inspector && npm ci --ignore-scripts --no-audit --no-fund)"

// inspectorBin is the Inspector's launcher, whose --cli mode the tests run.
func inspectorBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(inspectorDir, "node_modules", ".bin", "mcp-inspector"))
	must(t, err)
	if _, err := os.Stat(bin); errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the MCP Inspector is not installed (%s is missing); run, from the repository root:\n\t%s", bin, inspectorInstallCommand)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH; the MCP door's tests run the Inspector with it: %v", err)
	}
	return bin
}

// inspectorToolError is the CLI's exit status when the tool's result has
// isError: it still prints the result.
const inspectorToolError = 5

// runInspector runs `mcp-inspector --cli URL --transport http` with the
// caller's bearer key and args, in a home of its own (it writes a catalog
// there), expects exit status want, and decodes the JSON it prints.
func runInspector(t *testing.T, want int, url, key string, args ...string) map[string]any {
	t.Helper()
	bin := inspectorBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	home := t.TempDir()
	argv := append([]string{"--cli", url, "--transport", "http", "--header", "Authorization: Bearer " + key}, args...)
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "MCP_CATALOG_PATH="+filepath.Join(home, "mcp.json"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("mcp-inspector %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	if code != want {
		t.Fatalf("mcp-inspector %v: exit status %d, want %d\nstdout: %s\nstderr: %s", args, code, want, stdout.String(), stderr.String())
	}
	var out map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil {
		t.Fatalf("the Inspector printed no JSON object: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return out
}

// TestInspectorCLI runs @modelcontextprotocol/inspector 2.12.0's CLI mode
// against the door: it lists the tools policy allows and calls one with
// an idempotency key in the tool's metadata.
func TestInspectorCLI(t *testing.T) {
	e := newClientEnv(t)

	t.Run("tools/list shows only the allowed tools", func(t *testing.T) {
		out := runInspector(t, 0, e.url, agentKey, "--method", "tools/list")
		tools, _ := out["tools"].([]any)
		var names []string
		for _, tool := range tools {
			m, _ := tool.(map[string]any)
			name, _ := m["name"].(string)
			names = append(names, name)
		}
		if !slices.Equal(names, []string{"echo.held", "echo.say"}) {
			t.Fatalf("tools = %v, want echo.held and echo.say: %v", names, out)
		}
	})

	t.Run("tools/call with an idempotency key runs once and is recorded under it", func(t *testing.T) {
		before := e.driver.runs.Load()
		args := []string{"--method", "tools/call", "--tool-name", "echo.say", "--tool-arg", "text=from the inspector",
			"--tool-metadata", MetaIdempotencyKey + "=insp-1"}
		for range 2 {
			out := runInspector(t, 0, e.url, agentKey, args...)
			meta, _ := out["_meta"].(map[string]any)
			if out["isError"] == true || firstText(out) != "from the inspector\n" || meta[MetaRequestID] != "insp-1" {
				t.Fatalf("result %v", out)
			}
		}
		if e.driver.runs.Load() != before+1 {
			t.Fatalf("the driver ran %d times, want once", e.driver.runs.Load()-before)
		}
		if req := e.artifact("insp-1", "request.json"); req["front_door"] != Name || req["caller"] != "agent" {
			t.Fatalf("request.json = %v", req)
		}
	})

	t.Run("tools/call of forbidden arguments is a tool error", func(t *testing.T) {
		before := e.driver.runs.Load()
		out := runInspector(t, inspectorToolError, e.url, agentKey, "--method", "tools/call", "--tool-name", "echo.say", "--tool-arg", "text=a secret")
		if out["isError"] != true || firstText(out) != "Denied by policy rule no_secrets: secrets are not echoed" || e.driver.runs.Load() != before {
			t.Fatalf("result %v; driver runs +%d", out, e.driver.runs.Load()-before)
		}
	})
}

// firstText is the text of a printed result's first content item.
func firstText(result map[string]any) string {
	content, _ := result["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	m, _ := content[0].(map[string]any)
	s, _ := m["text"].(string)
	return s
}
