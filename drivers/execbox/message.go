package execbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The execbox error codes. A runner may only report these; the host only
// ever sends these.
const (
	codeTimeout       = "timeout"
	codeMemoryLimit   = "memory_limit"
	codeValidation    = "validation_error"
	codeTool          = "tool_error"
	codeRuntime       = "runtime_error"
	codeSerialization = "serialization_error"
	codeInternal      = "internal_error"
)

// Exit codes of a Result, one per error code (see the package
// documentation for the table).
const (
	exitOK            = 0
	exitRuntime       = 1
	exitValidation    = 2
	exitTool          = 3
	exitSerialization = 4
	exitInternal      = 5
	exitTimeout       = 124
	exitMemoryLimit   = 137
)

// exitCode returns the exit code of a failure with the given error code.
// An unknown code is an internal error.
func exitCode(code string) int {
	switch code {
	case codeTimeout:
		return exitTimeout
	case codeMemoryLimit:
		return exitMemoryLimit
	case codeValidation:
		return exitValidation
	case codeTool:
		return exitTool
	case codeRuntime:
		return exitRuntime
	case codeSerialization:
		return exitSerialization
	default:
		return exitInternal
	}
}

// knownCode reports whether code is one of the seven execbox error codes.
func knownCode(code string) bool {
	switch code {
	case codeTimeout, codeMemoryLimit, codeValidation, codeTool, codeRuntime, codeSerialization, codeInternal:
		return true
	}
	return false
}

// Limits on values that come from the runner.
const (
	// maxJSONDepth bounds the nesting of a done result or a tool input.
	// Values deeper than this are not what guest code hands to a tool or
	// returns; they are an attempt to exhaust whoever walks them next.
	maxJSONDepth = 64
	// maxCallIDBytes bounds a tool_call's callId; it names the nested call
	// in evidence and in the nested request id.
	maxCallIDBytes = 256
	// maxMessageText bounds an error message taken from the runner or from
	// a nested call.
	maxMessageText = 8 << 10
	// maxNameText bounds a type, provider or tool name quoted in a log or
	// an error message.
	maxNameText = 64
)

// errNotPlainJSON reports a runner value outside the transport-safe subset
// of JSON that the protocol allows.
var errNotPlainJSON = errors.New("not a plain JSON value")

// Host messages. Every field the protocol defines is always sent; in
// particular options, without which a real runner never answers, and a
// tool_result's "result", without which a real runner drops the message.
type (
	executeMessage struct {
		Type      string             `json:"type"`
		ID        string             `json:"id"`
		Code      string             `json:"code"`
		Options   runOptions         `json:"options"`
		Providers []providerManifest `json:"providers"`
	}
	runOptions struct {
		TimeoutMs        int64 `json:"timeoutMs"`
		MemoryLimitBytes int64 `json:"memoryLimitBytes"`
		MaxLogLines      int   `json:"maxLogLines"`
		MaxLogChars      int   `json:"maxLogChars"`
	}
	toolResultMessage struct {
		Type   string          `json:"type"`
		CallID string          `json:"callId"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result,omitempty"` // "null" when OK, never omitted then
		Error  *wireError      `json:"error,omitempty"`
	}
	cancelMessage struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	wireError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// Result is the failed tool's result {exit_code, stdout, stderr,
		// data}, when it ran. The protocol's error has only code and
		// message, so the message carries it too when it fits.
		Result json.RawMessage `json:"result,omitempty"`
	}
)

// encodeToolResult builds the tool_result answering callID with the outcome
// of a nested call, and says what it tells the guest: ok, or the code of
// the failure. The code of a failure is forced into the known set, and a
// result that cannot be encoded as JSON, or whose message would exceed
// maxBytes, becomes a serialization_error.
func encodeToolResult(callID string, nr toolOutcome, maxBytes int) (msg []byte, ok bool, code string) {
	m := toolResultMessage{Type: "tool_result", CallID: callID, OK: nr.ok}
	if nr.ok {
		raw, err := json.Marshal(nr.result)
		switch {
		case err != nil:
			nr = toolOutcome{code: codeSerialization, message: fmt.Sprintf("result of tool %s is not JSON: %v", nr.toolID, err)}
		case len(raw) > maxBytes:
			nr = toolOutcome{code: codeSerialization, message: fmt.Sprintf("result of tool %s is %d bytes, more than the limit of %d", nr.toolID, len(raw), maxBytes)}
		default:
			m.Result = raw // "null" for a nil result
		}
	}
	if !nr.ok {
		m.OK = false
		m.Result = nil
		m.Error = &wireError{Code: nr.code, Message: cleanText(nr.message, maxMessageText)}
		if !knownCode(m.Error.Code) {
			m.Error.Code = codeInternal
		}
		if m.Error.Message == "" {
			m.Error.Message = "tool call failed"
		}
		attachFailedResult(m.Error, nr.result, maxBytes)
	}
	b, err := json.Marshal(m)
	if err != nil {
		// Only the raw result can fail to encode, and it came from
		// json.Marshal; answer without it rather than leave the guest
		// waiting.
		m = toolResultMessage{Type: "tool_result", CallID: callID,
			Error: &wireError{Code: codeSerialization, Message: "tool result is not JSON"}}
		b, _ = json.Marshal(m)
	}
	if m.OK {
		return b, true, ""
	}
	return b, false, m.Error.Code
}

