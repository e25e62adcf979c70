package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// mcpSDKDir holds the unmodified MCP TypeScript SDK client and its driver
// script, mcpFrameworksDir the MCP clients of two agent frameworks and
// theirs (both installed by .ci/test.sh's npm ci).
const (
	mcpSDKDir        = "../../gateway/frontdoor/mcp/testdata/npm"
	mcpFrameworksDir = "../../gateway/frontdoor/mcp/testdata/frameworks"
)

// noMetaClient is a real MCP client that neither declares elicitation
// nor sends toolgate's idempotency key in _meta: each call is a new
// tools/call, so a new request id.
type noMetaClient struct {
	name string
	// installed is a file the client's npm ci installs.
	installed string
	call      func(t *testing.T, url, tool string, args map[string]any) noMetaAnswer
}

// noMetaAnswer is what the client handed the application: a tool error
// or a result, and its text.
type noMetaAnswer struct {
	IsError bool   `json:"isError"`
	Text    string `json:"text"`
}

// noMetaClients are the MCP TypeScript SDK's client, the Vercel AI SDK's
// (experimental_createMCPClient, without an elicitation handler) and
// LangChain's MCP adapters (MultiServerMCPClient), each unmodified.
var noMetaClients = []noMetaClient{
	{"typescript-sdk", filepath.Join(mcpSDKDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"),
		func(t *testing.T, url, tool string, args map[string]any) noMetaAnswer {
			r := sdkCallNoMeta(t, url, tool, args)
			var text []string
			for _, c := range r.Content {
				text = append(text, c.Text)
			}
			return noMetaAnswer{IsError: r.IsError, Text: strings.Join(text, "\n")}
		}},
	{"vercel-ai-sdk", filepath.Join(mcpFrameworksDir, "node_modules", "@ai-sdk", "mcp", "package.json"), frameworkCall("vercel")},
	{"langchain-mcp-adapters", filepath.Join(mcpFrameworksDir, "node_modules", "@langchain", "mcp-adapters", "package.json"), frameworkCall("langchain")},
}

// heldApprovalID finds the approval a held call's tool error names.
var heldApprovalID = regexp.MustCompile(`Approval (apr_[a-z0-9]+) is required`)

// TestMCPApprovalWithoutMetaRunsOnce: each real client that neither
// elicits nor sends _meta calls a tool that policy holds for approval and
// is told to call again; calling again while the approval is pending
// waits on the same approval (no second one for the approvers); a
// reviewer approves with `toolgate approvals approve`; the client calls
// again, which the door sees as a new request id. The call runs once, a
// third identical call is held anew, the evidence ties the run to the
// approval and the request it was granted for, and verify finds every
// request clean and signed.
func TestMCPApprovalWithoutMetaRunsOnce(t *testing.T) {
	t.Parallel()
	for _, client := range noMetaClients {
		t.Run(client.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(client.installed); err != nil {
				t.Fatalf("the %s client is not installed: run the npm ci lines of .ci/test.sh: %v", client.name, err)
			}
			testApprovalWithoutMeta(t, client)
		})
	}
}

