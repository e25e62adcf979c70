package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMCPDoorWalkthrough follows the README's walkthrough of the MCP door
// with net/http, as curl does it: the real binary, 2026-07-28 requests
// with their headers and _meta, and the evidence checked on disk.
func TestMCPDoorWalkthrough(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)

	t.Run("server/discover lists the protocol versions", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{` +
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		a := mcpPost(t, d.url, mcp2026(mcpDoorAgentKey, "server/discover", ""), body)
		versions, _ := a.result()["supportedVersions"].([]any)
		for _, v := range []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"} {
			if !slices.Contains(versions, any(v)) {
				t.Fatalf("%s is not supported: %d %s", v, a.status, a.raw)
			}
		}
	})

	t.Run("tools/list is what policy lets this caller run", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{` +
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		a := mcpPost(t, d.url, mcp2026(mcpDoorAgentKey, "tools/list", ""), body)
		tools, _ := a.result()["tools"].([]any)
		var names []string
		for _, tool := range tools {
			m, _ := tool.(map[string]any)
			names = append(names, m["name"].(string))
			if schema, _ := m["inputSchema"].(map[string]any); schema["type"] != "object" {
				t.Errorf("%s has no object input schema: %v", m["name"], m["inputSchema"])
			}
		}
		if !slices.Equal(names, []string{"workspace.deleteFile", "workspace.readFile"}) {
			t.Fatalf("tools = %v, want workspace.deleteFile (held for approval) and workspace.readFile (%s)", names, a.raw)
		}
	})

	read := map[string]any{"path": "notes.txt"}
	t.Run("an allowed call returns the file, its evidence refs and the engine", func(t *testing.T) {
		a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", read, map[string]any{mcpIdemKey: "readme-1"})
		if a.status != http.StatusOK || a.isError() || a.text() != "hello from the workspace\n" {
			t.Fatalf("got %d %s", a.status, a.raw)
		}
		meta, _ := a.result()["_meta"].(map[string]any)
		if meta["io.github.toolgate/requestId"] != "readme-1" || !strings.HasPrefix(mcpString(meta["io.github.toolgate/engineRef"]), "toolgate/") {
			t.Fatalf("result _meta = %v", meta)
		}
		refs, _ := meta["io.github.toolgate/evidenceRefs"].([]any)
		if len(refs) < 5 {
			t.Fatalf("evidence refs = %v", refs)
		}
		for _, ref := range refs {
			if _, err := os.Stat(filepath.Join(d.srv.dir, "evidence", ref.(string))); err != nil {
				t.Errorf("evidence ref %s: %v", ref, err)
			}
		}
		req := mcpEvidence(t, d, "readme-1", "request.json")
		if req["front_door"] != "mcp" || req["caller"] != "agent" || req["tool_id"] != "workspace.readFile" {
			t.Fatalf("request.json = %v", req)
		}
	})

	t.Run("the same idempotency key again replays without running", func(t *testing.T) {
		before := len(d.requests(t))
		a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", read, map[string]any{mcpIdemKey: "readme-1"})
		if a.isError() || a.text() != "hello from the workspace\n" || len(d.requests(t)) != before {
			t.Fatalf("replay: %s; request folders %d → %d", a.raw, before, len(d.requests(t)))
		}
	})

	t.Run("arguments a rule forbids are a tool error naming the rule, with evidence", func(t *testing.T) {
		a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "secrets/key.txt"}, map[string]any{mcpIdemKey: "readme-2"})
		if a.status != http.StatusOK || !a.isError() || !strings.Contains(a.text(), "no_secrets") ||
			!strings.Contains(a.text(), "the secrets folder is off limits") || strings.Contains(a.raw, "sk-do-not-leak") {
			t.Fatalf("got %d %s", a.status, a.raw)
		}
		decision := mcpEvidence(t, d, "readme-2", "policy_decision.json")
		if decision["decision"] != "deny" || decision["rule_id"] != "no_secrets" {
			t.Fatalf("policy_decision.json = %v", decision)
		}
		if _, err := os.Stat(filepath.Join(d.srv.dir, "evidence", "requests", "readme-2", "tool_result.json")); err == nil {
			t.Fatal("the denied call has a tool result: it ran")
		}
	})

	t.Run("a 2025-11-25 client is served without a session", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"workspace.readFile",` +
			`"arguments":{"path":"docs/readme.md"},"_meta":{"io.github.toolgate/idempotencyKey":"readme-3"}}}`
		a := mcpPost(t, d.url, legacyHeader(mcpDoorAgentKey, "2025-11-25"), body)
		if a.status != http.StatusOK || a.isError() || a.text() != "# docs\n" {
			t.Fatalf("got %d %s", a.status, a.raw)
		}
	})

	t.Run("a client that takes only a URL sends the key in its path", func(t *testing.T) {
		url := strings.Replace(d.url, "/mcp", "/k/"+mcpDoorAgentKey+"/mcp", 1)
		body := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"workspace.readFile",` +
			`"arguments":{"path":"notes.txt"}}}`
		a := mcpPost(t, url, map[string]string{"MCP-Protocol-Version": "2025-06-18"}, body)
		if a.status != http.StatusOK || a.isError() || a.text() != "hello from the workspace\n" {
			t.Fatalf("got %d %s", a.status, a.raw)
		}
		if strings.Contains(d.srv.log.String(), mcpDoorAgentKey) {
			t.Fatal("the path key is in the server's log")
		}
	})

	t.Run("every request verifies against the gateway's key", func(t *testing.T) {
		pub, stderr, code := runTool(t, d.srv.dir, "evidence", "pubkey", "--config", "toolgate.yaml")
		if code != exitOK {
			t.Fatalf("pubkey: exit %d %s", code, stderr)
		}
		mcpMust(t, os.WriteFile(filepath.Join(d.srv.dir, "gateway.pub"), []byte(pub), 0o600))
		out, stderr, code := runTool(t, d.srv.dir, "evidence", "verify", "--evidence", "file://./evidence", "--pubkey", "gateway.pub", "readme-1")
		if code != exitOK || !strings.HasPrefix(out, "ok readme-1: artifacts match; signed by trusted key") {
			t.Fatalf("verify readme-1: exit %d\n%s%s", code, out, stderr)
		}
	})
}

// mcpEvidence reads one JSON artifact of a request.
func mcpEvidence(t *testing.T, d *mcpDoor, id, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.srv.dir, "evidence", "requests", id, name))
	mcpMust(t, err)
	var m map[string]any
	mcpMust(t, json.Unmarshal(b, &m))
	return m
}

// mcpString is v as a string, or "" when it is not one.
func mcpString(v any) string {
	s, _ := v.(string)
	return s
}
