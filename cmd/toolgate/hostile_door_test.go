package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP front door's attacks on approvals, idempotency keys and listen
// streams, over the wire against the real binary: the door on, two
// callers (agent asks, reviewer of group ops approves), and a policy that
// holds workspace.createFile for ops.

const (
	mcpAgentKey    = "mcp-agent-key-0123456789"
	mcpReviewerKey = "mcp-reviewer-key-0123456789"
)

// mcpDoorDeployment is a gateway serving the MCP door.
type mcpDoorDeployment struct {
	dir string
	url string
}

func startMCPDoor(t *testing.T) *mcpDoorDeployment {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, heldCreatePolicy+`
@id("read") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");`)
	cfg := `auth:
  keys:
    - {caller: agent, env: KEY_AGENT}
    - {caller: reviewer, env: KEY_REVIEWER, groups: [ops]}
evidence: {url: file://./audit}
drivers: {workspace: {type: workspace, root: ./ws}}
front_doors:
  mcp: {listen: 127.0.0.1:0, approval_tools: true}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"KEY_AGENT=" + mcpAgentKey, "KEY_REVIEWER=" + mcpReviewerKey}, "--config", "toolgate.yaml")
	d := &mcpDoorDeployment{dir: dir, url: srv.doorURL(t, "mcp") + "/mcp"}
	waitListening(t, d.url)
	return d
}

// mcpKey sets a bearer key on every request.
type mcpKey string

func (k mcpKey) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// session connects a Go SDK client as the holder of key. acceptAll makes
// it answer every elicitation "accept"; raw hands input-required results
// to the test instead of retrying.
func (d *mcpDoorDeployment) session(t *testing.T, key string, acceptAll, raw bool) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if acceptAll {
		opts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		}
	}
	if raw {
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "hostile", Version: "1"}, opts).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: d.url, HTTPClient: &http.Client{Transport: mcpKey(key)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callMCP calls a tool; a protocol error is returned, not fatal.
func callMCP(t *testing.T, cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cs.CallTool(ctx, p)
}

// resultText joins a result's text content.
func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exists reports whether the workspace holds name.
func (d *mcpDoorDeployment) exists(name string) bool {
	_, err := os.Stat(filepath.Join(d.dir, "ws", name))
	return err == nil
}

// heldCall asks for a held createFile with MRTR off and returns the
// input-required result.
func (d *mcpDoorDeployment) heldCall(t *testing.T, cs *mcp.ClientSession, name string) *mcp.CallToolResult {
	t.Helper()
	res, err := callMCP(t, cs, &mcp.CallToolParams{Name: "workspace.createFile",
		Arguments: map[string]any{"path": name, "content": "held"}})
	if err != nil || !res.NeedsInput() || res.RequestState == "" {
		t.Fatalf("a held call: %v / %+v, want input_required with a state", err, res)
	}
	return res
}

// approve decides the result's approval as the reviewer, through the
// door's approval tool.
func (d *mcpDoorDeployment) approve(t *testing.T, held *mcp.CallToolResult) {
	t.Helper()
	a, _ := held.Meta["io.github.toolgate/approval"].(map[string]any)
	res, err := callMCP(t, d.session(t, mcpReviewerKey, false, false), &mcp.CallToolParams{
		Name: "toolgate.approvals.decide", Arguments: map[string]any{"approvalId": a["approvalId"], "decision": "approve"}})
	if err != nil || res.IsError {
		t.Fatalf("the reviewer's approval: %v / %q", err, resultText(res))
	}
}

func TestHostileMCPDoorApprovalBypass(t *testing.T) {
	t.Parallel()
	d := startMCPDoor(t)
	t.Run("an elicitation answered accept does not approve the held call", func(t *testing.T) {
		cs := d.session(t, mcpAgentKey, true, false)
		res, err := callMCP(t, cs, &mcp.CallToolParams{Name: "workspace.createFile",
			Arguments: map[string]any{"path": "self.txt", "content": "self-approved"}})
		if err == nil && !res.NeedsInput() && !res.IsError {
			t.Errorf("the call completed: %q", resultText(res))
		}
		if d.exists("self.txt") {
			t.Fatal("the file was written on the client's own accept")
		}
	})
	t.Run("a forged requestState runs nothing", func(t *testing.T) {
		cs := d.session(t, mcpAgentKey, false, true)
		payload := base64.RawURLEncoding.EncodeToString([]byte(
			`{"rid":"forged-1","tool":"workspace.createFile","caller":"agent","hash":"x","aid":"apr_x","exp":9999999999}`))
		forged := "v1." + payload + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
		res, err := callMCP(t, cs, &mcp.CallToolParams{Name: "workspace.createFile", RequestState: forged,
			Arguments: map[string]any{"path": "forged.txt", "content": "x"}})
		if err != nil || !res.IsError || !strings.Contains(resultText(res), "approval state is invalid") {
			t.Errorf("a forged state: %v / %q", err, resultText(res))
		}
		if d.exists("forged.txt") {
			t.Fatal("a forged state wrote the file")
		}
		if _, err := os.Stat(filepath.Join(d.dir, "audit", "requests", "forged-1")); err == nil {
			t.Error("a forged state's request id was recorded")
		}
	})
	t.Run("an approved state replayed with other arguments runs nothing", func(t *testing.T) {
		cs := d.session(t, mcpAgentKey, true, true)
		held := d.heldCall(t, cs, "approved.txt")
		d.approve(t, held)
		res, err := callMCP(t, cs, &mcp.CallToolParams{Name: "workspace.createFile", RequestState: held.RequestState,
			Arguments: map[string]any{"path": "smuggled.txt", "content": "other"}})
		if err != nil || !res.IsError || d.exists("smuggled.txt") {
			t.Fatalf("other arguments under an approved state: %v / %q, file written %v", err, resultText(res), d.exists("smuggled.txt"))
		}
		res, err = callMCP(t, cs, &mcp.CallToolParams{Name: "workspace.createFile", RequestState: held.RequestState,
			Arguments: map[string]any{"path": "approved.txt", "content": "held"}})
		if err != nil || res.IsError || !d.exists("approved.txt") {
			t.Errorf("the approved call itself: %v / %q", err, resultText(res))
		}
	})
}

func TestHostileMCPDoorIdempotencyKeys(t *testing.T) {
	t.Parallel()
	d := startMCPDoor(t)
	agent := d.session(t, mcpAgentKey, false, false)
	t.Run("a key that climbs out of the evidence prefix records nothing", func(t *testing.T) {
		res, err := callMCP(t, agent, &mcp.CallToolParams{Name: "workspace.readFile", Arguments: map[string]any{"path": "a.txt"},
			Meta: mcp.Meta{"io.github.toolgate/idempotencyKey": "../../escape"}})
		if err != nil || !res.IsError {
			t.Fatalf("%v / %+v", err, res)
		}
		if _, err := os.Stat(filepath.Join(d.dir, "escape")); err == nil {
			t.Error("something was written outside the evidence prefix")
		}
	})
	t.Run("another caller's key replays nothing of its answer", func(t *testing.T) {
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(d.dir, "ws"), 0o750))
		must(os.WriteFile(filepath.Join(d.dir, "ws", "private.txt"), []byte("agent's secret notes"), 0o600))
		key := mcp.Meta{"io.github.toolgate/idempotencyKey": "shared-key-1"}
		own, err := callMCP(t, agent, &mcp.CallToolParams{Name: "workspace.readFile", Arguments: map[string]any{"path": "private.txt"}, Meta: key})
		if err != nil || own.IsError {
			t.Fatalf("agent's read: %v / %q", err, resultText(own))
		}
		other, err := callMCP(t, d.session(t, mcpReviewerKey, false, false), &mcp.CallToolParams{Name: "workspace.readFile",
			Arguments: map[string]any{"path": "private.txt"}, Meta: key})
		if err != nil || !other.IsError || strings.Contains(resultText(other), "secret notes") {
			t.Errorf("another caller's retry under the key: %v / %q", err, resultText(other))
		}
	})
}

func TestHostileMCPDoorListenFlood(t *testing.T) {
	t.Parallel()
	d := startMCPDoor(t)
	listen := func(ctx context.Context) (*http.Response, error) {
		body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
			`"io.modelcontextprotocol/clientInfo":{"name":"flood","version":"1"}}}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+mcpAgentKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "subscriptions/listen")
		return http.DefaultClient.Do(req)
	}
	t.Run("a caller cannot hold more than four listen streams", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := range 4 {
			resp, err := listen(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// The acknowledgement shows the stream is open.
			buf := make([]byte, 512)
			if n, _ := resp.Body.Read(buf); !strings.Contains(string(buf[:n]), "acknowledged") {
				t.Fatalf("stream %d: %q", i, buf[:n])
			}
		}
		fifth, cancel5 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel5()
		resp, err := listen(fifth)
		if err != nil {
			t.Fatalf("the fifth stream was not answered: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var msg struct {
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lastData(string(b))), "data:"))), &msg)
		if msg.Error.Code != -32011 {
			t.Errorf("the fifth stream was answered %q, want error -32011", b)
		}
	})
}

// lastData is the last "data:" line of an event stream, or s.
func lastData(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "data:") {
			return lines[i]
		}
	}
	return s
}
