package tpmjstest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// exchange sends one raw request to the fake and returns the status and
// the decoded JSON body (nil when the body is not JSON).
func exchange(t *testing.T, method, url, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		m = nil
	}
	return resp.StatusCode, m
}

func TestRawProtocolQuirks(t *testing.T) {
	t.Parallel()
	node := New(t, NodeV10, WithAPIKey("k"))
	deno := New(t, DenoV11, WithAPIKey("k"))
	auth := map[string]string{"Authorization": "Bearer k"}
	echo := `{"packageName":"` + Package + `","name":"` + EchoTool + `","params":{"a":1}}`
	tests := []struct {
		name       string
		method     string
		url        string
		body       string
		header     map[string]string
		wantStatus int
		check      func(t *testing.T, m map[string]any)
	}{
		{"node health needs no key", "GET", node.URL + "/health", "", nil, 200, field("runtime", "node")},
		{"node routes with /api prefix", "GET", node.URL + "/api/info", "", nil, 200, field("name", "Railway Executor")},
		{"node advertises the maximum", "GET", node.URL + "/info", "", nil, 200, func(t *testing.T, m map[string]any) {
			if got := m["capabilities"].(map[string]any)["maxExecutionTimeMs"]; got != float64(120000) {
				t.Errorf("maxExecutionTimeMs = %v", got)
			}
		}},
		{"node 401 has no executionTimeMs", "POST", node.URL + "/execute-tool", echo, nil, 401, func(t *testing.T, m map[string]any) {
			if _, ok := m["executionTimeMs"]; ok {
				t.Error("401 body has executionTimeMs")
			}
			nested(t, m, "UNAUTHORIZED")
		}},
		{"node bad JSON", "POST", node.URL + "/execute-tool", "{", auth, 400, func(t *testing.T, m map[string]any) { nested(t, m, "INVALID_REQUEST") }},
		{"node missing name", "POST", node.URL + "/execute-tool", `{"packageName":"x"}`, auth, 400, func(t *testing.T, m map[string]any) { nested(t, m, "INVALID_REQUEST") }},
		{"node version defaults to latest", "POST", node.URL + "/execute-tool", echo, auth, 200, field("success", true)},
		{"node unknown route", "GET", node.URL + "/nope", "", nil, 404, field("error", "Not found")},
		{"deno health needs no key", "GET", deno.URL + "/health", "", nil, 200, field("protocolVersion", "1.1")},
		{"deno info needs the key", "GET", deno.URL + "/info", "", nil, 401, func(t *testing.T, m map[string]any) {
			field("errorCode", "AUTHENTICATION_REQUIRED")(t, m)
			field("executionTimeMs", float64(0))(t, m)
		}},
		{"deno has no info", "GET", deno.URL + "/info", "", auth, 404, field("error", "Not found")},
		{"deno requires version", "POST", deno.URL + "/execute-tool", echo, auth, 400, func(t *testing.T, m map[string]any) {
			field("errorCode", "INVALID_REQUEST")(t, m)
			field("errorStage", "request")(t, m)
			field("retryable", false)(t, m)
		}},
		{"deno bad JSON", "POST", deno.URL + "/execute-tool", "nope", auth, 400, field("errorCode", "INVALID_REQUEST")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, m := exchange(t, tc.method, tc.url, tc.body, tc.header)
			if status != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %v)", status, tc.wantStatus, m)
			}
			if m == nil {
				t.Fatal("body is not a JSON object")
			}
			tc.check(t, m)
		})
	}
}

// field returns a check that m[key] equals want.
func field(key string, want any) func(*testing.T, map[string]any) {
	return func(t *testing.T, m map[string]any) {
		t.Helper()
		if m[key] != want {
			t.Errorf("%s = %#v, want %#v (body %v)", key, m[key], want, m)
		}
	}
}

// nested checks a protocol 1.0 error object.
func nested(t *testing.T, m map[string]any, code string) {
	t.Helper()
	e, ok := m["error"].(map[string]any)
	if !ok || e["code"] != code || e["message"] == "" {
		t.Errorf("error = %#v, want code %s with a message", m["error"], code)
	}
}

