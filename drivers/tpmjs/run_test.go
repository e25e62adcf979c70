package tpmjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// newDriver returns a Driver for url, closed when the test ends. edit may
// adjust the configuration.
func newDriver(t *testing.T, url string, edit func(*Config)) *Driver {
	t.Helper()
	cfg := Config{Name: "test", URL: url}
	if edit != nil {
		edit(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// call returns a Call of a built-in tool of the fake executor.
func call(export string, args map[string]any) drivers.Call {
	return drivers.Call{RequestID: "req-1", ToolID: "fake." + export, Target: export,
		Package: tpmjstest.Package, Version: "1.0.0", Args: args}
}

func TestRunAgainstPersonalities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		personality tpmjstest.Personality
		call        drivers.Call
		wantExit    int
		wantStderr  string
		wantStdout  string
		wantData    any
	}{
		{
			name: "node echo", personality: tpmjstest.NodeV10,
			call:       call(tpmjstest.EchoTool, map[string]any{"q": "x", "n": json.Number("1.50")}),
			wantStdout: `{"env":{},"params":{"n":1.50,"q":"x"}}`,
			wantData:   map[string]any{"env": map[string]any{}, "params": map[string]any{"n": json.Number("1.50"), "q": "x"}},
		},
		{
			name: "deno echo", personality: tpmjstest.DenoV11,
			call:       call(tpmjstest.EchoTool, nil),
			wantStdout: `{"env":{},"params":{}}`,
			wantData:   map[string]any{"env": map[string]any{}, "params": map[string]any{}},
		},
		{
			name: "node caught error", personality: tpmjstest.NodeV10,
			call:     call(tpmjstest.CaughtErrorTool, map[string]any{"message": "API key invalid"}),
			wantExit: ExitToolFailed, wantStderr: "TOOL_ERROR: API key invalid",
			wantStdout: `{"error":true,"message":"API key invalid"}`,
			wantData:   map[string]any{"error": true, "message": "API key invalid"},
		},
		{
			name: "deno caught error", personality: tpmjstest.DenoV11,
			call:     call(tpmjstest.CaughtErrorTool, nil),
			wantExit: ExitToolFailed, wantStderr: "TOOL_ERROR: upstream API rejected the request",
			wantStdout: `{"error":true,"message":"upstream API rejected the request"}`,
			wantData:   map[string]any{"error": true, "message": "upstream API rejected the request"},
		},
		{
			name: "node tool throws", personality: tpmjstest.NodeV10,
			call:     call(tpmjstest.FailTool, map[string]any{"message": "bad input"}),
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_ERROR: bad input",
		},
		{
			name: "deno tool throws", personality: tpmjstest.DenoV11,
			call:     call(tpmjstest.FailTool, map[string]any{"message": "bad input"}),
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: bad input (errorStage: execute, retryable: false)",
		},
		{
			name: "node unknown package", personality: tpmjstest.NodeV10,
			call:     drivers.Call{Package: "left-pad-nope", Target: "x"},
			wantExit: ExitNotFound, wantStderr: "PACKAGE_NOT_FOUND: npm install failed for left-pad-nope@latest: " +
				"Command failed: npm install --no-save --omit=dev --no-audit --no-fund left-pad-nope@latest\n" +
				"npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/left-pad-nope - Not found",
		},
		{
			name: "deno unknown package", personality: tpmjstest.DenoV11,
			call:     drivers.Call{Package: "left-pad-nope", Version: "^1.2.0", Target: "x"},
			wantExit: ExitNotFound,
			wantStderr: "PACKAGE_IMPORT_FAILED: Import 'https://esm.sh/left-pad-nope@^1.2.0' failed: 404 Not Found " +
				"(errorStage: load, retryable: true)",
		},
		{
			name: "node unknown tool", personality: tpmjstest.NodeV10,
			call:     call("noSuchTool", nil),
			wantExit: ExitNotFound, wantStderr: `TOOL_NOT_FOUND: Tool "noSuchTool" not found in package "@toolgate/fake-tools"`,
		},
		{
			name: "deno unknown tool", personality: tpmjstest.DenoV11,
			call:     call("noSuchTool", nil),
			wantExit: ExitNotFound, wantStderr: "TOOL_NOT_FOUND: Tool not found (errorStage: load, retryable: false)",
		},
		{
			name: "node invalid tool", personality: tpmjstest.NodeV10,
			call:     call(tpmjstest.InvalidTool, nil),
			wantExit: ExitNotFound, wantStderr: `TOOL_INVALID: Tool "invalidTool" does not have an execute() function`,
		},
		{
			name: "deno invalid tool", personality: tpmjstest.DenoV11,
			call:     call(tpmjstest.InvalidTool, nil),
			wantExit: ExitNotFound, wantStderr: "INVALID_TOOL: Tool missing execute function (errorStage: load, retryable: false)",
		},
		{
			name: "deno factory needs configuration", personality: tpmjstest.DenoV11,
			call:     call(tpmjstest.FactoryTool, nil),
			wantExit: ExitNotFound,
			wantStderr: `TOOL_CONFIGURATION_REQUIRED: Tool "factoryTool" is a factory function but couldn't be initialized ` +
				"(errorStage: load, retryable: false)",
		},
		{
			name: "node executor crash", personality: tpmjstest.NodeV10,
			call:     call(tpmjstest.CrashTool, nil),
			wantExit: ExitExecutorError, wantStderr: "INTERNAL_ERROR: executor internal error",
		},
		{
			name: "deno executor crash", personality: tpmjstest.DenoV11,
			call:     call(tpmjstest.CrashTool, nil),
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_INTERNAL_ERROR: executor internal error (errorStage: executor, retryable: true)",
		},
		{
			name: "node undefined output becomes the text {}", personality: tpmjstest.NodeV10,
			call:       call(tpmjstest.NullTool, nil),
			wantStdout: `"{}"`, wantData: "{}",
		},
		{
			name: "deno undefined output is absent", personality: tpmjstest.DenoV11,
			call: call(tpmjstest.NullTool, nil),
		},
	}
	fakes := map[tpmjstest.Personality]*tpmjstest.Executor{
		tpmjstest.NodeV10: tpmjstest.New(t, tpmjstest.NodeV10),
		tpmjstest.DenoV11: tpmjstest.New(t, tpmjstest.DenoV11),
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDriver(t, fakes[tc.personality].URL, nil)
			r, err := d.Run(context.Background(), tc.call)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.ExitCode != tc.wantExit || r.Stderr != tc.wantStderr || r.Stdout != tc.wantStdout {
				t.Errorf("Run = exit %d, stderr %q, stdout %q; want exit %d, stderr %q, stdout %q",
					r.ExitCode, r.Stderr, r.Stdout, tc.wantExit, tc.wantStderr, tc.wantStdout)
			}
			if !reflect.DeepEqual(r.Data, tc.wantData) {
				t.Errorf("Data = %#v, want %#v", r.Data, tc.wantData)
			}
		})
	}
}

