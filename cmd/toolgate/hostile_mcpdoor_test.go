package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The MCP front door's attacks, over the wire against the real binary: the
// door on its own loopback port, two callers with keys, the workspace
// driver, and a policy that lets anyone read files but not the secrets,
// and holds every delete for a reviewer of group ops (neither caller is).

const (
	mcpDoorAgentKey = "k-mcp-agent-0123456789abcdef"
	mcpDoorBobKey   = "k-mcp-bob-0123456789abcdef01"
	// mcpOrigin is the one browser origin the door lets through.
	mcpOrigin = "https://app.example"
	// mcpIdemKey is the _meta key whose value is the call's request id.
	mcpIdemKey = "io.github.toolgate/idempotencyKey"
)

const mcpDoorPolicy = `
@id("read_files") @reason("reading a workspace file changes nothing")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");

@id("no_secrets") @reason("the secrets folder is off limits")
forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secrets/*" };

@id("delete_needs_ops") @approval("ops") @reason("deleting a file needs a reviewer")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.deleteFile");

@id("ops_approve_delete")
permit (principal, action == Action::"Approve", resource == Tool::"workspace.deleteFile")
when { principal.groups.contains(context.group) };
`

// mcpDoor is a running `toolgate serve` with the MCP door on.
type mcpDoor struct {
	url string // the endpoint, http://127.0.0.1:PORT/mcp
	srv *server
}

// mcpDoorServer starts the binary with the MCP door on 127.0.0.1:0 (its
// port read from the log) and a workspace holding notes.txt and
// secrets/key.txt.
func mcpDoorServer(t *testing.T) *mcpDoor {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, mcpDoorPolicy)
	cfg := `
listen: 127.0.0.1:0
auth:
  keys:
    - {caller: agent, env: TG_MCP_AGENT}
    - {caller: bob, env: TG_MCP_BOB}
evidence: {url: file://./evidence}
drivers:
  workspace: {type: workspace, root: ./ws}
front_doors:
  mcp: {listen: 127.0.0.1:0, cors_origins: ["` + mcpOrigin + `"]}
`
	for name, text := range map[string]string{
		"toolgate.yaml":      cfg,
		"ws/notes.txt":       "hello from the workspace\n",
		"ws/secrets/key.txt": "sk-do-not-leak\n",
		"ws/docs/readme.md":  "# docs\n",
	} {
		mcpMust(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700))
		mcpMust(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	srv := startServerEnv(t, dir, []string{"TG_MCP_AGENT=" + mcpDoorAgentKey, "TG_MCP_BOB=" + mcpDoorBobKey}, "--config", "toolgate.yaml")
	return &mcpDoor{url: srv.doorURL(t, "mcp") + "/mcp", srv: srv}
}

// requests lists the request ids recorded in the evidence folder.
func (d *mcpDoor) requests(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.srv.dir, "evidence", "requests"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// mcpAnswer is one HTTP answer of the door; msg is the JSON-RPC message it
// carried (from a JSON body or the SSE stream), nil when there was none.
type mcpAnswer struct {
	status int
	header http.Header
	raw    string
	msg    map[string]any
}

// result is the JSON-RPC result, or nil.
func (a mcpAnswer) result() map[string]any {
	r, _ := a.msg["result"].(map[string]any)
	return r
}

// text joins the text content of a tools/call result.
func (a mcpAnswer) text() string {
	var parts []string
	content, _ := a.result()["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			parts = append(parts, fmt.Sprint(m["text"]))
		}
	}
	return strings.Join(parts, "\n")
}

// isError reports the result's isError.
func (a mcpAnswer) isError() bool { return a.result()["isError"] == true }

// mcpPost sends body to url with the headers a Streamable HTTP client
// always sends, then header (an empty value removes one).
func mcpPost(t *testing.T, url string, header map[string]string, body string) mcpAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	mcpMust(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	mcpMust(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	mcpMust(t, err)
	a := mcpAnswer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	a.msg = decodeMCPMessage(resp.Header.Get("Content-Type"), raw)
	return a
}

// decodeMCPMessage finds the JSON-RPC response in a JSON body or in the
// data lines of an SSE stream.
func decodeMCPMessage(contentType string, raw []byte) map[string]any {
	var lines []string
	if strings.HasPrefix(contentType, "text/event-stream") {
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				lines = append(lines, strings.TrimSpace(data))
			}
		}
	} else {
		lines = []string{string(raw)}
	}
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && (m["result"] != nil || m["error"] != nil) {
			return m
		}
	}
	return nil
}

// mcp2026 is the header set of a 2026-07-28 request for method and name
// (empty: no Mcp-Name), with the caller's key.
func mcp2026(key, method, name string) map[string]string {
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	return h
}