func testApprovalWithoutMeta(t *testing.T, client noMetaClient) {
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
	url := srv.doorURL(t, "mcp") + "/mcp"
	del := map[string]any{"path": "old.log"}
	// call makes one call and returns the answer, its approval (if held)
	// and the request id the door gave it: the one new request folder.
	call := func() (noMetaAnswer, string, string) {
		t.Helper()
		before := mcpRequestIDs(t, dir)
		a := client.call(t, url, "workspace.deleteFile", del)
		var added []string
		for _, id := range mcpRequestIDs(t, dir) {
			if !slices.Contains(before, id) {
				added = append(added, id)
			}
		}
		if len(added) != 1 {
			t.Fatalf("one call made requests %v: %+v", added, a)
		}
		apr := ""
		if m := heldApprovalID.FindStringSubmatch(a.Text); m != nil {
			apr = m[1]
		}
		return a, apr, added[0]
	}

	held, apr, heldID := call()
	if !held.IsError || apr == "" || !strings.Contains(held.Text, "call this tool again") {
		t.Fatalf("the first call was not held for approval: %+v", held)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "old.log")); err != nil {
		t.Fatalf("the held call ran: %v", err)
	}
	// The client retries before anyone approved: it waits on the same
	// approval, and the approvers still see one.
	waiting, waitApr, waitID := call()
	if !waiting.IsError || waitApr != apr {
		t.Fatalf("a retry while pending waits on %q, not %s: %+v", waitApr, apr, waiting)
	}
	out, stderr, code := runToolEnv(t, dir, env, "approvals", "ls", "--json", "--addr", srv.addr, "--key-env", "TG_OPS")
	var listed struct {
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
		} `json:"approvals"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Approvals) != 1 || listed.Approvals[0].ApprovalID != apr {
		t.Fatalf("approvals ls while the call waits: exit %d, want only %s\n%s%s", code, apr, out, stderr)
	}

	out, stderr, code = runToolEnv(t, dir, env, "approvals", "approve", apr, "--reason", "stale log",
		"--addr", srv.addr, "--key-env", "TG_OPS")
	if code != exitOK {
		t.Fatalf("approvals approve: exit %d\n%s%s", code, out, stderr)
	}

	ran, _, ranID := call()
	if ran.IsError {
		t.Fatalf("the retry after approval (request %s, held %s): %+v", ranID, heldID, ran)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "old.log")); !os.IsNotExist(err) {
		t.Fatalf("the approved delete did not run: %v", err)
	}
	if again, againApr, _ := call(); !again.IsError || againApr == "" || againApr == apr {
		t.Fatalf("a third call used the spent approval, or was not held: %+v", again)
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
	mcpReadJSON(t, filepath.Join(dir, "evidence", "requests", waitID, "policy_decision.json"), &decision)
	if decision.Decision != "approval_required" || decision.Approval.ApprovalID != apr || decision.Approval.RequestID != heldID {
		t.Fatalf("the waiting call's decision names the approval it waits on as %+v", decision)
	}
	var use struct {
		UsedBy string `json:"used_by"`
	}
	mcpReadJSON(t, filepath.Join(dir, "evidence", "requests", heldID, "approval_use.json"), &use)
	if use.UsedBy != ranID {
		t.Fatalf("approval_use.json of %s names %s, want %s", heldID, use.UsedBy, ranID)
	}
	verifyApprovalTie(t, dir, apr, heldID, waitID, ranID)
}

// verifyApprovalTie runs `toolgate evidence verify` on the request that
// asked for approval apr, the one that waited on it and the one that used
// it: each is clean, signed, and names the approval and its tie.
func verifyApprovalTie(t *testing.T, dir, apr, heldID, waitID, ranID string) {
	t.Helper()
	pub, stderr, code := runTool(t, dir, "evidence", "pubkey", "--config", "toolgate.yaml")
	if code != exitOK {
		t.Fatalf("pubkey: exit %d %s", code, stderr)
	}
	mcpMust(t, os.WriteFile(filepath.Join(dir, "gateway.pub"), []byte(pub), 0o600))
	for _, id := range []string{ranID, heldID, waitID} {
		out, stderr, code := runTool(t, dir, "evidence", "verify", "--evidence", "file://./evidence", "--pubkey", "gateway.pub", "--json", id)
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
		switch {
		case len(rep.Problems) > 0 || a.ApprovalID != apr || a.Signature != "valid" || a.State != "consumed" || a.UsedBy != ranID:
			t.Errorf("verify %s: %s", id, line)
		case id == waitID && (rep.Status != "not-dispatched" || a.GrantedFor != heldID):
			t.Errorf("verify %s does not show the approval it waited on: %s", id, line)
		case id != waitID && rep.Status != "ok":
			t.Errorf("verify %s: %s", id, line)
		case id == ranID && a.GrantedFor != heldID:
			t.Errorf("verify %s does not name the request the approval was granted for: %s", id, line)
		}
	}
}

// frameworkCall runs drive.mjs of mcpFrameworksDir with CLIENT=which, as
// the agent, for one call, and returns what the framework handed back.
func frameworkCall(which string) func(t *testing.T, url, tool string, args map[string]any) noMetaAnswer {
	return func(t *testing.T, url, tool string, args map[string]any) noMetaAnswer {
		t.Helper()
		script, err := json.Marshal(map[string]any{"calls": []any{map[string]any{"name": tool, "arguments": args}}})
		mcpMust(t, err)
		stdout := runDriver(t, mcpFrameworksDir, script, "CLIENT="+which, "TOOLGATE_URL="+url, "TOOLGATE_KEY="+mcpDoorAgentKey)
		var out struct {
			ProtocolVersion string         `json:"protocolVersion"`
			Calls           []noMetaAnswer `json:"calls"`
		}
		if err := json.Unmarshal(stdout, &out); err != nil || len(out.Calls) != 1 {
			t.Fatalf("the %s client's answer: %v\n%s", which, err, stdout)
		}
		t.Logf("the %s client negotiated MCP %s", which, out.ProtocolVersion)
		return out.Calls[0]
	}
}

// runDriver runs `node drive.mjs` in dir with script on stdin and env
// added, and returns its standard output.
func runDriver(t *testing.T, dir string, script []byte, env ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "drive.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node drive.mjs in %s: %v\n%s%s", dir, err, stdout.String(), stderr.String())
	}
	return bytes.TrimSpace(stdout.Bytes())
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
	script, err := json.Marshal(map[string]any{"steps": []any{map[string]any{"op": "call", "name": name, "arguments": args}}})
	mcpMust(t, err)
	stdout := runDriver(t, mcpSDKDir, script, "TOOLGATE_URL="+url, "TOOLGATE_KEY="+mcpDoorAgentKey)
	var out struct {
		Steps []struct {
			Result *sdkNoMetaResult `json:"result"`
			Error  any              `json:"error"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(stdout, &out); err != nil || len(out.Steps) != 1 || out.Steps[0].Result == nil {
		t.Fatalf("the client's answer: %v\n%s", err, stdout)
	}
	return *out.Steps[0].Result
}

// mcpRequestIDs lists the request folders of dir's evidence.
func mcpRequestIDs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "evidence", "requests"))
	if os.IsNotExist(err) {
		return nil
	}
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