func TestRunSendsTheProtocolRequest(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.DenoV11)
	d := newDriver(t, fake.URL+"/", nil)
	c := call(tpmjstest.EchoTool, map[string]any{"query": "a <b> & c", "big": json.Number("12345678901234567890")})
	c.Version = ""
	c.Env = map[string]string{"SEARCH_API_KEY": "sk-live-123"}
	r, err := d.Run(context.Background(), c)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", r, err)
	}
	got := fake.Requests()
	if len(got) != 1 {
		t.Fatalf("fake received %d requests, want 1", len(got))
	}
	req := got[0]
	if req.Method != http.MethodPost || req.Path != "/execute-tool" {
		t.Errorf("request line = %s %s, want POST /execute-tool", req.Method, req.Path)
	}
	for name, want := range map[string]string{
		"Content-Type":             "application/json",
		"X-Tpmjs-Protocol-Version": "1.0",
		"Authorization":            "",
	} {
		if v := req.Header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(req.Body))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		t.Fatalf("request body: %v", err)
	}
	want := map[string]any{
		"packageName": tpmjstest.Package,
		"version":     "latest",
		"name":        tpmjstest.EchoTool,
		"params":      map[string]any{"query": "a <b> & c", "big": json.Number("12345678901234567890")},
		"env":         map[string]any{"SEARCH_API_KEY": "sk-live-123"},
	}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("request body = %#v\nwant %#v", body, want)
	}
	// The echo proves the executor received the env it needs.
	if env := r.Data.(map[string]any)["env"]; !reflect.DeepEqual(env, map[string]any{"SEARCH_API_KEY": "sk-live-123"}) {
		t.Errorf("echoed env = %#v", env)
	}
}