// mcpCallBody is a 2026-07-28 tools/call body: the required _meta keys,
// then extra.
func mcpCallBody(tool string, args any, extra map[string]any) string {
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	maps.Copy(meta, extra)
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args, "_meta": meta}})
	return string(b)
}

// mcpCall calls tool as caller key over 2026-07-28.
func mcpCall(t *testing.T, d *mcpDoor, key, tool string, args any, meta map[string]any) mcpAnswer {
	t.Helper()
	return mcpPost(t, d.url, mcp2026(key, "tools/call", tool), mcpCallBody(tool, args, meta))
}

func mcpMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostileMCPDoorKeys: without a valid key the door answers 401 before
// anything is decoded, nothing runs and nothing is recorded.
func TestHostileMCPDoorKeys(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	body := mcpCallBody("workspace.readFile", map[string]any{"path": "notes.txt"}, nil)
	for _, tc := range []struct {
		name string
		auth string
	}{
		{"no key at all", ""},
		{"a wrong bearer key", "Bearer not-the-key-0123456789"},
		{"another scheme", "Basic " + mcpDoorAgentKey},
		{"the key's prefix only", "Bearer " + mcpDoorAgentKey[:12]},
		{"a JWT-shaped token no issuer signed", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZ2VudCJ9."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mcp2026("", "tools/call", "workspace.readFile")
			h["Authorization"] = tc.auth
			a := mcpPost(t, d.url, h, body)
			if a.status != http.StatusUnauthorized {
				t.Fatalf("got %d %s, want 401", a.status, a.raw)
			}
			if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("WWW-Authenticate = %q, want a Bearer challenge", a.header.Get("WWW-Authenticate"))
			}
		})
	}
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("unauthenticated calls were recorded: %v", got)
	}
	if a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, nil); a.status != http.StatusOK || a.isError() {
		t.Fatalf("the right key: %d %s", a.status, a.raw)
	}
}

// TestHostileMCPDoorOrigins: a web page on an origin the door does not
// list cannot call it with the browser's help, even with a valid key.
func TestHostileMCPDoorOrigins(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	for _, origin := range []string{"https://evil.example", "null", "https://app.example.evil.example", "http://app.example"} {
		t.Run("origin "+origin, func(t *testing.T) {
			h := mcp2026(mcpDoorAgentKey, "tools/call", "workspace.readFile")
			h["Origin"] = origin
			a := mcpPost(t, d.url, h, mcpCallBody("workspace.readFile", map[string]any{"path": "notes.txt"}, nil))
			if a.status != http.StatusForbidden || a.header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("got %d (ACAO %q) %s, want 403", a.status, a.header.Get("Access-Control-Allow-Origin"), a.raw)
			}
		})
	}
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("calls from refused origins were recorded: %v", got)
	}
	h := mcp2026(mcpDoorAgentKey, "tools/call", "workspace.readFile")
	h["Origin"] = mcpOrigin
	a := mcpPost(t, d.url, h, mcpCallBody("workspace.readFile", map[string]any{"path": "notes.txt"}, nil))
	if a.status != http.StatusOK || a.header.Get("Access-Control-Allow-Origin") != mcpOrigin {
		t.Fatalf("the listed origin: %d (ACAO %q) %s", a.status, a.header.Get("Access-Control-Allow-Origin"), a.raw)
	}
}

