package tpmjsdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// recordingGateway answers every call as allowed, with the call's
// arguments as output, and keeps the last call it got.
type recordingGateway struct {
	last *gateway.Call
}

func (g *recordingGateway) Run(_ context.Context, _ string, c gateway.Call) (*toolgatev1.RunToolResponse, error) {
	g.last = &c
	data, err := structpb.NewValue(c.Request.GetArgs().AsMap())
	if err != nil {
		return nil, err
	}
	return &toolgatev1.RunToolResponse{
		Ok: true, ToolResult: &toolgatev1.ToolResult{Data: data},
		PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "allow", RuleId: "r", Reason: "fuzz"},
		EvidenceRefs: []string{"requests/" + c.Request.GetRequestId() + "/response.json"},
	}, nil
}

func (g *recordingGateway) ListToolsAs(context.Context, string, *gateway.Identity, *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	return &toolgatev1.ListToolsResponse{}, nil
}

func (g *recordingGateway) Catalog() []gateway.CatalogEntry {
	return []gateway.CatalogEntry{
		{ID: "hello", Driver: "tpmjs", Target: "helloWorldTool", Package: "@tpmjs/hello", Version: "1.2.3", CallerEnv: []string{"API_KEY"}},
		{ID: "workspace.readFile", Driver: "workspace", Target: "readFile"},
	}
}

func (g *recordingGateway) DriverHealth() map[string]drivers.Health { return nil }

// FuzzExecuteBody: whatever the body and Idempotency-Key, the door answers
// one JSON object of the protocol, refuses before calling Run or calls it
// once with a valid request id, the door's name, a tool id, and arguments
// that are params plus _env only when env is not empty; importUrl never
// reaches the call.
func FuzzExecuteBody(f *testing.F) {
	for _, seed := range []struct{ body, key string }{
		{`{"packageName":"@tpmjs/hello","name":"helloWorldTool","version":"1.2.3","importUrl":"https://esm.sh/@tpmjs/hello@1.2.3","params":{"greeting":"Hello"},"env":{}}`, ""},
		{`{"packageName":"@tpmjs/hello","name":"helloWorldTool","params":{"n":12345678901234567890},"env":{"API_KEY":"k"}}`, "retry-1"},
		{`{"packageName":"_catalog","exportName":"workspace.readFile","params":{"path":"a"}}`, ""},
		{`{"packageName":"left-pad","name":"pad","version":"latest","params":null,"env":null}`, "a:b.c-d"},
		{`{"packageName":"p","name":"n","params":{"_env":{"A":"b"}},"env":{"A":"c"}}`, ""},
		{`{"packageName":"p","name":"n"} trailing`, "../x"},
		{`[1,2]`, ""},
		{``, ""},
	} {
		f.Add([]byte(seed.body), seed.key)
	}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		gw := &recordingGateway{}
		cfg := newConfig()
		cfg.CatalogPackage = "_catalog"
		mux := http.NewServeMux()
		newDoor(gw, *cfg, func(context.Context) (frontdoor.Principal, error) { return frontdoor.Principal{Caller: "agent"}, nil }, nil).Routes(mux)
		req := httptest.NewRequest(http.MethodPost, "/execute-tool", bytes.NewReader(body))
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)

		var answer map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatalf("status %d, body not JSON: %v: %q", rec.Code, err, rec.Body.String())
		}
		if _, ok := answer["success"].(bool); !ok {
			t.Fatalf("no boolean success: %s", rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			if gw.last != nil {
				t.Fatalf("refused with %d after calling Run", rec.Code)
			}
			return
		}
		checkCall(t, gw.last, body, rec.Header().Get("Idempotency-Key"))
	})
}

// checkCall checks what the door handed Run for body.
func checkCall(t *testing.T, c *gateway.Call, body []byte, echoed string) {
	t.Helper()
	if c == nil {
		t.Fatal("answered 200 without calling Run")
	}
	r := c.Request
	if c.FrontDoor != Name || r.GetToolId() == "" || !requestIDPattern.MatchString(r.GetRequestId()) || r.GetRequestId() != echoed {
		t.Fatalf("call %v, header %q", c, echoed)
	}
	decoded, err := decodeExecute(body)
	if err != nil {
		t.Fatalf("Run called for a body the door refuses to decode: %v", err)
	}
	args := r.GetArgs().AsMap()
	if _, hasEnv := args["_env"]; hasEnv != (len(decoded.Env) > 0 || decoded.Params["_env"] != nil) {
		t.Fatalf("args._env present=%v for env %v", hasEnv, decoded.Env)
	}
	if _, leaked := args["importUrl"]; leaked && decoded.Params["importUrl"] == nil {
		t.Fatal("importUrl reached the call")
	}
}