func TestRunRejectsInvalidCallsBeforeSending(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		mutate     func(*drivers.Call)
		wantStderr string
	}{
		{"shell command in version", func(c *drivers.Call) { c.Version = "1.0.0; rm -rf /" }, `INVALID_REQUEST: version "1.0.0; rm -rf /": character ';' is not allowed`},
		{"command substitution in version", func(c *drivers.Call) { c.Version = "$(id)" }, `INVALID_REQUEST: version "$(id)": character '$' is not allowed`},
		{"backticks in version", func(c *drivers.Call) { c.Version = "`id`" }, "INVALID_REQUEST: version \"`id`\": character '`' is not allowed"},
		{"and list in version", func(c *drivers.Call) { c.Version = "latest && curl x" }, `INVALID_REQUEST: version "latest && curl x": character ' ' is not allowed`},
		{"redirect in version", func(c *drivers.Call) { c.Version = "1.0.0 >/etc/passwd" }, `INVALID_REQUEST: version "1.0.0 >/etc/passwd": character ' ' is not allowed`},
		{"second package in version", func(c *drivers.Call) { c.Version = "1.0.0 2.0.0" }, `INVALID_REQUEST: version "1.0.0 2.0.0": character ' ' is not allowed`},
		{"range with a space in version", func(c *drivers.Call) { c.Version = ">=0.1.0 <1.0.0" }, `INVALID_REQUEST: version ">=0.1.0 <1.0.0": character '>' is not allowed`},
		{"uppercase package", func(c *drivers.Call) { c.Package = "Lodash" }, `INVALID_REQUEST: package name "Lodash": uppercase letters are not allowed`},
		{"path in package", func(c *drivers.Call) { c.Package = "../x" }, `INVALID_REQUEST: package name "../x": the name must not start with '.'`},
		{"option as package", func(c *drivers.Call) { c.Package = "-g" }, `INVALID_REQUEST: package name "-g": the name must not start with '-'`},
		{"empty package", func(c *drivers.Call) { c.Package = "" }, "INVALID_REQUEST: package name is empty"},
		{"shell in package", func(c *drivers.Call) { c.Package = "a;id" }, `INVALID_REQUEST: package name "a;id": character ';' is not allowed`},
		{"reserved export", func(c *drivers.Call) { c.Target = "default" }, `INVALID_REQUEST: export name "default" is a reserved word`},
		{"code in export", func(c *drivers.Call) { c.Target = "x;process.exit()" }, `INVALID_REQUEST: export name "x;process.exit()": character ';' is not allowed`},
		{"empty export", func(c *drivers.Call) { c.Target = "" }, "INVALID_REQUEST: export name is empty"},
		{"params not encodable", func(c *drivers.Call) { c.Args = map[string]any{"n": json.Number("1x")} }, `INVALID_REQUEST: params cannot be encoded as JSON`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := tpmjstest.New(t, tpmjstest.NodeV10)
			tr := &traceRecorder{}
			d := newDriver(t, fake.URL, func(c *Config) { c.Trace = tr })
			c := call(tpmjstest.EchoTool, nil)
			tc.mutate(&c)
			r, err := d.Run(context.Background(), c)
			if err != nil {
				t.Fatalf("Run returned error %v, want a Result", err)
			}
			if r.ExitCode != ExitInvalidRequest || !strings.HasPrefix(r.Stderr, tc.wantStderr) {
				t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr starting %q", r.ExitCode, r.Stderr, ExitInvalidRequest, tc.wantStderr)
			}
			if got := fake.Requests(); len(got) != 0 {
				t.Errorf("the executor received %d requests, want none: %+v", len(got), got)
			}
			if n := len(tr.all()); n != 0 {
				t.Errorf("%d traces written for a call that sent nothing", n)
			}
		})
	}
}

func TestRunAuthentication(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		personality tpmjstest.Personality
		executorKey string
		driverKey   string
		wantExit    int
		wantStderr  string
		wantHeader  string
	}{
		{"node key accepted", tpmjstest.NodeV10, "k-123", "k-123", 0, "", "Bearer k-123"},
		{"deno key accepted", tpmjstest.DenoV11, "k-123", "k-123", 0, "", "Bearer k-123"},
		{"node key missing", tpmjstest.NodeV10, "k-123", "", ExitUnauthorized, "UNAUTHORIZED: Invalid or missing API key", ""},
		{"node key wrong", tpmjstest.NodeV10, "k-123", "k-999", ExitUnauthorized, "UNAUTHORIZED: Invalid or missing API key", "Bearer k-999"},
		{"deno key wrong", tpmjstest.DenoV11, "k-123", "k-999", ExitUnauthorized,
			"AUTHENTICATION_REQUIRED: Unauthorized (errorStage: request, retryable: false)", "Bearer k-999"},
		{"key sent to an executor without auth", tpmjstest.NodeV10, "", "k-123", 0, "", "Bearer k-123"},
		{"no key anywhere", tpmjstest.DenoV11, "", "", 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []tpmjstest.Option
			if tc.executorKey != "" {
				opts = append(opts, tpmjstest.WithAPIKey(tc.executorKey))
			}
			fake := tpmjstest.New(t, tc.personality, opts...)
			d := newDriver(t, fake.URL, func(c *Config) { c.APIKey = tc.driverKey })
			r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.ExitCode != tc.wantExit || r.Stderr != tc.wantStderr {
				t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr %q", r.ExitCode, r.Stderr, tc.wantExit, tc.wantStderr)
			}
			reqs := fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("fake received %d requests, want 1", len(reqs))
			}
			if got := reqs[0].Header.Get("Authorization"); got != tc.wantHeader {
				t.Errorf("Authorization = %q, want %q", got, tc.wantHeader)
			}
		})
	}
}

func TestRunUnusableAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		status     int
		wantExit   int
		wantStderr string
	}{
		{"HTML page from a proxy", "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>", 502,
			ExitExecutorError, "INVALID_RESPONSE: HTTP 502: the body is not a JSON object: <!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"},
		{"HTML login page under 401", "<html>Sign in</html>", 401,
			ExitUnauthorized, "UNAUTHORIZED: HTTP 401: the body is not a JSON object: <html>Sign in</html>"},
		{"truncated JSON", `{"success":true,"output":{"items":[1,2`, 200,
			ExitExecutorError, "INVALID_RESPONSE: HTTP 200: the body is not valid JSON (unexpected end of JSON input): {\"success\":true,\"output\":{\"items\":[1,2"},
		{"empty body", "", 504, ExitExecutorError, "INVALID_RESPONSE: HTTP 504: the body is empty"},
		{"redirect is not followed", `{"success":true,"output":"from the redirect"}`, http.StatusFound, ExitExecutorError,
			"INVALID_RESPONSE: HTTP 302: redirect to nowhere not followed"},
		{"shutting down", "Service shutting down", 503, ExitExecutorError, "INVALID_RESPONSE: HTTP 503: the body is not a JSON object: Service shutting down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := tpmjstest.New(t, tpmjstest.NodeV10)
			fake.SetBody(tc.body, tc.status)
			d := newDriver(t, fake.URL, nil)
			r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.ExitCode != tc.wantExit || r.Stderr != tc.wantStderr || r.Stdout != "" || r.Data != nil {
				t.Errorf("Run = %+v; want exit %d, stderr %q", r, tc.wantExit, tc.wantStderr)
			}
		})
	}
}

func TestRunOversizedAnswers(t *testing.T) {
	t.Parallel()
	valid := func(size int) string {
		prefix := `{"success":true,"output":"`
		return prefix + strings.Repeat("x", size-len(prefix)-2) + `"}`
	}
	tests := []struct {
		name     string
		limit    int64
		body     string
		wantExit int
	}{
		{"exactly the limit", 1024, valid(1024), 0},
		{"one byte over", 1024, valid(1025), ExitExecutorError},
		{"far over, streamed", 1024, valid(1 << 20), ExitExecutorError},
		{"over the default limit", 0, valid(defaultMaxResponseBytes + 1), ExitExecutorError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := tpmjstest.New(t, tpmjstest.DenoV11)
			fake.SetBody(tc.body, 200)
			d := newDriver(t, fake.URL, func(c *Config) { c.MaxResponseBytes = tc.limit })
			r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if r.ExitCode != tc.wantExit {
				t.Fatalf("Run exit = %d, want %d (stderr %q)", r.ExitCode, tc.wantExit, r.Stderr)
			}
			if tc.wantExit != 0 {
				want := fmt.Sprintf("INVALID_RESPONSE: HTTP 200: the body exceeds the limit of %d bytes", d.maxResponse)
				if r.Stderr != want || r.Stdout != "" || r.Data != nil {
					t.Errorf("Run = stderr %q, stdout %d bytes; want stderr %q and no output", r.Stderr, len(r.Stdout), want)
				}
			}
		})
	}
}

