package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mcpSDKDir holds the unmodified MCP TypeScript SDK client and its driver
// script (installed by .ci/test.sh's npm ci).
const mcpSDKDir = "../../gateway/frontdoor/mcp/testdata/npm"

// TestMCPApprovalWithoutMetaRunsOnce: the official TypeScript SDK client,
// as the Vercel AI SDK and LangChain's MCP adapters use it — no
// elicitation handler, no _meta — calls a tool that policy holds for
// approval; a reviewer approves with `toolgate approvals approve`; the
// client calls again, which the door sees as a new request id. The call
// runs once, the evidence ties the run to the approval and the request it
// was granted for, and verify finds both clean and signed.
func TestMCPApprovalWithoutMetaRunsOnce(t *testing.T) {
	if _, err := os.Stat(filepath.Join(mcpSDKDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed: run (cd gateway/frontdoor/mcp/testdata/npm && npm ci --ignore-scripts): %v", err)
	}
	dir := t.TempDir()
	writePolicy(t, dir, mcpDoorPolicy)
	cfg := `listen: 127.0.0.1:0
auth:
  keys:
    - {caller: agent, env: TG_MCP_AGENT}
    - {caller: olga, env: TG_OPS, groups: [ops]}
evidence: {url: file://./evidence}
drivers:
  workspace: {type: workspace, root: ./ws}
front_doors:
  mcp: {listen: 127.0.0.1:0}
`
	for name, text := range map[string]string{"toolgate.yaml": cfg, "ws/old.log": "stale\n"} {
		mcpMust(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700))
		mcpMust(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	env := []string{"TG_MCP_AGENT=" + mcpDoorAgentKey, "TG_OPS=k-ops-0123456789abcdef"}
	srv := startServerEnv(t, dir, env, "--config", "toolgate.yaml")
	url := mcpDoorURL(t, srv)
	del := map[string]any{"path": "old.log"}

	held := sdkCallNoMeta(t, url, "workspace.deleteFile", del)
	approval, _ := held.Meta["io.github.toolgate/approval"].(map[string]any)
	apr, _ := approval["approvalId"].(string)
	heldID, _ := held.Meta["io.github.toolgate/requestId"].(string)
	if !held.IsError || apr == "" || heldID == "" {
		t.Fatalf("the first call was not held for approval: %+v", held)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "old.log")); err != nil {
		t.Fatalf("the held call ran: %v", err)
	}

	out, stderr, code := runToolEnv(t, dir, env, "approvals", "approve", apr, "--reason", "stale log",
		"--addr", srv.addr, "--key-env", "TG_OPS")
	if code != exitOK {
		t.Fatalf("approvals approve: exit %d\n%s%s", code, out, stderr)
	}

	ran := sdkCallNoMeta(t, url, "workspace.deleteFile", del)
	ranID, _ := ran.Meta["io.github.toolgate/requestId"].(string)
	if ran.IsError || ranID == "" || ranID == heldID {
		t.Fatalf("the retry after approval (request %s, held %s): %+v", ranID, heldID, ran)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "old.log")); !os.IsNotExist(err) {
		t.Fatalf("the approved delete did not run: %v", err)
	}
	again := sdkCallNoMeta(t, url, "workspace.deleteFile", del)
	if approval, _ := again.Meta["io.github.toolgate/approval"].(map[string]any); !again.IsError || approval["approvalId"] == apr {
		t.Fatalf("a third call used the spent approval: %+v", again)
	}

	runs := 0
	for _, id := range mcpRequestIDs(t, dir) {
		if _, err := os.Stat(filepath.Join(dir, "evidence", "requests", id, "tool_result.json")); err == nil {
			runs++
		}
	}
	if runs != 1 {
		t.Fatalf("the delete ran %d times", runs)
	}
	var decision struct {
		Decision string `json:"decision"`
		Approval struct {
			ApprovalID string `json:"approval_id"`
			RequestID  string `json:"request_id"`
			Approver   string `json:"approver"`
		} `json:"approval"`
	}
	mcpReadJSON(t, filepath.Join(dir, "evidence", "requests", ranID, "policy_decision.json"), &decision)
	if decision.Decision != "allow" || decision.Approval.ApprovalID != apr || decision.Approval.RequestID != heldID || decision.Approval.Approver != "olga" {
		t.Fatalf("the run's decision names its approval as %+v", decision)
	}
	var use struct {
		UsedBy string `json:"used_by"`
	}
	mcpReadJSON(t, filepath.Join(dir, "evidence", "requests", heldID, "approval_use.json"), &use)
	if use.UsedBy != ranID {
		t.Fatalf("approval_use.json of %s names %s, want %s", heldID, use.UsedBy, ranID)
	}

	pub, stderr, code := runTool(t, dir, "evidence", "pubkey", "--config", "toolgate.yaml")
	if code != exitOK {
		t.Fatalf("pubkey: exit %d %s", code, stderr)
	}
	mcpMust(t, os.WriteFile(filepath.Join(dir, "gateway.pub"), []byte(pub), 0o600))
	for _, id := range []string{ranID, heldID} {
		out, stderr, code = runTool(t, dir, "evidence", "verify", "--evidence", "file://./evidence", "--pubkey", "gateway.pub", "--json", id)
		if code != exitOK {
			t.Fatalf("verify %s: exit %d\n%s%s", id, code, out, stderr)
		}
		line := strings.TrimSpace(out)
		var rep struct {
			RequestID string   `json:"request_id"`
			Status    string   `json:"status"`
			Problems  []string `json:"problems"`
			Approval  struct {
				ApprovalID string `json:"approval_id"`
				State      string `json:"state"`
				UsedBy     string `json:"used_by"`
				GrantedFor string `json:"granted_for"`
				Signature  string `json:"signature"`
			} `json:"approval"`
		}
		mcpMust(t, json.Unmarshal([]byte(line), &rep))
		a := rep.Approval
		if rep.Status != "ok" || len(rep.Problems) > 0 || a.ApprovalID != apr || a.State != "consumed" || a.UsedBy != ranID || a.Signature != "valid" {
			t.Errorf("verify %s: %s", rep.RequestID, line)
		}
		if rep.RequestID == ranID && a.GrantedFor != heldID {
			t.Errorf("verify %s does not name the request the approval was granted for: %s", ranID, line)
		}
	}
}