// TestHostileMCPDoorSizes: what is too big is refused before it is
// decoded, and what is big but allowed is not copied into the evidence.
func TestHostileMCPDoorSizes(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	t.Run("a 5 MiB body is 413 before it is decoded", func(t *testing.T) {
		// Not JSON at all: a door that decoded before checking the size
		// would answer 400 "malformed", not 413.
		body := strings.Repeat("x", 5<<20)
		a := mcpPost(t, d.url, mcp2026(mcpDoorAgentKey, "tools/call", "workspace.readFile"), body)
		if a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("got %d %.200s, want 413", a.status, a.raw)
		}
	})
	t.Run("a 5 MiB call is 413 and does not run", func(t *testing.T) {
		args := map[string]any{"path": "notes.txt", "pad": strings.Repeat("a", 5<<20)}
		a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", args, map[string]any{mcpIdemKey: "big-body"})
		if a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("got %d %.200s, want 413", a.status, a.raw)
		}
	})
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("oversized calls were recorded: %v", got)
	}
	for _, tc := range []struct {
		name, id string
		meta     map[string]any
	}{
		{"3 MiB under an unknown _meta key", "huge-meta-value", map[string]any{"example.com/junk": strings.Repeat("J", 3<<20)}},
		{"100,000 unknown _meta keys", "huge-meta-keys", manyKeys(100_000)},
	} {
		t.Run(tc.name+" is 413 before it is decoded, and not recorded", func(t *testing.T) {
			tc.meta[mcpIdemKey] = tc.id
			a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, tc.meta)
			if a.status != http.StatusRequestEntityTooLarge {
				t.Fatalf("got %d %.300s, want 413", a.status, a.raw)
			}
		})
	}
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("oversized _meta was recorded: %v", got)
	}
	junk := strings.Repeat("J", 32<<10)
	for _, tc := range []struct {
		name, id string
		meta     map[string]any
	}{
		{"32 KiB under an unknown _meta key", "big-meta-value", map[string]any{"example.com/junk": junk}},
		{"1,000 unknown _meta keys", "big-meta-keys", manyKeys(1_000)},
		{"a 32 KiB traceparent", "big-traceparent", map[string]any{"traceparent": "00-" + junk}},
	} {
		t.Run(tc.name+" is ignored and not recorded", func(t *testing.T) {
			start := time.Now()
			tc.meta[mcpIdemKey] = tc.id
			a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, tc.meta)
			if a.status != http.StatusOK || a.isError() || !strings.Contains(a.text(), "hello from the workspace") {
				t.Fatalf("got %d %.300s", a.status, a.raw)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("the call took %v", took)
			}
			req, err := os.ReadFile(filepath.Join(d.srv.dir, "evidence", "requests", tc.id, "request.json"))
			mcpMust(t, err)
			if strings.Contains(string(req), "JJJJ") || strings.Contains(string(req), "example.com/k") || strings.Contains(string(req), "trace_id") {
				t.Fatalf("request.json holds the junk _meta (%d bytes): %.300s", len(req), req)
			}
		})
	}
}

// manyKeys is a _meta of n unknown keys.
func manyKeys(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("example.com/k%d", i)] = i
	}
	return m
}