func TestRunBodyBrokenOff(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"success":true,"output":`))
	}))
	t.Cleanup(srv.Close)
	d := newDriver(t, srv.URL, nil)
	r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
	if err != nil {
		t.Fatalf("Run returned error %v; an answer that broke off is a Result", err)
	}
	want := "INVALID_RESPONSE: HTTP 200: the body broke off after 25 bytes: unexpected EOF"
	if r.ExitCode != ExitExecutorError || r.Stderr != want {
		t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr %q", r.ExitCode, r.Stderr, ExitExecutorError, want)
	}
}

func TestRunDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.URL.Path, true)
		if r.URL.Path == "/execute-tool" {
			http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
			return
		}
		_, _ = w.Write([]byte(`{"success":true,"output":"elsewhere"}`))
	}))
	t.Cleanup(srv.Close)
	d := newDriver(t, srv.URL, nil)
	r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := "INVALID_RESPONSE: HTTP 301: redirect to /elsewhere not followed"; r.ExitCode != ExitExecutorError || r.Stderr != want {
		t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr %q", r.ExitCode, r.Stderr, ExitExecutorError, want)
	}
	if _, followed := hits.Load("/elsewhere"); followed {
		t.Error("the redirect was followed")
	}
}

func TestRunTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("our call timeout wins over a slow executor", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.NodeV10)
		fake.SetDelay(20 * time.Second)
		d := newDriver(t, fake.URL, func(c *Config) { c.CallTimeout = 200 * time.Millisecond })
		start := time.Now()
		r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		assertTimeout(t, r, err, start, "200ms (the driver's time limit)")
	})
	// An executor runs a tool to its end whether or not its client still
	// waits: a caller's deadline passing after the call was sent is not
	// the tool's end, and no timeout is made up for it.
	t.Run("the caller's deadline after sending does not end the call", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.DenoV11)
		d := newDriver(t, fake.URL, func(c *Config) { c.CallTimeout = 10 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		r, err := d.Run(ctx, call(tpmjstest.SleepTool, map[string]any{"ms": 1000}))
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("Run = exit %d, stderr %q, err %v; want the tool's own result", r.ExitCode, r.Stderr, err)
		}
	})
	t.Run("a caller who cancels after sending abandons the call, with no result", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.DenoV11)
		d := newDriver(t, fake.URL, nil)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		r, err := d.Run(ctx, call(tpmjstest.SleepTool, map[string]any{"ms": 20000}))
		if err == nil || errors.Is(err, drivers.ErrNotDispatched) || !strings.Contains(err.Error(), "the tool may still be running") {
			t.Fatalf("Run = exit %d, err %v; want an error saying the tool may still be running, not marked not dispatched", r.ExitCode, err)
		}
	})
	t.Run("deadline while the body is streaming", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"success":true,"output":"`))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(func() { close(release); srv.Close() })
		d := newDriver(t, srv.URL, func(c *Config) { c.CallTimeout = 200 * time.Millisecond })
		start := time.Now()
		r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		assertTimeout(t, r, err, start, "200ms")
	})
	t.Run("the executor's own kill is a timeout, not a tool error", func(t *testing.T) {
		t.Parallel()
		// The driver has not probed /info, so it does not know the
		// executor's limit and the executor's kill arrives first.
		fake := tpmjstest.New(t, tpmjstest.NodeV10, tpmjstest.WithMaxExecutionTime(100*time.Millisecond))
		d := newDriver(t, fake.URL, nil)
		r, err := d.Run(context.Background(), call(tpmjstest.SleepTool, map[string]any{"ms": 5000}))
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		want := "EXECUTION_TIMEOUT: the executor's own time limit ended the call (it answered TOOL_EXECUTION_ERROR: Script exited with code null)"
		if r.ExitCode != ExitTimeout || r.Stderr != want {
			t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr %q", r.ExitCode, r.Stderr, ExitTimeout, want)
		}
	})
	t.Run("call timeout capped below the advertised maximum", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.NodeV10, tpmjstest.WithMaxExecutionTime(400*time.Millisecond))
		fake.SetDelay(20 * time.Second) // an install that never ends: outside the executor's own limit
		d := newDriver(t, fake.URL, func(c *Config) { c.CallTimeout = time.Minute })
		d.margin = 50 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d.Start(ctx)
		waitFor(t, "the advertised maximum", func() bool { limit, _ := d.callLimit(); return limit == 350*time.Millisecond })
		start := time.Now()
		r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		assertTimeout(t, r, err, start, "350ms (the driver's time limit, 50ms before the executor's advertised maxExecutionTimeMs 400)")
	})
	t.Run("the hosting platform's kill is a timeout", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.DenoVercel, tpmjstest.WithMaxExecutionTime(200*time.Millisecond))
		d := newDriver(t, fake.URL, nil)
		r, err := d.Run(context.Background(), call(tpmjstest.SleepTool, map[string]any{"ms": 5000}))
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if want := "EXECUTION_TIMEOUT: the hosting platform's time limit ended the call (HTTP 504:"; r.ExitCode != ExitTimeout || !strings.HasPrefix(r.Stderr, want) {
			t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr starting %q", r.ExitCode, r.Stderr, ExitTimeout, want)
		}
	})
	t.Run("the driver's timeout comes before the executor's kill", func(t *testing.T) {
		t.Parallel()
		// The executor kills a tool at 1s and reports it as a tool error;
		// the driver, which read the limit from /info, ends the call
		// first (a quarter of the limit earlier) and says why.
		fake := tpmjstest.New(t, tpmjstest.NodeV10, tpmjstest.WithMaxExecutionTime(time.Second))
		d := newDriver(t, fake.URL, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		d.Start(ctx)
		waitFor(t, "the advertised maximum", func() bool { limit, _ := d.callLimit(); return limit < time.Second })
		start := time.Now()
		r, err := d.Run(context.Background(), call(tpmjstest.SleepTool, map[string]any{"ms": 5000}))
		assertTimeout(t, r, err, start, "750ms (the driver's time limit, 250ms before the executor's advertised maxExecutionTimeMs 1000)")
		if elapsed := time.Since(start); elapsed >= time.Second {
			t.Errorf("the call ended after %v, not before the executor's limit of 1s", elapsed)
		}
	})
}

