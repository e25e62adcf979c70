package tpmjs

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		body       string
		wantExit   int
		wantStderr string // exact, unless wantPrefix
		wantPrefix bool
		wantStdout string
		wantData   any
	}{
		{
			name: "1.0 success", status: 200,
			body:     `{"success":true,"output":{"message":"Hello, World!","n":12345678901234567890},"executionTimeMs":1234}`,
			wantExit: 0, wantStdout: `{"message":"Hello, World!","n":12345678901234567890}`,
			wantData: map[string]any{"message": "Hello, World!", "n": json.Number("12345678901234567890")},
		},
		{
			name: "success output is compacted", status: 200,
			body:       "{\"success\": true,\n \"output\": [ 1, \"a b\" , null ] }",
			wantStdout: `[1,"a b",null]`, wantData: []any{json.Number("1"), "a b", nil},
		},
		{
			name: "success with a string output", status: 200,
			body:       `{"success":true,"output":"{}","executionTimeMs":3}`,
			wantStdout: `"{}"`, wantData: "{}",
		},
		{
			name: "success with null output", status: 200,
			body:       `{"success":true,"output":null,"executionTimeMs":3}`,
			wantStdout: `null`, wantData: nil,
		},
		{
			name: "1.1 success without output", status: 200,
			body: `{"success":true,"executionTimeMs":3}`,
		},
		{
			name: "success trusted under a non-200 status", status: 500,
			body:       `{"success":true,"output":1}`,
			wantStdout: `1`, wantData: json.Number("1"),
		},
		{
			name: "tool caught its own error", status: 200,
			body:       `{"success":true,"output":{"error":true,"message":"Registry API returned 503"},"executionTimeMs":50}`,
			wantExit:   ExitToolFailed,
			wantStderr: "TOOL_ERROR: Registry API returned 503",
			wantStdout: `{"error":true,"message":"Registry API returned 503"}`,
			wantData:   map[string]any{"error": true, "message": "Registry API returned 503"},
		},
		{
			name: "tool caught error without message", status: 200,
			body:     `{"success":true,"output":{"error":true}}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_ERROR: the tool reported an error",
			wantStdout: `{"error":true}`, wantData: map[string]any{"error": true},
		},
		{
			name: "error false is a plain output", status: 200,
			body:       `{"success":true,"output":{"error":false,"value":1}}`,
			wantStdout: `{"error":false,"value":1}`, wantData: map[string]any{"error": false, "value": json.Number("1")},
		},
		{
			name: "error string in output is a plain output", status: 200,
			body:       `{"success":true,"output":{"error":"none"}}`,
			wantStdout: `{"error":"none"}`, wantData: map[string]any{"error": "none"},
		},
		{
			name: "1.0 tool execution error under 200", status: 200,
			body:     `{"success":false,"error":{"code":"TOOL_EXECUTION_ERROR","message":"Tool threw an error: Invalid input"},"executionTimeMs":123}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_ERROR: Tool threw an error: Invalid input",
		},
		{
			name: "1.0 node kill at its own limit is a timeout", status: 200,
			body:     `{"success":false,"error":{"code":"TOOL_EXECUTION_ERROR","message":"Script exited with code null"},"executionTimeMs":120001}`,
			wantExit: ExitTimeout, wantStderr: "EXECUTION_TIMEOUT: the executor's own time limit ended the call (it answered TOOL_EXECUTION_ERROR: Script exited with code null)",
		},
		{
			name: "1.0 npm install cut off at its limit is a timeout", status: 200,
			body:     `{"success":false,"error":{"code":"PACKAGE_NOT_FOUND","message":"npm install failed for a@1: spawnSync /bin/sh ETIMEDOUT"},"executionTimeMs":60001}`,
			wantExit: ExitTimeout, wantStderr: "EXECUTION_TIMEOUT: the executor's own time limit ended the call (it answered PACKAGE_NOT_FOUND: npm install failed for a@1: spawnSync /bin/sh ETIMEDOUT)",
		},
		{
			name: "1.0 package not found", status: 200,
			body:     `{"success":false,"error":{"code":"PACKAGE_NOT_FOUND","message":"npm install failed"},"executionTimeMs":5000}`,
			wantExit: ExitNotFound, wantStderr: "PACKAGE_NOT_FOUND: npm install failed",
		},
		{
			name: "1.0 tool not found", status: 200,
			body:     `{"success":false,"error":{"code":"TOOL_NOT_FOUND","message":"Tool \"x\" not found"},"executionTimeMs":5}`,
			wantExit: ExitNotFound, wantStderr: `TOOL_NOT_FOUND: Tool "x" not found`,
		},
		{
			name: "1.0 tool invalid", status: 200,
			body:     `{"success":false,"error":{"code":"TOOL_INVALID","message":"no execute()"},"executionTimeMs":5}`,
			wantExit: ExitNotFound, wantStderr: "TOOL_INVALID: no execute()",
		},
		{
			name: "1.0 execution timeout", status: 200,
			body:     `{"success":false,"error":{"code":"EXECUTION_TIMEOUT","message":"took too long"},"executionTimeMs":60000}`,
			wantExit: ExitTimeout, wantStderr: "EXECUTION_TIMEOUT: took too long",
		},
		{
			name: "1.0 internal error", status: 200,
			body:     `{"success":false,"error":{"code":"INTERNAL_ERROR","message":"disk full"},"executionTimeMs":1}`,
			wantExit: ExitExecutorError, wantStderr: "INTERNAL_ERROR: disk full",
		},
		{
			name: "1.0 unauthorized without executionTimeMs", status: 401,
			body:     `{"success":false,"error":{"code":"UNAUTHORIZED","message":"Invalid or missing API key"}}`,
			wantExit: ExitUnauthorized, wantStderr: "UNAUTHORIZED: Invalid or missing API key",
		},
		{
			name: "1.0 invalid request", status: 400,
			body:     `{"success":false,"error":{"code":"INVALID_REQUEST","message":"Invalid JSON body"}}`,
			wantExit: ExitInvalidRequest, wantStderr: "INVALID_REQUEST: Invalid JSON body",
		},
		{
			name: "1.1 tool execution failed", status: 200,
			body:     `{"success":false,"error":"boom","errorStage":"execute","errorCode":"TOOL_EXECUTION_FAILED","retryable":false,"executionTimeMs":12}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: boom (errorStage: execute, retryable: false)",
		},
		{
			name: "1.1 import failed under 500", status: 500,
			body:     `{"success":false,"error":"Import failed","errorStage":"load","errorCode":"PACKAGE_IMPORT_FAILED","retryable":true,"executionTimeMs":900}`,
			wantExit: ExitNotFound, wantStderr: "PACKAGE_IMPORT_FAILED: Import failed (errorStage: load, retryable: true)",
		},
		{
			name: "1.1 tool not found under 404", status: 404,
			body:     `{"success":false,"error":"Tool not found","errorStage":"load","errorCode":"TOOL_NOT_FOUND","retryable":false,"executionTimeMs":3}`,
			wantExit: ExitNotFound, wantStderr: "TOOL_NOT_FOUND: Tool not found (errorStage: load, retryable: false)",
		},
		{
			name: "1.1 configuration required under 400", status: 400,
			body:     `{"success":false,"error":"factory","errorStage":"load","errorCode":"TOOL_CONFIGURATION_REQUIRED","retryable":false,"executionTimeMs":3}`,
			wantExit: ExitNotFound, wantStderr: "TOOL_CONFIGURATION_REQUIRED: factory (errorStage: load, retryable: false)",
		},
		{
			name: "1.1 invalid tool", status: 400,
			body:     `{"success":false,"error":"Tool missing execute function","errorStage":"load","errorCode":"INVALID_TOOL","retryable":false,"executionTimeMs":3}`,
			wantExit: ExitNotFound, wantStderr: "INVALID_TOOL: Tool missing execute function (errorStage: load, retryable: false)",
		},
		{
			name: "1.1 schema unavailable", status: 400,
			body:     `{"success":false,"error":"no schema","errorStage":"load","errorCode":"SCHEMA_UNAVAILABLE","retryable":false,"executionTimeMs":3}`,
			wantExit: ExitNotFound, wantStderr: "SCHEMA_UNAVAILABLE: no schema (errorStage: load, retryable: false)",
		},
		{
			name: "1.1 authentication required", status: 401,
			body:     `{"success":false,"error":"Unauthorized","errorStage":"request","errorCode":"AUTHENTICATION_REQUIRED","retryable":false,"executionTimeMs":0}`,
			wantExit: ExitUnauthorized, wantStderr: "AUTHENTICATION_REQUIRED: Unauthorized (errorStage: request, retryable: false)",
		},
		{
			name: "1.1 executor unavailable", status: 503,
			body:     `{"success":false,"error":"busy","errorStage":"executor","errorCode":"EXECUTOR_UNAVAILABLE","retryable":true,"executionTimeMs":0}`,
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_UNAVAILABLE: busy (errorStage: executor, retryable: true)",
		},
		{
			name: "1.1 executor internal error", status: 500,
			body:     `{"success":false,"error":"oops","errorStage":"executor","errorCode":"EXECUTOR_INTERNAL_ERROR","retryable":true,"executionTimeMs":0}`,
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_INTERNAL_ERROR: oops (errorStage: executor, retryable: true)",
		},
		{
			name: "1.1 execution timeout", status: 200,
			body:     `{"success":false,"error":"timed out","errorStage":"execute","errorCode":"EXECUTION_TIMEOUT","retryable":true,"executionTimeMs":60000}`,
			wantExit: ExitTimeout, wantStderr: "EXECUTION_TIMEOUT: timed out (errorStage: execute, retryable: true)",
		},
		{
			name: "1.1 invalid request", status: 400,
			body:     `{"success":false,"error":"Missing required fields: packageName, name, version","errorStage":"request","errorCode":"INVALID_REQUEST","retryable":false,"executionTimeMs":0}`,
			wantExit: ExitInvalidRequest, wantStderr: "INVALID_REQUEST: Missing required fields: packageName, name, version (errorStage: request, retryable: false)",
		},
		{
			name: "unknown code", status: 200,
			body:     `{"success":false,"error":{"code":"QUOTA_EXCEEDED","message":"try tomorrow"}}`,
			wantExit: ExitExecutorError, wantStderr: "QUOTA_EXCEEDED: try tomorrow",
		},
		{
			name: "code with hostile characters is cleaned", status: 200,
			body:     `{"success":false,"error":{"code":"BAD\nCODE: x","message":"m"}}`,
			wantExit: ExitExecutorError, wantStderr: "BADCODEx: m",
		},
		{
			name: "code inside the error object wins", status: 200,
			body:     `{"success":false,"error":{"code":"TOOL_NOT_FOUND","message":"m"},"errorCode":"TOOL_EXECUTION_FAILED"}`,
			wantExit: ExitNotFound, wantStderr: "TOOL_NOT_FOUND: m",
		},
		{
			name: "failure keeps output", status: 200,
			body:     `{"success":false,"error":"partial","errorCode":"TOOL_EXECUTION_FAILED","output":{"done":1}}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: partial",
			wantStdout: `{"done":1}`, wantData: map[string]any{"done": json.Number("1")},
		},
		{
			name: "failure without code is classified by its text", status: 404,
			body:     `{"success":false,"error":"Tool not found","executionTimeMs":1}`,
			wantExit: ExitNotFound, wantStderr: "TOOL_NOT_FOUND: HTTP 404: Tool not found",
		},
		{
			name: "a tool's throw that reads like the executor's wording stays the tool's", status: 500,
			body:     `{"success":false,"error":"Missing required fields: query","executionTimeMs":1}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: HTTP 500: Missing required fields: query",
		},
		{
			name: "a tool's throw about a lookup stays the tool's", status: 500,
			body:     `{"success":false,"error":"Tool not found: the weather station","executionTimeMs":1}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: HTTP 500: Tool not found: the weather station",
		},
		{
			name: "failure without code or known text under 200 is the tool's", status: 200,
			body:     `{"success":false,"error":"rate limited by upstream","executionTimeMs":1}`,
			wantExit: ExitToolFailed, wantStderr: "TOOL_EXECUTION_FAILED: HTTP 200: rate limited by upstream",
		},
		{
			name: "stock server phrase under 500 is the executor's", status: 500,
			body:     `{"success":false,"error":"Internal Server Error"}`,
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_ERROR: HTTP 500: Internal Server Error",
		},
		{
			name: "1.1 stage without a code", status: 500,
			body:     `{"success":false,"error":"boom","errorStage":"load"}`,
			wantExit: ExitNotFound, wantStderr: "PACKAGE_IMPORT_FAILED: HTTP 500: boom (errorStage: load)",
		},
		{
			name: "platform cut the executor off", status: 504,
			body:     "An error occurred with your deployment\n\nFUNCTION_INVOCATION_TIMEOUT\n",
			wantExit: ExitTimeout, wantStderr: "EXECUTION_TIMEOUT: the hosting platform's time limit ended the call (HTTP 504: the body is not a JSON object: An error occurred with your deployment FUNCTION_INVOCATION_TIMEOUT)",
		},
		{
			name: "failure without code under 400", status: 400,
			body:     `{"success":false,"error":"Missing required fields"}`,
			wantExit: ExitInvalidRequest, wantStderr: "INVALID_REQUEST: HTTP 400: Missing required fields",
		},
		{
			name: "failure without code under 403", status: 403,
			body:     `{"success":false,"error":{"message":"forbidden"}}`,
			wantExit: ExitUnauthorized, wantStderr: "UNAUTHORIZED: HTTP 403: forbidden",
		},
		{
			name: "failure without anything", status: 200,
			body:     `{"success":false}`,
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_ERROR: HTTP 200: the executor reported a failure without a message",
		},
		{
			name: "unknown route of the executor", status: 404,
			body:     `{"error":"Not found"}`,
			wantExit: ExitExecutorError, wantStderr: "EXECUTOR_ERROR: HTTP 404: Not found",
		},
		{
			name: "success as a string is not success", status: 200,
			body:     `{"success":"true","output":1}`,
			wantExit: ExitExecutorError, wantStderr: `INVALID_RESPONSE: HTTP 200: the JSON object has neither a boolean "success" nor an "error": {"success":"true","output":1}`,
		},
		{
			name: "object of something else", status: 200,
			body:     `{"hello":"world"}`,
			wantExit: ExitExecutorError, wantStderr: `INVALID_RESPONSE: HTTP 200: the JSON object has neither a boolean "success" nor an "error": {"hello":"world"}`,
		},
		{
			name: "HTML from a proxy", status: 502,
			body:     "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body></html>",
			wantExit: ExitExecutorError, wantStderr: "INVALID_RESPONSE: HTTP 502: the body is not a JSON object: <html> <head><title>502 Bad Gateway</title></head> <body>nginx</body></html>",
		},
		{
			name: "HTML under 401", status: 401,
			body:     "<h1>Unauthorized</h1>",
			wantExit: ExitUnauthorized, wantStderr: "UNAUTHORIZED: HTTP 401: the body is not a JSON object: <h1>Unauthorized</h1>",
		},
		{
			name: "plain text shutting down", status: 503,
			body:     "Service shutting down",
			wantExit: ExitExecutorError, wantStderr: "INVALID_RESPONSE: HTTP 503: the body is not a JSON object: Service shutting down",
		},
		{
			name: "truncated JSON", status: 200,
			body:     `{"success":true,"output":{"a":`,
			wantExit: ExitExecutorError, wantStderr: `INVALID_RESPONSE: HTTP 200: the body is not valid JSON`, wantPrefix: true,
		},
		{
			name: "trailing garbage", status: 200,
			body:     `{"success":true} {"success":false}`,
			wantExit: ExitExecutorError, wantStderr: `INVALID_RESPONSE: HTTP 200: the body is not valid JSON`, wantPrefix: true,
		},
		{
			name: "empty body", status: 502,
			body:     " \n",
			wantExit: ExitExecutorError, wantStderr: "INVALID_RESPONSE: HTTP 502: the body is empty",
		},
		{
			name: "array body", status: 200,
			body:     `[{"success":true}]`,
			wantExit: ExitExecutorError, wantStderr: `INVALID_RESPONSE: HTTP 200: the body is not a JSON object: [{"success":true}]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := parseResponse(tc.status, []byte(tc.body))
			if r.ExitCode != tc.wantExit {
				t.Errorf("ExitCode = %d, want %d (stderr %q)", r.ExitCode, tc.wantExit, r.Stderr)
			}
			if tc.wantPrefix {
				if !strings.HasPrefix(r.Stderr, tc.wantStderr) {
					t.Errorf("Stderr = %q, want prefix %q", r.Stderr, tc.wantStderr)
				}
			} else if r.Stderr != tc.wantStderr {
				t.Errorf("Stderr = %q, want %q", r.Stderr, tc.wantStderr)
			}
			if r.Stdout != tc.wantStdout {
				t.Errorf("Stdout = %q, want %q", r.Stdout, tc.wantStdout)
			}
			if !reflect.DeepEqual(r.Data, tc.wantData) {
				t.Errorf("Data = %#v, want %#v", r.Data, tc.wantData)
			}
		})
	}
}

func TestParseResponseCleansMessages(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", maxStderrMessage) // 2 bytes each: twice the limit
	body, _ := json.Marshal(map[string]any{
		"success": false,
		"error":   map[string]any{"code": "TOOL_EXECUTION_ERROR", "message": "a\x00b\x1b[31mred\nnext\t" + long},
	})
	r := parseResponse(200, body)
	if !strings.HasPrefix(r.Stderr, "TOOL_EXECUTION_ERROR: a b [31mred\nnext\t") {
		t.Errorf("control characters not replaced: %q", r.Stderr[:60])
	}
	if !strings.HasSuffix(r.Stderr, " [message truncated]") || len(r.Stderr) > maxStderrMessage+100 {
		t.Errorf("long message not truncated: %d bytes, ends %q", len(r.Stderr), r.Stderr[len(r.Stderr)-30:])
	}

	r = parseResponse(200, []byte("{\"success\":true,\"output\":\"\xff\xfe\"}"))
	if r.Stdout != "\"\uFFFD\"" {
		t.Errorf("invalid UTF-8 in output: Stdout = %q", r.Stdout)
	}
	r = parseResponse(502, []byte("\xff<html>"+strings.Repeat("x", 5000)))
	if want := "INVALID_RESPONSE: HTTP 502: the body is not a JSON object: \uFFFD<html>xxx"; !strings.HasPrefix(r.Stderr, want) ||
		!strings.HasSuffix(r.Stderr, "…") || len(r.Stderr) > 300 {
		t.Errorf("excerpt = %q", r.Stderr)
	}
}

func TestEngineFromProbes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, health, info string
		wantHealth         string
		wantProtocol       string
		wantInfo           string
		wantMax            time.Duration
	}{
		{
			name:       "node template",
			health:     `{"status":"ok","protocolVersion":"1.0","implementationVersion":"1.0.0","runtime":"node","timestamp":"2026-02-03T12:00:00.000Z"}`,
			info:       `{"name":"Railway Executor","version":"1.0.0","protocolVersion":"1.0","capabilities":{"maxExecutionTimeMs":120000}}`,
			wantHealth: "tpmjs:node-executor/1.0.0", wantInfo: "tpmjs:railway-executor/1.0.0", wantMax: 120 * time.Second,
			wantProtocol: "1.0",
		},
		{
			name:       "deno executor",
			health:     `{"status":"ok","protocolVersion":"1.1","implementationVersion":"1.1.0","denoVersion":"2.1.4"}`,
			info:       `{"error":"Not found"}`,
			wantHealth: "tpmjs:deno-executor/1.1.0", wantProtocol: "1.1",
		},
		{
			name:       "deno form of the vercel template",
			health:     `{"status":"ok","version":"1.0.0","info":{"runtime":"deno","httpImports":true,"timestamp":"2026-02-03T12:00:00.000Z"}}`,
			info:       `The page could not be found`,
			wantHealth: "tpmjs:deno-executor/1.0.0",
		},
		{
			name:       "an info that is no object",
			health:     `{"status":"ok","version":"2.0.0","info":"deno","protocolVersion":"1.0; rm -rf"}`,
			info:       `{}`,
			wantHealth: "tpmjs:executor/2.0.0",
		},
		{
			name:       "hostile names are reduced to slugs",
			health:     `{"implementationVersion":"1.0 beta\n\u0000; rm -rf /","runtime":"Bun\t Runtime!!"}`,
			info:       `{"name":"  My <b>Executor</b>\r\n","version":"2026.01.02 build 7","capabilities":{"maxExecutionTimeMs":"soon"}}`,
			wantHealth: "tpmjs:bun-runtime-executor/1.0-beta-rm-rf", wantInfo: "tpmjs:my-b-executor-b/2026.01.02-build-7",
		},
		{
			name:       "nothing known",
			health:     `{"status":"ok"}`,
			info:       `{"capabilities":{"maxExecutionTimeMs":1e12}}`,
			wantHealth: "tpmjs:executor",
		},
		{
			name:       "long names are cut",
			health:     `{"runtime":"` + strings.Repeat("n", 100) + `","implementationVersion":"` + strings.Repeat("9", 100) + `"}`,
			info:       `{"name":"` + strings.Repeat("a", 100) + `","capabilities":{"maxExecutionTimeMs":2500}}`,
			wantHealth: "tpmjs:" + strings.Repeat("n", 39) + "-executor/" + strings.Repeat("9", 32),
			wantInfo:   "tpmjs:" + strings.Repeat("a", 48), wantMax: 2500 * time.Millisecond,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, protocol, ok := engineFromHealth([]byte(tc.health))
			if !ok || got != tc.wantHealth || protocol != tc.wantProtocol {
				t.Errorf("engineFromHealth = %q, %q, %v, want %q, %q", got, protocol, ok, tc.wantHealth, tc.wantProtocol)
			}
			engine, maxExec, _ := parseInfo([]byte(tc.info))
			if engine != tc.wantInfo || maxExec != tc.wantMax {
				t.Errorf("parseInfo = %q, %v, want %q, %v", engine, maxExec, tc.wantInfo, tc.wantMax)
			}
		})
	}
}