// failedResultRoom is what the rest of a failed tool_result may take
// beside the failed tool's result, within the message size limit.
const failedResultRoom = 2*maxMessageText + 1024

// attachFailedResult adds the result of a tool that ran and failed to the
// error answering the guest: as error.result, and at the end of the message
// ("\ntool result: {…}") when the message stays within maxMessageText,
// since a runner may hand the guest only the code and the message. A result
// that cannot be encoded, or that would take the answer over maxBytes, is
// left out and the message says so.
func attachFailedResult(e *wireError, result any, maxBytes int) {
	if result == nil {
		return
	}
	raw, err := json.Marshal(result)
	switch {
	case err != nil:
		e.Message += " (the tool's result is not JSON)"
		return
	case len(raw)+failedResultRoom > maxBytes:
		e.Message += fmt.Sprintf(" (the tool's result, %d bytes, exceeds the limit of %d and is left out)", len(raw), maxBytes)
		return
	}
	e.Result = raw
	if suffix := "\ntool result: " + string(raw); len(e.Message)+len(suffix) <= maxMessageText {
		e.Message += suffix
	}
}

// toolOutcome is what the guest learns about one tool call.
type toolOutcome struct {
	toolID        string
	ok            bool
	result        any
	code, message string
}

// messageKind classifies a message from the runner.
type messageKind uint8

const (
	// kindMalformed is anything that is not a JSON object with a string
	// "type", or a tool_call without a usable callId.
	kindMalformed messageKind = iota
	// kindUnknown is a well-formed message of a type the host does not
	// handle (including the host's own types).
	kindUnknown
	kindStarted
	kindToolCall
	kindDone
)

// String names the kind in evidence and logs.
func (k messageKind) String() string {
	switch k {
	case kindUnknown:
		return "unknown_type"
	case kindStarted:
		return "started"
	case kindToolCall:
		return "tool_call"
	case kindDone:
		return "done"
	default:
		return "malformed"
	}
}

// runnerMessage is one decoded message from the runner.
type runnerMessage struct {
	kind messageKind
	// typ is the message's type, cleaned for logs.
	typ string
	// reason says why a message is malformed.
	reason string

	// hasID reports whether the message carries an "id" at all; id is its
	// value when that is a string ("" otherwise, which matches nothing).
	hasID bool
	id    string

	// tool_call. input is nil when absent or null; inputErr is set when it
	// is not plain JSON.
	callID, provider, tool string
	input                  any
	inputErr               error

	// done
	done outcome
}

// matches reports whether the message belongs to execution id. started and
// done must name it; a tool_call, which the protocol sends without an id,
// must not name another one.
func (m *runnerMessage) matches(id string) bool {
	if m.kind == kindToolCall && !m.hasID {
		return true
	}
	return m.hasID && m.id == id
}

// outcome is what a done message means for the caller.
type outcome struct {
	// code is "" for success, else one of the seven error codes.
	code    string
	message string
	// data is the guest's result on success (nil for undefined).
	data any
	logs []string
	// durationMs is the runner's own measure, -1 when it sent none.
	durationMs float64
}

// decodeRunnerMessage decodes and classifies one message from the runner.
// It never fails: whatever b holds, the result has a kind, and a done
// always carries an outcome whose code is "" or a known code.
func decodeRunnerMessage(b []byte) runnerMessage {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil || env == nil {
		return runnerMessage{kind: kindMalformed, reason: "not a JSON object"}
	}
	var typ string
	if err := json.Unmarshal(env["type"], &typ); err != nil || env["type"] == nil {
		return runnerMessage{kind: kindMalformed, reason: `no string "type"`}
	}
	m := runnerMessage{typ: cleanName(typ)}
	if raw, ok := env["id"]; ok {
		m.hasID = true
		if err := json.Unmarshal(raw, &m.id); err != nil {
			m.id = ""
		}
	}
	switch typ {
	case "started":
		m.kind = kindStarted
	case "tool_call":
		decodeToolCall(&m, env)
	case "done":
		m.kind = kindDone
		m.done = decodeDone(env)
	default:
		m.kind = kindUnknown
	}
	return m
}