// assertTimeout checks that a call ended promptly with the timeout Result.
func assertTimeout(t *testing.T, r drivers.Result, err error, start time.Time, limit string) {
	t.Helper()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Run returned error %v, want a timeout Result", err)
	}
	want := "EXECUTION_TIMEOUT: no complete answer from the executor within " + limit
	if r.ExitCode != ExitTimeout || !strings.HasPrefix(r.Stderr, want) {
		t.Errorf("Run = exit %d, stderr %q; want exit %d, stderr starting %q", r.ExitCode, r.Stderr, ExitTimeout, want)
	}
	// The executors of these tests answer after 20 s or never; the bound
	// leaves a loaded machine room.
	if elapsed > 8*time.Second {
		t.Errorf("Run took %v, want a prompt return", elapsed)
	}
}

func TestRunCancelledIsAnError(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.DenoV11)
	d := newDriver(t, fake.URL, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := d.Run(ctx, call(tpmjstest.SleepTool, map[string]any{"ms": 20000}))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run error = %v, want context.Canceled", err)
	}
	if elapsed := time.Since(start); elapsed > 8*time.Second {
		t.Errorf("Run took %v after cancellation", elapsed)
	}
}

func TestRunTransportFailuresAreErrors(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		d := newDriver(t, "http://"+addr, nil)
		_, err = d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Run error = %v, want connection refused", err)
		}
	})
	t.Run("connection reset, then recovered", func(t *testing.T) {
		t.Parallel()
		fake := tpmjstest.New(t, tpmjstest.NodeV10)
		fake.SetFlaky(1)
		d := newDriver(t, fake.URL, nil)
		if _, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil)); err == nil {
			t.Error("Run over a reset connection returned no error")
		}
		r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		if err != nil || r.ExitCode != 0 {
			t.Errorf("Run after the reset = %+v, %v; want success", r, err)
		}
		if n := len(fake.Requests()); n != 2 {
			t.Errorf("fake received %d requests, want 2 (no silent retry of a POST)", n)
		}
	})
	t.Run("TLS failure", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewTLSServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		d := newDriver(t, srv.URL, nil)
		_, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("Run error = %v, want a certificate error", err)
		}
	})
	t.Run("DNS failure", func(t *testing.T) {
		t.Parallel()
		client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.DNSError{Err: "no such host", Name: "executor.invalid", IsNotFound: true}
		}}}
		d := newDriver(t, "http://executor.invalid", func(c *Config) { c.HTTPClient = client })
		_, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) {
			t.Errorf("Run error = %v, want a wrapped *net.DNSError", err)
		}
	})
}

func TestProbesNeverBlockRun(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.NodeV10)
	fake.SetHealthDelay(3 * time.Second)
	d := newDriver(t, fake.URL, nil)
	d.Start(context.Background())
	waitFor(t, "the health probe to arrive", func() bool { return len(fake.Requests()) > 0 })
	start := time.Now()
	r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil))
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", r, err)
	}
	// Waiting for the probe would take its 3 s; the bound leaves a loaded
	// machine room.
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Run took %v while /health hangs, want it unaffected", elapsed)
	}
	if got := d.Engine(); got != engineUnknown {
		t.Errorf("Engine = %q while no probe answered, want %q", got, engineUnknown)
	}
}

func TestEngineLearnsFromProbes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		personality tpmjstest.Personality
		opts        []tpmjstest.Option
		apiKey      string
		want        string
	}{
		{"node from /info", tpmjstest.NodeV10, nil, "", "tpmjs:railway-executor/1.0.0"},
		{"deno from /health", tpmjstest.DenoV11, nil, "", "tpmjs:deno-executor/1.1.0"},
		{"deno with auth", tpmjstest.DenoV11, []tpmjstest.Option{tpmjstest.WithAPIKey("k"), tpmjstest.WithVersion("9f3c2e1")}, "k", "tpmjs:deno-executor/9f3c2e1"},
		{"node without key still probes", tpmjstest.NodeV10, []tpmjstest.Option{tpmjstest.WithAPIKey("k"), tpmjstest.WithVersion("1.0.7")}, "", "tpmjs:railway-executor/1.0.7"},
		// Before, the Vercel form's /health (version and info.runtime)
		// gave the bare "tpmjs:executor".
		{"deno form of the vercel template from /health", tpmjstest.DenoVercel, []tpmjstest.Option{tpmjstest.WithVersion("1.0.3")}, "", "tpmjs:deno-executor/1.0.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := tpmjstest.New(t, tc.personality, tc.opts...)
			d := newDriver(t, fake.URL, func(c *Config) { c.APIKey = tc.apiKey; c.ProbeInterval = 20 * time.Millisecond })
			if got := d.Engine(); got != engineUnknown {
				t.Errorf("Engine before Start = %q, want %q", got, engineUnknown)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d.Start(ctx)
			waitFor(t, "Engine "+tc.want, func() bool { return d.Engine() == tc.want })
			for _, req := range fake.Requests() {
				if req.Header.Get("X-TPMJS-Protocol-Version") != "1.0" {
					t.Errorf("probe %s without protocol header", req.Path)
				}
			}
		})
	}
}