func TestOptionsPreflight(t *testing.T) {
	t.Parallel()
	for _, p := range []Personality{NodeV10, DenoV11} {
		fake := New(t, p)
		req, _ := http.NewRequest(http.MethodOptions, fake.URL+"/execute-tool", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%v preflight = %d, CORS %q", p, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
}

func TestRegisterToolAndFaults(t *testing.T) {
	t.Parallel()
	fake := New(t, DenoV11)
	fake.RegisterTool("@acme/math", "add", func(params map[string]any, env map[string]string) (any, error) {
		a, _ := params["a"].(json.Number).Int64()
		b, _ := params["b"].(json.Number).Int64()
		if env["MODE"] == "fail" {
			return nil, errors.New("refused")
		}
		return map[string]any{"sum": a + b}, nil
	})
	post := func(env string) (int, map[string]any) {
		return exchange(t, "POST", fake.URL+"/execute-tool",
			`{"packageName":"@acme/math","version":"1.0.0","name":"add","params":{"a":2,"b":3},"env":{"MODE":"`+env+`"}}`, nil)
	}
	if status, m := post("ok"); status != 200 || m["output"].(map[string]any)["sum"] != float64(5) {
		t.Errorf("registered tool = %d %v", status, m)
	}
	if status, m := post("fail"); status != 200 || m["errorCode"] != "TOOL_EXECUTION_FAILED" || m["error"] != "refused" {
		t.Errorf("registered tool failing = %d %v", status, m)
	}

	fake.SetBody("<html>down</html>", 503)
	req, _ := http.NewRequest(http.MethodPost, fake.URL+"/execute-tool", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || string(raw) != "<html>down</html>" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("canned answer = %d %q %q", resp.StatusCode, raw, resp.Header.Get("Content-Type"))
	}
	fake.SetBody("", 0)
	if status, _ := post("ok"); status != 200 {
		t.Errorf("after SetBody(\"\", 0) status = %d, want normal answers", status)
	}

	fake.SetFlaky(2)
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, fake.URL+"/execute-tool", strings.NewReader("{}"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("flaky request %d got an answer", i)
		}
	}
	if status, _ := post("ok"); status != 200 {
		t.Errorf("after the flaky requests status = %d", status)
	}

	reqs := fake.Requests()
	if len(reqs) != 7 {
		t.Fatalf("recorded %d requests, want 7", len(reqs))
	}
	if !strings.Contains(string(reqs[0].Body), `"MODE":"ok"`) || reqs[0].Path != "/execute-tool" || reqs[0].Method != "POST" {
		t.Errorf("first recorded request = %+v", reqs[0])
	}
}

func TestDelays(t *testing.T) {
	t.Parallel()
	fake := New(t, NodeV10)
	fake.SetHealthDelay(150 * time.Millisecond)
	fake.SetDelay(150 * time.Millisecond)
	start := time.Now()
	if status, _ := exchange(t, "GET", fake.URL+"/health", "", nil); status != 200 {
		t.Fatalf("health status %d", status)
	}
	body := `{"packageName":"` + Package + `","name":"` + EchoTool + `"}`
	if status, _ := exchange(t, "POST", fake.URL+"/execute-tool", body, nil); status != 200 {
		t.Fatalf("execute status %d", status)
	}
	if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
		t.Errorf("two delayed requests took %v, want at least 300ms", elapsed)
	}
}

func TestPersonalityString(t *testing.T) {
	t.Parallel()
	for p, want := range map[Personality]string{NodeV10: "NodeV10", DenoV11: "DenoV11", 7: "Personality(7)"} {
		if got := p.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

func TestVercelDenoQuirks(t *testing.T) {
	t.Parallel()
	v := New(t, DenoVercel, WithAPIKey("k"), WithMaxExecutionTime(200*time.Millisecond))
	auth := map[string]string{"Authorization": "Bearer k"}
	req := func(export string, params string) string {
		return `{"packageName":"` + Package + `","name":"` + export + `","params":` + params + `}`
	}
	plain := func(want string) func(*testing.T, map[string]any) {
		return func(t *testing.T, m map[string]any) {
			field("success", false)(t, m)
			if s, ok := m["error"].(string); !ok || !strings.Contains(s, want) {
				t.Errorf("error = %#v, want a plain string containing %q", m["error"], want)
			}
			for _, k := range []string{"errorCode", "errorStage", "retryable"} {
				if _, ok := m[k]; ok {
					t.Errorf("the body has %s; the Vercel form sends no code", k)
				}
			}
		}
	}
	tests := []struct {
		name, method, url, body string
		header                  map[string]string
		wantStatus              int
		check                   func(*testing.T, map[string]any)
	}{
		{"health has version and info.runtime", "GET", v.URL + "/api/health", "", nil, 200, func(t *testing.T, m map[string]any) {
			field("version", "1.0.0")(t, m)
			if info, _ := m["info"].(map[string]any); info["runtime"] != "deno" {
				t.Errorf("info = %#v", m["info"])
			}
		}},
		{"401 without executionTimeMs", "POST", v.URL + "/execute-tool", req(EchoTool, "{}"), nil, 401, func(t *testing.T, m map[string]any) {
			field("error", "Unauthorized")(t, m)
			if _, ok := m["executionTimeMs"]; ok {
				t.Error("401 body has executionTimeMs")
			}
		}},
		{"version defaults to latest", "POST", v.URL + "/execute-tool", req(EchoTool, "{}"), auth, 200, field("success", true)},
		{"unknown export is 404", "POST", v.URL + "/execute-tool", req("nope", "{}"), auth, 404, plain(`Export "nope" not found in module`)},
		{"factory is 400", "POST", v.URL + "/execute-tool", req(FactoryTool, "{}"), auth, 400, plain("is a factory function but couldn't be initialized")},
		{"no execute is 400", "POST", v.URL + "/execute-tool", req(InvalidTool, "{}"), auth, 400, plain("Tool missing execute function")},
		{"a throw is 500 with the bare message", "POST", v.URL + "/execute-tool", req(FailTool, `{"message":"boom"}`), auth, 500, plain("boom")},
		{"import failure is 500", "POST", v.URL + "/execute-tool", `{"packageName":"@x/y","name":"z","version":"2.0.0"}`, auth, 500, plain("Import 'https://esm.sh/@x/y@2.0.0' failed")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, m := exchange(t, tc.method, tc.url, tc.body, tc.header)
			if status != tc.wantStatus || m == nil {
				t.Fatalf("status = %d, body %v; want %d and a JSON object", status, m, tc.wantStatus)
			}
			tc.check(t, m)
		})
	}
	t.Run("the platform cuts a long call off with 504", func(t *testing.T) {
		status, m := exchange(t, "POST", v.URL+"/execute-tool", req(SleepTool, `{"ms":5000}`), auth)
		if status != http.StatusGatewayTimeout || m != nil {
			t.Errorf("status %d body %v, want 504 with a plain-text page", status, m)
		}
	})
	t.Run("no info route", func(t *testing.T) {
		if status, _ := exchange(t, "GET", v.URL+"/info", "", auth); status != http.StatusNotFound {
			t.Errorf("/info = %d, want 404", status)
		}
	})
}
