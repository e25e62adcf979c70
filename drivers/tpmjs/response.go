package tpmjs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/drivers"
)

// Exit codes of a Result, one per failure class. The package documentation
// lists which executor error codes fall into which class.
const (
	// ExitToolFailed: the tool ran and failed, or reported an error itself.
	ExitToolFailed = 1
	// ExitInvalidRequest: the request was refused as invalid, by this
	// driver before sending it or by the executor.
	ExitInvalidRequest = 2
	// ExitNotFound: the package or the tool could not be found or loaded.
	ExitNotFound = 3
	// ExitUnauthorized: the executor refused the API key.
	ExitUnauthorized = 4
	// ExitExecutorError: the executor failed, or its answer was unusable.
	ExitExecutorError = 5
	// ExitTimeout: the execution ran out of time.
	ExitTimeout = 124
)

// Codes this driver puts into Stderr for failures that carry no executor
// error code of their own.
const (
	codeInvalidRequest  = "INVALID_REQUEST"
	codeInvalidResponse = "INVALID_RESPONSE"
	codeExecutorError   = "EXECUTOR_ERROR"
	codeUnauthorized    = "UNAUTHORIZED"
	codeTimeout         = "EXECUTION_TIMEOUT"
	codeToolError       = "TOOL_ERROR"
)

// Limits of what Stderr quotes from an answer.
const (
	maxStderrMessage = 8 << 10 // bytes of an executor's message
	maxExcerpt       = 200     // bytes of an unusable body
	maxCodeLen       = 64      // bytes of an error code
)

// defaultToolErrorText stands in for the message of a tool that reported
// an error without one.
const defaultToolErrorText = "the tool reported an error"

// exitCodeFor maps an executor error code of either protocol onto a failure
// class. Unknown codes are executor errors: the executor failed in a way
// this driver cannot interpret.
func exitCodeFor(code string) int {
	switch code {
	case "TOOL_EXECUTION_ERROR", "TOOL_EXECUTION_FAILED":
		return ExitToolFailed
	case "INVALID_REQUEST":
		return ExitInvalidRequest
	case "PACKAGE_NOT_FOUND", "PACKAGE_IMPORT_FAILED", "TOOL_NOT_FOUND", "TOOL_INVALID",
		"INVALID_TOOL", "SCHEMA_UNAVAILABLE", "TOOL_CONFIGURATION_REQUIRED":
		return ExitNotFound
	case "UNAUTHORIZED", "AUTHENTICATION_REQUIRED":
		return ExitUnauthorized
	case "EXECUTION_TIMEOUT":
		return ExitTimeout
	default:
		return ExitExecutorError
	}
}

// failure builds a Result for a failure without tool output.
func failure(exitCode int, code, message string) drivers.Result {
	return drivers.Result{ExitCode: exitCode, Stderr: code + ": " + message}
}

// parseResponse maps one answer of POST /execute-tool onto a Result. It
// accepts the 1.0 format ("error": {"code", "message"}) and the 1.1 format
// ("error": "text" next to "errorCode", "errorStage" and "retryable") under
// any HTTP status, because real executors use status codes inconsistently;
// the body decides the class of a failure (see classify), the status only
// when the body says nothing usable.
//
// body must be complete: callers handle oversized and broken bodies.
func parseResponse(status int, body []byte) drivers.Result {
	r, _ := parseAnswer(status, body)
	return r
}

// answerFacts is what an answer tells about itself, for the evidence.
type answerFacts struct {
	executionTimeMs json.Number // "" when absent or not a number
	format          string      // the failure's wire form: "1.0", "1.1", "plain"; "" for none
}

// parseAnswer is parseResponse, also returning the answer's facts.
func parseAnswer(status int, body []byte) (drivers.Result, answerFacts) {
	fields, err := decodeObject(body)
	if err != nil {
		return unusableBody(status, body, err), answerFacts{}
	}
	facts := answerFacts{executionTimeMs: numberField(fields["executionTimeMs"]), format: wireFormat(fields)}
	r := resultOf(status, body, fields)
	return r, facts
}