// mcpDoorURL waits for the MCP door's address in srv's log.
func mcpDoorURL(t *testing.T, srv *server) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := mcpDoorAddr.FindStringSubmatch(srv.log.String()); m != nil {
			return "http://" + m[1] + "/mcp"
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the MCP door's address is not in the log:\n%s", srv.log.String())
	return ""
}

// sdkNoMetaResult is a tools/call result as the SDK client hands it over.
type sdkNoMetaResult struct {
	IsError bool           `json:"isError"`
	Meta    map[string]any `json:"_meta"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// sdkCallNoMeta runs the TypeScript SDK client once, as the agent, for
// one call without _meta, and returns its result.
func sdkCallNoMeta(t *testing.T, url, name string, args map[string]any) sdkNoMetaResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script, err := json.Marshal(map[string]any{"steps": []any{map[string]any{"op": "call", "name": name, "arguments": args}}})
	mcpMust(t, err)
	cmd := exec.CommandContext(ctx, "node", "drive.mjs")
	cmd.Dir = mcpSDKDir
	cmd.Env = append(os.Environ(), "TOOLGATE_URL="+url, "TOOLGATE_KEY="+mcpDoorAgentKey)
	cmd.Stdin = bytes.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node drive.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var out struct {
		Steps []struct {
			Result *sdkNoMetaResult `json:"result"`
			Error  any              `json:"error"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &out); err != nil || len(out.Steps) != 1 || out.Steps[0].Result == nil {
		t.Fatalf("the client's answer: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	return *out.Steps[0].Result
}

// mcpRequestIDs lists the request folders of dir's evidence.
func mcpRequestIDs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "evidence", "requests"))
	mcpMust(t, err)
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

func mcpReadJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	mcpMust(t, err)
	mcpMust(t, json.Unmarshal(b, v))
}