// decodeToolCall fills in a tool_call. Without a usable callId there is
// nothing to answer, so the message is malformed; a missing or non-string
// provider or tool name only makes the tool unknown.
func decodeToolCall(m *runnerMessage, env map[string]json.RawMessage) {
	if err := json.Unmarshal(env["callId"], &m.callID); err != nil || m.callID == "" {
		*m = runnerMessage{kind: kindMalformed, typ: m.typ, reason: "tool_call without a string callId"}
		return
	}
	if len(m.callID) > maxCallIDBytes || !utf8.ValidString(m.callID) {
		*m = runnerMessage{kind: kindMalformed, typ: m.typ, reason: fmt.Sprintf("tool_call callId is longer than %d bytes or not UTF-8", maxCallIDBytes)}
		return
	}
	m.kind = kindToolCall
	_ = json.Unmarshal(env["providerName"], &m.provider)
	_ = json.Unmarshal(env["safeToolName"], &m.tool)
	if raw, ok := env["input"]; ok {
		m.input, m.inputErr = decodePlain(raw)
	}
}

// decodeDone turns a done message into an outcome.
func decodeDone(env map[string]json.RawMessage) outcome {
	out := outcome{durationMs: -1, logs: decodeLogs(env["logs"])}
	var d float64
	if err := json.Unmarshal(env["durationMs"], &d); err == nil && d >= 0 {
		out.durationMs = d
	}
	var ok bool
	if err := json.Unmarshal(env["ok"], &ok); err != nil || env["ok"] == nil {
		out.code, out.message = codeInternal, `runner sent a done without a boolean "ok"`
		return out
	}
	if ok {
		if raw, present := env["result"]; present {
			v, err := decodePlain(raw)
			if err != nil {
				out.code, out.message = codeSerialization, fmt.Sprintf("result of the execution is %v", err)
				return out
			}
			out.data = v
		}
		return out
	}
	out.code, out.message = decodeError(env["error"])
	return out
}

// decodeError reads the error of a failed done. A code outside the known
// set is never passed on: it becomes internal_error and is quoted in the
// message, so that a runner cannot forge a trusted code nor hide a bug
// behind an invented one.
func decodeError(raw json.RawMessage) (code, message string) {
	var e struct {
		Code    json.RawMessage `json:"code"`
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || raw == nil || bytes.Equal(raw, []byte("null")) {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return codeInternal, cleanText(s, maxMessageText)
		}
		return codeInternal, "runner reported a failure without an error"
	}
	if json.Unmarshal(e.Message, &message) != nil {
		message = ""
	}
	message = cleanText(message, maxMessageText)
	if message == "" {
		message = "runner reported a failure without a message"
	}
	if json.Unmarshal(e.Code, &code) != nil {
		return codeInternal, message + " (runner sent no string error code)"
	}
	if !knownCode(code) {
		return codeInternal, fmt.Sprintf("%s (runner sent the unknown error code %q)", message, cleanName(code))
	}
	return code, message
}

// decodeLogs reads done.logs: a list of strings. Anything else in the list
// is kept as its JSON text; a logs value that is not a list is no logs.
func decodeLogs(raw json.RawMessage) []string {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil
	}
	logs := make([]string, 0, len(items))
	for _, it := range items {
		var s string
		if len(it) == 0 || it[0] != '"' || json.Unmarshal(it, &s) != nil {
			var buf bytes.Buffer
			if json.Compact(&buf, it) == nil {
				s = buf.String()
			} else {
				s = string(it)
			}
		}
		logs = append(logs, s)
	}
	return logs
}

// decodePlain decodes a JSON value from the runner, with numbers as
// json.Number so that no digit is lost. raw must already be syntactically
// valid JSON (it is part of a decoded message). The value must be plain:
// nested at most maxJSONDepth deep, every number finite as a float64.
func decodePlain(raw json.RawMessage) (any, error) {
	if d := jsonDepth(raw); d > maxJSONDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d levels", errNotPlainJSON, maxJSONDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotPlainJSON, err)
	}
	if err := checkNumbers(v); err != nil {
		return nil, err
	}
	return v, nil
}

// jsonDepth returns the deepest nesting of arrays and objects in valid
// JSON text.
func jsonDepth(raw []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// checkNumbers rejects numbers that do not fit a finite float64: a
// JavaScript runner can only have produced them by accident or on purpose,
// and a JavaScript reader would see Infinity.
func checkNumbers(v any) error {
	switch v := v.(type) {
	case json.Number:
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			return fmt.Errorf("%w: number %.40s is not finite", errNotPlainJSON, string(v))
		}
	case []any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, e := range v {
			if err := checkNumbers(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// cleanText makes untrusted text fit for Stderr and error messages: valid
// UTF-8, no control characters but line breaks and tabs, at most limit
// bytes.
func cleanText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// cleanName quotes an untrusted name (a message type, an error code, a
// provider or tool name) in one short line.
func cleanName(s string) string {
	return strings.ReplaceAll(cleanText(s, maxNameText), "\n", " ")
}