// TestHostileMCPDoorProtocol: requests that do not follow the transport's
// rules, or name a tool no catalog has, are refused and nothing runs.
func TestHostileMCPDoorProtocol(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	call := mcpCallBody("workspace.readFile", map[string]any{"path": "notes.txt"}, nil)
	secret := mcpCallBody("workspace.readFile", map[string]any{"path": "secrets/key.txt"}, nil)
	longName := strings.Repeat("t", 10<<10)
	legacyCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"workspace.readFile","arguments":{"path":"notes.txt"}}}`
	// The JSON-RPC error codes of the answers: invalid request (the door
	// serves no batch, whatever version the client names), the
	// specification's header mismatch, and invalid params (unknown tool).
	const headerMismatch, invalidParams, invalidRequest = -32020, -32602, -32600
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		code   int
	}{
		{"a JSON-RPC batch of two calls (2026-07-28)", mcp2026(mcpDoorAgentKey, "tools/call", "workspace.readFile"),
			"[" + call + "," + call + "]", invalidRequest},
		{"a JSON-RPC batch of two calls (2025-11-25)", legacyHeader(mcpDoorAgentKey, "2025-11-25"),
			"[" + strings.Replace(call, `"id":1`, `"id":2`, 1) + "," + call + "]", invalidRequest},
		{"a JSON-RPC batch of two calls (2025-03-26)", legacyHeader(mcpDoorAgentKey, "2025-03-26"),
			"[" + strings.Replace(legacyCall, `"id":1`, `"id":2`, 1) + "," + legacyCall + "]", invalidRequest},
		{"a JSON-RPC batch of two calls, no version header", map[string]string{"Authorization": "Bearer " + mcpDoorAgentKey},
			"[" + strings.Replace(legacyCall, `"id":1`, `"id":2`, 1) + "," + legacyCall + "]", invalidRequest},
		{"an Mcp-Name header naming another tool than the body", mcp2026(mcpDoorAgentKey, "tools/call", "workspace.createFile"),
			secret, headerMismatch},
		{"Mcp-Method saying tools/list for a tools/call", mcp2026(mcpDoorAgentKey, "tools/list", ""),
			call, headerMismatch},
		{"no Mcp-Name on a 2026-07-28 tools/call", mcp2026(mcpDoorAgentKey, "tools/call", ""),
			call, headerMismatch},
		{"a 2026-07-28 _meta without the MCP-Protocol-Version header", map[string]string{"Authorization": "Bearer " + mcpDoorAgentKey},
			call, headerMismatch},
		{"a 10 KB tool name", mcp2026(mcpDoorAgentKey, "tools/call", longName),
			mcpCallBody(longName, map[string]any{"path": "notes.txt"}, nil), invalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mcpPost(t, d.url, tc.header, tc.body)
			e, _ := a.msg["error"].(map[string]any)
			code, _ := e["code"].(float64)
			if a.status != http.StatusBadRequest || a.result() != nil || int(code) != tc.code {
				t.Fatalf("got %d %.300s, want 400 with JSON-RPC error %d", a.status, a.raw, tc.code)
			}
		})
	}
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("refused requests were recorded: %v", got)
	}
}

// legacyHeader is the header set of a client that negotiated version.
func legacyHeader(key, version string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key, "MCP-Protocol-Version": version}
}

// TestHostileMCPDoorRequestIDs: the idempotency key becomes the
// request id, so one that is not a valid request id is refused as a tool
// error before anything is recorded, and another caller's key never
// replays that caller's result.
func TestHostileMCPDoorRequestIDs(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	for _, tc := range []struct {
		name string
		key  any
	}{
		{"a key that climbs out of the requests folder", "../../etc/passwd"},
		{"a key with a slash", "a/b"},
		{"a 10 KB key", strings.Repeat("k", 10<<10)},
		{"a key with a newline", "key\nx"},
		{"a key that is a number", 42},
		{"a key that is an object", map[string]any{"id": "x"}},
		{"an empty key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, map[string]any{mcpIdemKey: tc.key})
			if a.status != http.StatusOK || !a.isError() || strings.Contains(a.text(), "hello from the workspace") {
				t.Fatalf("got %d %.300s, want an isError result that did not run", a.status, a.raw)
			}
		})
	}
	if got := d.requests(t); len(got) != 0 {
		t.Fatalf("calls with bad keys were recorded: %v", got)
	}
	t.Run("another caller's key does not replay its result", func(t *testing.T) {
		meta := map[string]any{mcpIdemKey: "agent-read-1"}
		if a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, meta); a.isError() {
			t.Fatalf("agent's call: %.300s", a.raw)
		}
		a := mcpCall(t, d, mcpDoorBobKey, "workspace.readFile", map[string]any{"path": "notes.txt"}, meta)
		if a.status != http.StatusOK || !a.isError() || strings.Contains(a.raw, "hello from the workspace") {
			t.Fatalf("bob reusing agent's key got %d %.300s", a.status, a.raw)
		}
	})
}

// mcpRetry is a 2026-07-28 retry of tools/call with a requestState and
// input responses, from a client that declared form elicitation.
func mcpRetry(tool string, args map[string]any, state string, responses map[string]any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{
		"name": tool, "arguments": args, "requestState": state, "inputResponses": responses,
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}},
		}}})
	return string(b)
}

// TestHostileMCPDoorApprovalState: a held call's requestState is sealed
// and bound to its caller, tool and arguments, and answering the
// elicitation is never an approval: none of these runs the delete.
func TestHostileMCPDoorApprovalState(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	del := map[string]any{"path": "notes.txt"}
	elicit := map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}
	first := mcpCall(t, d, mcpDoorAgentKey, "workspace.deleteFile", del, map[string]any{"io.modelcontextprotocol/clientCapabilities": elicit})
	state, _ := first.result()["requestState"].(string)
	if first.result()["resultType"] != "input_required" || state == "" {
		t.Fatalf("a held delete from a client with elicitation: %s", first.raw)
	}
	accept := map[string]any{"toolgate_approval": map[string]any{"action": "accept", "content": map[string]any{}}}
	tampered := []byte(state)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name, key, tool, state string
		args                   map[string]any
		inputRequired          bool
	}{
		{"the caller accepting its own elicitation", mcpDoorAgentKey, "workspace.deleteFile", state, del, true},
		{"another caller retrying with the caller's state", mcpDoorBobKey, "workspace.deleteFile", state, del, false},
		{"the state with one bit flipped", mcpDoorAgentKey, "workspace.deleteFile", string(tampered), del, false},
		{"the state with other arguments", mcpDoorAgentKey, "workspace.deleteFile", state, map[string]any{"path": "docs/readme.md"}, false},
		{"the state for another tool", mcpDoorAgentKey, "workspace.readFile", state, map[string]any{"path": "notes.txt"}, false},
		{"a 100 KB state", mcpDoorAgentKey, "workspace.deleteFile", strings.Repeat("A", 100<<10), del, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mcpPost(t, d.url, mcp2026(tc.key, "tools/call", tc.tool), mcpRetry(tc.tool, tc.args, tc.state, accept))
			if a.status != http.StatusOK {
				t.Fatalf("got %d %s", a.status, a.raw)
			}
			if got := a.result()["resultType"] == "input_required"; got != tc.inputRequired || !got && !a.isError() {
				t.Fatalf("got %s, want input_required %t or a tool error", a.raw, tc.inputRequired)
			}
			for _, f := range []string{"notes.txt", "docs/readme.md"} {
				if _, err := os.Stat(filepath.Join(d.srv.dir, "ws", f)); err != nil {
					t.Fatalf("%s is gone: %v", f, err)
				}
			}
		})
	}
}
