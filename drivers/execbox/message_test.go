package execbox

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDecodeRunnerMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want runnerMessage
	}{
		{"not JSON", `{"type":`, runnerMessage{kind: kindMalformed, reason: "not a JSON object"}},
		{"array", `[]`, runnerMessage{kind: kindMalformed, reason: "not a JSON object"}},
		{"null", `null`, runnerMessage{kind: kindMalformed, reason: "not a JSON object"}},
		{"no type", `{"id":"x"}`, runnerMessage{kind: kindMalformed, reason: `no string "type"`}},
		{"type not a string", `{"type":["done"]}`, runnerMessage{kind: kindMalformed, reason: `no string "type"`}},
		{"unknown type", `{"type":"progress\u001b","id":"e"}`, runnerMessage{kind: kindUnknown, typ: "progress", hasID: true, id: "e"}},
		{"host type", `{"type":"cancel","id":"e"}`, runnerMessage{kind: kindUnknown, typ: "cancel", hasID: true, id: "e"}},
		{"started", `{"type":"started","id":"e"}`, runnerMessage{kind: kindStarted, typ: "started", hasID: true, id: "e"}},
		{"started with a number id", `{"type":"started","id":1}`, runnerMessage{kind: kindStarted, typ: "started", hasID: true}},
		{"tool call", `{"type":"tool_call","callId":"c","providerName":"p","safeToolName":"t","input":{"n":1.5}}`,
			runnerMessage{kind: kindToolCall, typ: "tool_call", callID: "c", provider: "p", tool: "t", input: map[string]any{"n": json.Number("1.5")}}},
		{"tool call without input", `{"type":"tool_call","callId":"c","providerName":"p","safeToolName":"t"}`,
			runnerMessage{kind: kindToolCall, typ: "tool_call", callID: "c", provider: "p", tool: "t"}},
		{"tool call with names of the wrong type", `{"type":"tool_call","callId":"c","providerName":1,"safeToolName":null,"input":null}`,
			runnerMessage{kind: kindToolCall, typ: "tool_call", callID: "c"}},
		{"tool call without callId", `{"type":"tool_call","providerName":"p"}`,
			runnerMessage{kind: kindMalformed, typ: "tool_call", reason: "tool_call without a string callId"}},
		{"tool call with an empty callId", `{"type":"tool_call","callId":""}`,
			runnerMessage{kind: kindMalformed, typ: "tool_call", reason: "tool_call without a string callId"}},
		{"tool call with a huge callId", `{"type":"tool_call","callId":"` + strings.Repeat("c", 257) + `"}`,
			runnerMessage{kind: kindMalformed, typ: "tool_call", reason: "tool_call callId is longer than 256 bytes or not UTF-8"}},
		{"done ok", `{"type":"done","id":"e","ok":true,"durationMs":3,"logs":["a"],"result":[1,"x",null,true]}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{data: []any{json.Number("1"), "x", nil, true}, logs: []string{"a"}, durationMs: 3}}},
		{"done ok without result or logs", `{"type":"done","id":"e","ok":true}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e", done: outcome{durationMs: -1}}},
		{"done with negative duration", `{"type":"done","id":"e","ok":true,"durationMs":-5,"logs":"nope"}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e", done: outcome{durationMs: -1}}},
		{"done failed", `{"type":"done","id":"e","ok":false,"logs":[],"error":{"code":"runtime_error","message":"x is not defined"}}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{code: "runtime_error", message: "x is not defined", logs: []string{}, durationMs: -1}}},
		{"done with a string error", `{"type":"done","id":"e","ok":false,"error":"boom"}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e", done: outcome{code: "internal_error", message: "boom", durationMs: -1}}},
		{"done with a null error", `{"type":"done","id":"e","ok":false,"error":null}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{code: "internal_error", message: "runner reported a failure without an error", durationMs: -1}}},
		{"done with a numeric code", `{"type":"done","id":"e","ok":false,"error":{"code":7,"message":"m"}}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{code: "internal_error", message: "m (runner sent no string error code)", durationMs: -1}}},
		{"done with an empty message", `{"type":"done","id":"e","ok":false,"error":{"code":"timeout"}}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{code: "timeout", message: "runner reported a failure without a message", durationMs: -1}}},
		{"done with ok of the wrong type", `{"type":"done","id":"e","ok":"true"}`,
			runnerMessage{kind: kindDone, typ: "done", hasID: true, id: "e",
				done: outcome{code: "internal_error", message: `runner sent a done without a boolean "ok"`, durationMs: -1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeRunnerMessage([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decodeRunnerMessage(%s) =\n%#v\nwant\n%#v", tc.in, got, tc.want)
			}
		})
	}
}

func TestDecodeRunnerMessageUntrustedValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		wantErr string
	}{
		{"at the depth limit", strings.Repeat("[", 64) + strings.Repeat("]", 64), ""},
		{"too deep", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), "not a plain JSON value: nested deeper than 64 levels"},
		{"brackets inside strings do not count", `"` + strings.Repeat("[", 100) + `\"["`, ""},
		{"overflowing number", `{"a":[1,-1e309]}`, "not a plain JSON value: number -1e309 is not finite"},
		{"underflowing number", `1e-400`, ""},
		{"huge integer", `123456789012345678901234567890`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := decodeRunnerMessage([]byte(`{"type":"tool_call","callId":"c","input":` + tc.value + `}`))
			d := decodeRunnerMessage([]byte(`{"type":"done","id":"e","ok":true,"result":` + tc.value + `}`))
			if tc.wantErr == "" {
				if m.inputErr != nil || d.done.code != "" {
					t.Errorf("input error %v, done %q %q; want both accepted", m.inputErr, d.done.code, d.done.message)
				}
				return
			}
			if m.inputErr == nil || !errors.Is(m.inputErr, errNotPlainJSON) || m.inputErr.Error() != tc.wantErr {
				t.Errorf("input error = %v, want %q", m.inputErr, tc.wantErr)
			}
			if d.done.code != codeSerialization || d.done.message != "result of the execution is "+tc.wantErr {
				t.Errorf("done = %q %q, want serialization_error", d.done.code, d.done.message)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{`{"type":"started","id":"e"}`, true},
		{`{"type":"started","id":"f"}`, false},
		{`{"type":"started"}`, false},
		{`{"type":"done","id":"e","ok":true}`, true},
		{`{"type":"done","id":null,"ok":true}`, false},
		{`{"type":"tool_call","callId":"c"}`, true},
		{`{"type":"tool_call","callId":"c","id":"e"}`, true},
		{`{"type":"tool_call","callId":"c","id":"f"}`, false},
	}
	for _, tc := range tests {
		m := decodeRunnerMessage([]byte(tc.in))
		if got := m.matches("e"); got != tc.want {
			t.Errorf("%s matches execution e = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestEncodeToolResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    toolOutcome
		max  int
		want string
	}{
		{"result", toolOutcome{toolID: "t", ok: true, result: map[string]any{"a": json.Number("1")}}, 1024,
			`{"type":"tool_result","callId":"c1","ok":true,"result":{"a":1}}`},
		{"nil result is null, never omitted", toolOutcome{toolID: "t", ok: true}, 1024,
			`{"type":"tool_result","callId":"c1","ok":true,"result":null}`},
		{"failure", toolOutcome{toolID: "t", code: "tool_error", message: "denied"}, 1024,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"tool_error","message":"denied"}}`},
		{"unknown code", toolOutcome{toolID: "t", code: "TOOL_NOT_FOUND", message: "gone"}, 1024,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"internal_error","message":"gone"}}`},
		{"empty failure", toolOutcome{toolID: "t"}, 1024,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"internal_error","message":"tool call failed"}}`},
		{"result that is not JSON", toolOutcome{toolID: "t", ok: true, result: math.Inf(1)}, 1024,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"serialization_error","message":"result of tool t is not JSON: json: unsupported value: +Inf"}}`},
		{"a failed tool's result travels with its error", toolOutcome{toolID: "t", code: "validation_error", message: "refused",
			result: map[string]any{"exit_code": 2, "stdout": "", "stderr": "path: required", "data": map[string]any{"category": "validation"}}}, 1 << 20,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"validation_error","message":"refused\ntool result: {\"data\":{\"category\":\"validation\"},\"exit_code\":2,\"stderr\":\"path: required\",\"stdout\":\"\"}","result":{"data":{"category":"validation"},"exit_code":2,"stderr":"path: required","stdout":""}}}`},
		{"a failed tool's result too large for the answer is left out", toolOutcome{toolID: "t", code: "tool_error", message: "failed",
			result: map[string]any{"stdout": strings.Repeat("x", 40<<10)}}, 32 << 10,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"tool_error","message":"failed (the tool's result, 40973 bytes, exceeds the limit of 32768 and is left out)"}}`},
		{"result over the limit", toolOutcome{toolID: "t", ok: true, result: strings.Repeat("x", 30)}, 16,
			`{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"serialization_error","message":"result of tool t is 32 bytes, more than the limit of 16"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok, code := encodeToolResult("c1", tc.o, tc.max)
			if string(msg) != tc.want {
				t.Errorf("encodeToolResult =\n%s\nwant\n%s", msg, tc.want)
			}
			var sent toolResultMessage
			if err := json.Unmarshal(msg, &sent); err != nil || sent.OK != ok || (sent.Error == nil) != ok || !ok && sent.Error.Code != code {
				t.Errorf("encodeToolResult reports ok %v, code %q for %s", ok, code, msg)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	want := map[string]int{"timeout": 124, "memory_limit": 137, "validation_error": 2, "tool_error": 3,
		"runtime_error": 1, "serialization_error": 4, "internal_error": 5, "": 5, "other": 5}
	for code, exit := range want {
		if got := exitCode(code); got != exit {
			t.Errorf("exitCode(%q) = %d, want %d", code, got, exit)
		}
		if knownCode(code) != (code != "" && code != "other") {
			t.Errorf("knownCode(%q) = %v", code, knownCode(code))
		}
	}
}

func TestJoinLogs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name               string
		logs               []string
		maxLines, maxChars int
		want               string
	}{
		{"none", nil, 10, 100, ""},
		{"one per line", []string{"a", "", "b c"}, 10, 100, "a\n\nb c\n"},
		{"lines first", []string{"a", "b", "c"}, 2, 100, "a\nb\n"},
		{"characters cumulative, last line clipped", []string{"héllo", "wörld"}, 10, 7, "héllo\nwö\n"},
		{"exact fit", []string{"ab", "cd"}, 10, 4, "ab\ncd\n"},
		{"nothing left", []string{"ab", "cd", "ef"}, 10, 2, "ab\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinLogs(tc.logs, tc.maxLines, tc.maxChars); got != tc.want {
				t.Errorf("joinLogs = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCleanText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"plain", 100, "plain"},
		{"tab\tand\nnewline", 100, "tab\tand\nnewline"},
		{"bell\a esc\x1b nul\x00 del\x7f", 100, "bell esc nul del"},
		{"bad \xff utf8", 100, "bad \uFFFD utf8"},
		{"ééé", 3, "é…"},
	}
	for _, tc := range tests {
		if got := cleanText(tc.in, tc.limit); got != tc.want {
			t.Errorf("cleanText(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	limit := 5 * time.Second
	tests := []struct {
		name string
		args map[string]any
		want runArgs
	}{
		{"code only", map[string]any{"code": "1"}, runArgs{code: "1", allProviders: true, timeout: limit}},
		{"null optionals", map[string]any{"code": "1", "providers": nil, "timeoutMs": nil}, runArgs{code: "1", allProviders: true, timeout: limit}},
		{"json number", map[string]any{"code": "1", "timeoutMs": json.Number("1500")}, runArgs{code: "1", allProviders: true, timeout: 1500 * time.Millisecond}},
		{"exponent", map[string]any{"code": "1", "timeoutMs": json.Number("2e3")}, runArgs{code: "1", allProviders: true, timeout: 2 * time.Second}},
		{"float", map[string]any{"code": "1", "timeoutMs": 5000.0}, runArgs{code: "1", allProviders: true, timeout: limit}},
		{"int", map[string]any{"code": "1", "timeoutMs": 1}, runArgs{code: "1", allProviders: true, timeout: time.Millisecond}},
		{"providers", map[string]any{"code": "1", "providers": []string{"a"}}, runArgs{code: "1", providers: []string{"a"}, timeout: limit}},
		{"no providers", map[string]any{"code": "1", "providers": []any{}}, runArgs{code: "1", providers: []string{}, timeout: limit}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseArgs(tc.args, limit)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseArgs = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