// maxNumberLen bounds a number copied from an answer into the evidence.
const maxNumberLen = 24

// numberField decodes raw as a finite JSON number of at most 24 characters,
// or returns "": the executor's number goes into the evidence as written.
func numberField(raw json.RawMessage) json.Number {
	var n json.Number
	if len(raw) == 0 || len(raw) > maxNumberLen || json.Unmarshal(raw, &n) != nil {
		return ""
	}
	if f, err := n.Float64(); err != nil || math.IsInf(f, 0) {
		return ""
	}
	return n
}

// wireFormat names the form of an answer's "error": an object (1.0), a
// string next to a 1.1 code or stage, or a plain string.
func wireFormat(fields map[string]json.RawMessage) string {
	raw, ok := fields["error"]
	if !ok {
		return ""
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '{' {
		return "1.0"
	}
	if _, coded := fields["errorCode"]; coded {
		return "1.1"
	}
	if _, staged := fields["errorStage"]; staged {
		return "1.1"
	}
	return "plain"
}

// resultOf maps a decoded answer onto a Result.
func resultOf(status int, body []byte, fields map[string]json.RawMessage) drivers.Result {
	output, hasOutput := fields["output"]
	success := false
	successKnown := false
	if raw, ok := fields["success"]; ok {
		successKnown = json.Unmarshal(raw, &success) == nil
	}
	if successKnown && success {
		return successResult(output, hasOutput)
	}

	code, message := errorOf(fields)
	if code == "" && !successKnown {
		if _, hasError := fields["error"]; !hasError {
			return unusableBody(status, body, fmt.Errorf(`the JSON object has neither a boolean "success" nor an "error"`))
		}
	}
	var r drivers.Result
	r.ExitCode, code, message = classify(status, fields, code, message)
	r.Stderr = code + ": " + orDefault(message, "(no message)") + details(fields)
	if hasOutput {
		r.Stdout, r.Data = outputOf(output)
	}
	return r
}

// decodeObject decodes body as exactly one JSON object.
func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("the body is empty")
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("the body is not a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return nil, fmt.Errorf("the body is not valid JSON (%v)", err)
	}
	return fields, nil
}

// unusableBody reports a body that is not an answer of the protocol, for
// example an HTML error page of a proxy or a truncated object. A 401 or 403
// status still says that the key was refused.
func unusableBody(status int, body []byte, err error) drivers.Result {
	exitCode, code := ExitExecutorError, codeInvalidResponse
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		exitCode, code = ExitUnauthorized, codeUnauthorized
	case bytes.Contains(body, []byte("FUNCTION_INVOCATION_TIMEOUT")):
		// The hosting platform cut the executor off at its own limit
		// (Vercel answers 504 FUNCTION_INVOCATION_TIMEOUT as plain text).
		exitCode, code = ExitTimeout, codeTimeout
	}
	msg := fmt.Sprintf("HTTP %d: %s", status, err)
	if ex := excerpt(body, maxExcerpt); ex != "" {
		msg += ": " + ex
	}
	if exitCode == ExitTimeout {
		msg = "the hosting platform's time limit ended the call (" + msg + ")"
	}
	return failure(exitCode, code, msg)
}

// successResult builds the Result of "success": true. A tool that caught its
// own error and returned {"error": true, "message": …} did not work, whatever
// the executor says, so that is reported as a tool failure; Stdout and Data
// keep the tool's output either way.
func successResult(output json.RawMessage, hasOutput bool) drivers.Result {
	var r drivers.Result
	if !hasOutput {
		return r
	}
	r.Stdout, r.Data = outputOf(output)
	if msg, caught := caughtError(output); caught {
		r.ExitCode = ExitToolFailed
		r.Stderr = codeToolError + ": " + orDefault(msg, defaultToolErrorText)
	}
	return r
}

