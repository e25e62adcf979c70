package mcpdoor

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestRequestsWithoutAValidKeyAreRefusedBeforeTheSDK(t *testing.T) {
	e := newTestEnv(t, nil)
	const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"},` +
		`"_meta":{"io.github.toolgate/idempotencyKey":"unauth"}}}`
	for _, tc := range []struct{ name, auth string }{
		{"no key", ""},
		{"an unknown key", "Bearer not-a-key"},
		{"another scheme", "Basic " + agentKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, e.url, strings.NewReader(body))
			must(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", legacyVersion)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Fatalf("status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			var msg struct {
				JSONRPC string `json:"jsonrpc"`
				ID      any    `json:"id"`
				Error   struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &msg); err != nil || msg.JSONRPC != "2.0" || msg.ID != nil || msg.Error.Code != -32001 {
				t.Errorf("body %s: want a JSON-RPC error -32001 with id null", raw)
			}
		})
	}
	if e.requestJSON("unauth") != nil || e.driver.runs.Load() != 0 {
		t.Error("an unauthenticated call was recorded or run")
	}
}

func TestKeyInThePathAuthenticates(t *testing.T) {
	e := newTestEnv(t, nil)
	e.url = strings.Replace(e.url, Path, "/k/"+agentKey+Path, 1)
	cs := e.connect(clientOptions{key: ""})
	res := call(t, cs, "echo", map[string]any{"text": "via path"}, nil)
	if res.IsError || text(res) != "via path" {
		t.Errorf("isError %v, text %q", res.IsError, text(res))
	}
}