func TestStartStopsWithContextAndClose(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.NodeV10)
	d := newDriver(t, fake.URL, func(c *Config) { c.ProbeInterval = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	d.Start(ctx)
	d.Start(ctx) // a second Start does nothing
	waitFor(t, "a few probes", func() bool { return len(fake.Requests()) >= 4 })
	cancel()
	time.Sleep(50 * time.Millisecond)
	before := len(fake.Requests())
	time.Sleep(100 * time.Millisecond)
	if after := len(fake.Requests()); after != before {
		t.Errorf("probes continued after the context ended: %d → %d requests", before, after)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	d.Start(context.Background()) // after Close: nothing
	if _, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil)); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run after Close error = %v, want closed", err)
	}
}

// traceRecorder is a drivers.TraceWriter that keeps the traces.
type traceRecorder struct {
	mu     sync.Mutex
	traces []drivers.Trace
	err    error
}

func (r *traceRecorder) Write(t drivers.Trace) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.traces = append(r.traces, t)
	return fmt.Sprintf(".tmp/trace-%d.json", len(r.traces)), r.err
}

func (r *traceRecorder) all() []drivers.Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]drivers.Trace(nil), r.traces...)
}

func TestTrace(t *testing.T) {
	t.Parallel()
	const apiKey = "executor-key-5f1e"
	fake := tpmjstest.New(t, tpmjstest.NodeV10, tpmjstest.WithAPIKey(apiKey))
	tr := &traceRecorder{}
	d := newDriver(t, fake.URL, func(c *Config) { c.APIKey = apiKey; c.Trace = tr })

	c := call(tpmjstest.EchoTool, map[string]any{"q": "x"})
	c.RequestID = "req-trace"
	c.Env = map[string]string{"TOKEN": "tok-secret"}
	before := time.Now()
	if r, err := d.Run(context.Background(), c); err != nil || r.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v", r, err)
	}
	fake.SetFlaky(1)
	if _, err := d.Run(context.Background(), c); err == nil {
		t.Fatal("Run over a reset connection returned no error")
	}
	fake.SetBody(`{"success":true,"output":"`+strings.Repeat("y", 100<<10)+`"}`, 200)
	if r, err := d.Run(context.Background(), c); err != nil || r.ExitCode != 0 {
		t.Fatalf("Run with a big answer = exit %d, %v", r.ExitCode, err)
	}

	traces := tr.all()
	if len(traces) != 3 {
		t.Fatalf("%d traces, want 3", len(traces))
	}
	ok := traces[0]
	if ok.RequestID != "req-trace" || ok.Method != http.MethodPost || ok.URL != fake.URL+"/execute-tool" || ok.Status != 200 || ok.Error != "" {
		t.Errorf("trace = %+v", ok)
	}
	if ts, err := time.Parse(time.RFC3339Nano, ok.Time); err != nil || ts.Before(before.Add(-time.Second)) {
		t.Errorf("trace time %q: %v", ok.Time, err)
	}
	wantReq := map[string]any{
		"packageName": tpmjstest.Package, "version": "1.0.0", "name": tpmjstest.EchoTool,
		"params": map[string]any{"q": "x"}, "env": map[string]any{"TOKEN": "tok-secret"},
	}
	if !reflect.DeepEqual(ok.Request, wantReq) {
		t.Errorf("trace request = %#v\nwant %#v (env included for the gateway to redact)", ok.Request, wantReq)
	}
	if !strings.Contains(ok.Response, `"env":{"TOKEN":"tok-secret"}`) {
		t.Errorf("trace response = %q", ok.Response)
	}
	for i, tc := range traces {
		raw, _ := json.Marshal(tc)
		if bytes.Contains(raw, []byte(apiKey)) || bytes.Contains(bytes.ToLower(raw), []byte("authorization")) {
			t.Errorf("trace %d carries the Authorization header: %s", i, raw)
		}
	}
	if reset := traces[1]; reset.Status != 0 || reset.Error == "" || reset.Response != "" {
		t.Errorf("trace of a reset = status %d, error %q, response %q; want the error only", reset.Status, reset.Error, reset.Response)
	}
	big := traces[2]
	if len(big.Response) > maxTraceResponse+100 || !strings.HasSuffix(big.Response, "bytes read]") {
		t.Errorf("big trace response: %d bytes, ends %q", len(big.Response), big.Response[len(big.Response)-40:])
	}
}

