package mcpdoor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolgate/toolgate/internal/syncbuf"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestListIsThePolicyFilteredCatalog(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, legacy := range []bool{false, true} {
		cs := e.connect(clientOptions{key: agentKey, legacy: legacy})
		want := "2026-07-28"
		if legacy {
			want = legacyVersion
		}
		if got := cs.InitializeResult().ProtocolVersion; got != want {
			t.Fatalf("negotiated %s, want %s", got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		must(t, err)
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		// held is listed: policy may allow it (after an approval);
		// hidden is denied to everyone; bad:id is no MCP name.
		if want := []string{"echo", "held", "workspace.readFile"}; !slices.Equal(names, want) {
			t.Errorf("%s client: tools/list = %v, want %v", want, names, want)
		}
	}
}

func TestAllowedCallReturnsOutputAndEvidence(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", map[string]any{"text": "hello"}, mcp.Meta{MetaIdempotencyKey: "allowed-1"})
	if res.IsError || text(res) != "hello" {
		t.Fatalf("result: isError %v, text %q", res.IsError, text(res))
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["length"] != float64(5) {
		t.Errorf("structuredContent = %v, want the driver's data", res.StructuredContent)
	}
	if got := res.Meta[MetaRequestID]; got != "allowed-1" {
		t.Errorf("_meta requestId = %v", got)
	}
	refs, _ := res.Meta[MetaEvidenceRefs].([]any)
	if !slices.Contains(refs, any("requests/allowed-1/manifest.json")) {
		t.Errorf("_meta evidenceRefs = %v, want the manifest among them", refs)
	}
	if rj := e.requestJSON("allowed-1"); rj["front_door"] != Name || rj["caller"] != "agent" {
		t.Errorf("request.json: front_door %v caller %v", rj["front_door"], rj["caller"])
	}
	if n := e.driver.runs.Load(); n != 1 {
		t.Errorf("the driver ran %d times, want 1", n)
	}
}

func TestIdentityOfATokenReachesListAndCall(t *testing.T) {
	e := newTestEnv(t, nil)
	if _, ok := e.listed(clientOptions{key: agentKey})["opsonly"]; ok {
		t.Fatal("agent, not in ops, sees opsonly")
	}
	if _, ok := e.listed(clientOptions{key: carolToken})["opsonly"]; !ok {
		t.Fatal("carol's token puts her in ops, but opsonly is not listed to her")
	}
	res := call(t, e.connect(clientOptions{key: carolToken}), "opsonly", map[string]any{"text": "ops"}, mcp.Meta{MetaIdempotencyKey: "carol-1"})
	if res.IsError || text(res) != "ops" {
		t.Fatalf("carol's call: isError %v, text %q", res.IsError, text(res))
	}
	rj := e.requestJSON("carol-1")
	auth, _ := rj["auth"].(map[string]any)
	if rj["caller"] != "carol" || auth["method"] != "oauth" || auth["subject"] != "carol" {
		t.Errorf("request.json caller %v auth %v", rj["caller"], rj["auth"])
	}
}

func TestListPolicyRefFromMeta(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, tc := range []struct {
		name  string
		ref   any
		ok    bool
		tools int
	}{
		{"the default set by name lists its tools", "policy.default", true, 3},
		{"a set that does not exist lists nothing, as ListTools does", "policy.nope", true, 0},
		{"a ref that is no string is refused", 5, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A session of its own: the client caches lists by cursor.
			cs := e.connect(clientOptions{key: agentKey})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Meta: mcp.Meta{MetaPolicyRef: tc.ref}})
			var rpc *jsonrpc.Error
			switch {
			case tc.ok && (err != nil || len(res.Tools) != tc.tools):
				t.Errorf("err %v, tools %v", err, res)
			case !tc.ok && (!errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams):
				t.Errorf("err %v, want -32602", err)
			}
		})
	}
}

func TestTheSDKsPerRequestChatterStaysOutOfTheLog(t *testing.T) {
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sdk := sdkLogger(log)
	sdk.Info("server session connected")
	sdk.With("k", "v").WithGroup("g").Info("server session disconnected")
	sdk.Warn("AddTool: invalid tool name")
	if out := buf.String(); strings.Contains(out, "session") || !strings.Contains(out, "invalid tool name") {
		t.Errorf("log %q: want the warning only", out)
	}
}

func TestCallsAnswerWithJSONAndListensWithAnEventStream(t *testing.T) {
	e := newTestEnv(t, nil)
	req, err := http.NewRequest(http.MethodPost, e.url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"json"}}}`))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+agentKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", legacyVersion)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || !strings.Contains(string(body), `"text":"json"`) {
		t.Errorf("tools/call answered %s: %s", ct, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lreq, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, strings.NewReader(
		`{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	must(t, err)
	lreq.Header = req.Header.Clone()
	lreq.Header.Set("MCP-Protocol-Version", "2026-07-28")
	lreq.Header.Set("Mcp-Method", "subscriptions/listen")
	lresp, err := http.DefaultClient.Do(lreq)
	must(t, err)
	defer lresp.Body.Close()
	if ct := lresp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("subscriptions/listen answered %s", ct)
	}
}