// outputOf returns the tool's output as compact JSON text and decoded with
// json.Number for numbers, so that no digit is lost.
func outputOf(raw json.RawMessage) (string, any) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		// Unreachable for a value taken out of a decoded object; keep the
		// text rather than lose it.
		return validUTF8(string(raw)), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return validUTF8(buf.String()), nil
	}
	return validUTF8(buf.String()), v
}

// caughtError reports whether output is an object whose "error" is true,
// the convention of tools that catch their own failures, and its message.
func caughtError(output json.RawMessage) (string, bool) {
	trimmed := bytes.TrimSpace(output)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(trimmed, &obj) != nil {
		return "", false
	}
	var flag bool
	if raw, ok := obj["error"]; !ok || json.Unmarshal(raw, &flag) != nil || !flag {
		return "", false
	}
	var msg string
	if raw, ok := obj["message"]; ok && json.Unmarshal(raw, &msg) == nil {
		return cleanMessage(msg), true
	}
	return "", true
}

// errorOf extracts the error code and message of both formats: "error" as
// an object {code, message} (1.0) or as a string next to "errorCode" (1.1).
// A code inside the error object wins over a top-level one.
func errorOf(fields map[string]json.RawMessage) (code, message string) {
	if raw, ok := fields["error"]; ok {
		var text string
		var obj struct {
			Code    json.RawMessage `json:"code"`
			Message json.RawMessage `json:"message"`
		}
		switch {
		case json.Unmarshal(raw, &text) == nil:
			message = text
		case json.Unmarshal(raw, &obj) == nil:
			code = stringField(obj.Code)
			message = stringField(obj.Message)
		}
	}
	if code == "" {
		code = stringField(fields["errorCode"])
	}
	return cleanCode(code), cleanMessage(message)
}

// details renders the 1.1 fields errorStage and retryable, when present,
// as a suffix of Stderr: they help an operator decide whether a retry can
// succeed, and Data is reserved for the tool's own output.
func details(fields map[string]json.RawMessage) string {
	var parts []string
	if stage := cleanCode(stringField(fields["errorStage"])); stage != "" {
		parts = append(parts, "errorStage: "+stage)
	}
	var retryable bool
	if raw, ok := fields["retryable"]; ok && json.Unmarshal(raw, &retryable) == nil {
		parts = append(parts, fmt.Sprintf("retryable: %t", retryable))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// stringField decodes raw as a JSON string, or returns "".
func stringField(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// cleanCode keeps the characters of an error code that can be shown as is
// (letters, digits, "_", "-", ".") and at most 64 of them.
func cleanCode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < maxCodeLen; i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// cleanMessage makes an executor's message safe to show: valid UTF-8,
// control characters other than line breaks and tabs replaced by spaces,
// surrounding space removed, and at most 8 KiB.
func cleanMessage(s string) string {
	s = strings.TrimSpace(validUTF8(s))
	truncated := false
	if len(s) > maxStderrMessage {
		s = cutUTF8(s, maxStderrMessage)
		truncated = true
	}
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return ' '
	}, s)
	if truncated {
		s += " [message truncated]"
	}
	return s
}

// excerpt returns the start of an unusable body on one line: at most limit
// bytes, valid UTF-8, control characters and runs of white space collapsed
// to single spaces.
func excerpt(body []byte, limit int) string {
	s := validUTF8(string(body[:min(len(body), limit+utf8.UTFMax)]))
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if len(s) > limit {
		return cutUTF8(s, limit) + "…"
	}
	if len(body) > limit+utf8.UTFMax {
		return s + "…"
	}
	return s
}

// validUTF8 replaces invalid UTF-8 sequences with U+FFFD; Result strings end
// up in protobuf messages, which only carry valid UTF-8.
func validUTF8(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// cutUTF8 shortens s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