func TestTraceWriteFailureDoesNotFailTheCall(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.DenoV11)
	tr := &traceRecorder{err: errors.New("disk full")}
	d := newDriver(t, fake.URL, func(c *Config) { c.Trace = tr })
	if r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, nil)); err != nil || r.ExitCode != 0 {
		t.Errorf("Run = %+v, %v; want success despite the trace failure", r, err)
	}
}

func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	const apiKey, envValue = "key-9d8c7b", "env-value-a1b2"
	fake := tpmjstest.New(t, tpmjstest.NodeV10, tpmjstest.WithAPIKey(apiKey))
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := newDriver(t, fake.URL, func(c *Config) {
		c.APIKey, c.Logger, c.ProbeInterval = apiKey, logger, 10*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.Start(ctx)
	c := call(tpmjstest.EchoTool, nil)
	c.Env = map[string]string{"SECRET": envValue}
	_, _ = d.Run(context.Background(), c)
	fake.SetFlaky(1)
	_, _ = d.Run(context.Background(), c)
	fake.SetBody("<html>"+envValue+"</html>", 502)
	_, _ = d.Run(context.Background(), c)
	waitFor(t, "a probe", func() bool { return d.Engine() != engineUnknown })
	d.Close()

	mu.Lock()
	logs := buf.String()
	mu.Unlock()
	if !strings.Contains(logs, "tpmjs call failed") || !strings.Contains(logs, "tpmjs call") {
		t.Errorf("expected call logs, got:\n%s", logs)
	}
	for _, secret := range []string{apiKey, envValue} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q:\n%s", secret, logs)
		}
	}
}

// lockedWriter serializes writes of concurrent loggers.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestConcurrentRunsWhileProbing(t *testing.T) {
	t.Parallel()
	fake := tpmjstest.New(t, tpmjstest.DenoV11)
	d := newDriver(t, fake.URL, func(c *Config) { c.ProbeInterval = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.Start(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 8 {
				r, err := d.Run(context.Background(), call(tpmjstest.EchoTool, map[string]any{"i": i, "j": j}))
				if err != nil || r.ExitCode != 0 {
					errs <- fmt.Errorf("call %d/%d: %+v, %v", i, j, r, err)
					return
				}
				_ = d.Engine()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"empty URL", Config{}, "Config.URL: is empty"},
		{"unsupported scheme", Config{URL: "ftp://x"}, `scheme must be http or https, got "ftp"`},
		{"no scheme", Config{URL: "executor:8080"}, `scheme must be http or https`},
		{"no host", Config{URL: "http://"}, "has no host"},
		{"credentials in URL", Config{URL: "https://user:pw@x"}, "must not contain credentials"},
		{"query", Config{URL: "https://x/?a=1"}, "query or fragment"},
		{"fragment", Config{URL: "https://x/#f"}, "query or fragment"},
		{"negative health timeout", Config{URL: "http://x", HealthTimeout: -1}, "Config.HealthTimeout must not be negative"},
		{"negative call timeout", Config{URL: "http://x", CallTimeout: -1}, "Config.CallTimeout must not be negative"},
		{"negative probe interval", Config{URL: "http://x", ProbeInterval: -1}, "Config.ProbeInterval must not be negative"},
		{"negative response limit", Config{URL: "http://x", MaxResponseBytes: -1}, "Config.MaxResponseBytes must not be negative"},
		{"key with a line break", Config{URL: "http://x", APIKey: "k\r\nX-Evil: 1"}, "Config.APIKey may only contain visible ASCII"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("New = %v, want an error containing %q", err, tc.wantErr)
			}
			if err != nil && tc.cfg.APIKey != "" && strings.Contains(err.Error(), tc.cfg.APIKey) {
				t.Errorf("error %q contains the API key", err)
			}
		})
	}

	d, err := New(Config{URL: "https://executor.example/api/"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.executeURL != "https://executor.example/api/execute-tool" || d.infoURL != "https://executor.example/api/info" {
		t.Errorf("URLs = %s, %s", d.executeURL, d.infoURL)
	}
	if d.name != "tpmjs" || d.healthTimeout != time.Second || d.callTimeout != 120*time.Second ||
		d.probeInterval != 30*time.Second || d.maxResponse != 10<<20 {
		t.Errorf("defaults not applied: %+v", d)
	}
}

// waitFor polls cond until it holds or ten seconds passed: long enough
// for a loaded machine, and only a failing test waits that long.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
