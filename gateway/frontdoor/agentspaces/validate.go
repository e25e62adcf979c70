package agentspaces

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/ident"
)

// Operation types of the protocol.
const (
	opMessage    = "message"
	opCreateFile = "createFile"
	opReadFile   = "readFile"
	opEditFile   = "editFile"
	opDeleteFile = "deleteFile"
	opShell      = "shell"
)

// Limits of the protocol's validation rules.
const (
	maxPathChars       = 255
	maxCommandChars    = 4096
	maxMessageChars    = 100000
	maxContentBytes    = 10 << 20
	minTimeoutMs       = 1000
	maxTimeoutMs       = 3600000
	maxOperationIDSize = 128
)

// protocolVersion is the version this door speaks and answers with.
const protocolVersion = "1.0"

var (
	// runIDPattern bounds a runId. It has no ':', which separates the
	// parts of a request id, so one run's ids can never be another's.
	runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// turnPattern bounds an Idempotency-Key: no ':' either.
	turnPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,40}$`)
)

// envNamePattern is the driver's rule for an environment variable.
const envNamePattern = ident.EnvName

// operation is one validated operation of a batch.
type operation struct {
	// Type is the operation's type; ID its correlation id, "" if none.
	Type, ID string
	// Args are the driver's arguments: the operation's fields but type and
	// id.
	Args map[string]any
	// Invalid, when set, is why the operation cannot run; Field names the
	// field at fault.
	Invalid, Field string
}

// eventID is the operationId an event carries for op i: its id, or its
// index when it has none.
func (o operation) eventID(i int) string {
	if o.ID != "" {
		return o.ID
	}
	return fmt.Sprint(i)
}

// detail is what a shell or file operation is about, for events.
func (o operation) detail() (key, value string) {
	if o.Type == opShell {
		s, _ := o.Args["command"].(string)
		return "command", s
	}
	s, _ := o.Args["path"].(string)
	return "path", s
}

// Message kinds a request body can hold.
const (
	kindBatch       = "batch"
	kindApproval    = "approval"
	kindUserMessage = "userMessage"
)

// message is a decoded request body.
type message struct {
	Kind string
	// Ops is a batch's operations.
	Ops []operation
	// Decision is "approved" or "denied" for an approval or a user
	// message that says one of them, "" for any other user message.
	Decision string
	// OperationID, Reason and ApprovalID come from a structured approval.
	OperationID, Reason, ApprovalID string
}

// errMalformed marks a body that is not one of the protocol's messages.
var errMalformed = errors.New("agentspaces: malformed message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// parseMessage decodes a request body: a batch, a structured approval or a
// user message. Only a body that is none of them is an error; a batch's
// malformed operations are marked Invalid, for the batch to go on.
func parseMessage(body []byte, maxOps int) (message, error) {
	var top map[string]json.RawMessage
	if err := decodeStrict(body, &top); err != nil {
		return message{}, malformed("body: %v", err)
	}
	switch {
	case top["operations"] != nil:
		return parseBatch(top, maxOps)
	case top["approval"] != nil:
		return parseApproval(top)
	case top["type"] != nil || top["events"] != nil:
		return parseUserMessage(top)
	}
	return message{}, malformed("body: want operations, approval or a userMessage")
}

// decodeStrict decodes one JSON value with numbers kept exact and nothing
// after it.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

func parseBatch(top map[string]json.RawMessage, maxOps int) (message, error) {
	for k := range top {
		if k != "operations" && k != "protocolVersion" {
			return message{}, malformed("body: unknown field %q", truncate(k))
		}
	}
	if v, ok := top["protocolVersion"]; ok {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return message{}, malformed("protocolVersion: want a string")
		}
		if major, _, _ := strings.Cut(s, "."); major != "1" {
			return message{}, malformed("protocolVersion %q: this runtime speaks 1.x", truncate(s))
		}
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(top["operations"], &raws); err != nil {
		return message{}, malformed("operations: want a list")
	}
	if len(raws) > maxOps {
		return message{}, malformed("operations: %d in one batch, at most %d", len(raws), maxOps)
	}
	m := message{Kind: kindBatch, Ops: make([]operation, len(raws))}
	seen := map[string]bool{}
	for i, raw := range raws {
		op := parseOperation(raw)
		if op.ID != "" && op.Invalid == "" {
			if seen[op.ID] {
				op.Invalid, op.Field = fmt.Sprintf("id %q is used by an earlier operation of the batch", op.ID), "id"
			}
			seen[op.ID] = true
		}
		m.Ops[i] = op
	}
	return m, nil
}

// parseOperation validates one operation against the protocol's rules.
func parseOperation(raw json.RawMessage) operation {
	var fields map[string]json.RawMessage
	if err := decodeStrict(raw, &fields); err != nil || fields == nil {
		return operation{Invalid: "an operation must be a JSON object", Field: "operations"}
	}
	var op operation
	if err := json.Unmarshal(fields["type"], &op.Type); err != nil || fields["type"] == nil {
		return operation{Invalid: "type: want a string", Field: "type"}
	}
	if id, ok := fields["id"]; ok && string(id) != "null" {
		if err := json.Unmarshal(id, &op.ID); err != nil || checkOperationID(op.ID) != nil {
			return operation{Type: op.Type, Invalid: "id: want 1 to 128 bytes of printable text", Field: "id"}
		}
	}
	spec, ok := operationFields[op.Type]
	if !ok {
		op.Type = truncate(op.Type)
		op.Invalid, op.Field = fmt.Sprintf("type %q: want one of message, createFile, readFile, editFile, deleteFile, shell", op.Type), "type"
		return op
	}
	op.Args = map[string]any{}
	for name, raw := range fields {
		if name == "type" || name == "id" {
			continue
		}
		check, known := spec[name]
		if !known {
			op.Invalid, op.Field = fmt.Sprintf("unknown field %q for %s", truncate(name), op.Type), truncate(name)
			return op
		}
		if string(bytes.TrimSpace(raw)) == "null" {
			op.Invalid, op.Field = name+": must not be null", name
			return op
		}
		v, err := check.parse(raw)
		if err != nil {
			op.Invalid, op.Field = fmt.Sprintf("%s: %v", name, err), name
			return op
		}
		op.Args[name] = v
	}
	for name, check := range spec {
		if _, present := op.Args[name]; check.required && !present {
			op.Invalid, op.Field = fmt.Sprintf("%s is required for %s", name, op.Type), name
			return op
		}
	}
	return op
}

// checkOperationID accepts an operation id: 1 to 128 bytes of valid UTF-8
// without control or format characters, since it is echoed in events and
// recorded as the call's step id.
func checkOperationID(id string) error {
	if id == "" || len(id) > maxOperationIDSize || !utf8.ValidString(id) {
		return errors.New("bad id")
	}
	for _, r := range id {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return errors.New("bad id")
		}
	}
	return nil
}

// field is the rule for one field of an operation.
type field struct {
	required bool
	parse    func(json.RawMessage) (any, error)
}

// operationFields lists, per type, the fields other than type and id.
var operationFields = map[string]map[string]field{
	opMessage:    {"content": {true, textOf(maxMessageChars)}},
	opCreateFile: {"path": {true, parsePath}, "content": {true, contentOf}, "encoding": {false, parseEncoding}, "overwrite": {false, parseBool}},
	opReadFile:   {"path": {true, parsePath}, "encoding": {false, parseEncoding}},
	opEditFile:   {"path": {true, parsePath}, "edits": {true, parseEdits}},
	opDeleteFile: {"path": {true, parsePath}},
	opShell:      {"command": {true, textOf(maxCommandChars)}, "cwd": {false, parseCwd}, "timeout": {false, parseTimeout}, "env": {false, parseEnv}},
}

func parseString(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New("want a string")
	}
	return s, nil
}

// textOf accepts a string of at most max characters.
func textOf(max int) func(json.RawMessage) (any, error) {
	return func(raw json.RawMessage) (any, error) {
		s, err := parseString(raw)
		if err != nil {
			return nil, err
		}
		if n := utf8.RuneCountInString(s); n > max {
			return nil, fmt.Errorf("%d characters, at most %d", n, max)
		}
		return s, nil
	}
}

func contentOf(raw json.RawMessage) (any, error) {
	s, err := parseString(raw)
	if err != nil {
		return nil, err
	}
	if len(s) > maxContentBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(s), maxContentBytes)
	}
	return s, nil
}

// parsePath applies the protocol's path rules; a ".." segment is refused,
// a ".." inside a name ("a..b") is a name like any other, as the driver
// sees it. The driver refuses whatever else has no canonical form.
func parsePath(raw json.RawMessage) (any, error) {
	s, err := parseString(raw)
	if err != nil {
		return nil, err
	}
	if err := checkPath(s); err != nil {
		return nil, err
	}
	return s, nil
}

func checkPath(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case strings.HasPrefix(s, "/"):
		return errors.New("must be relative")
	case strings.ContainsRune(s, 0):
		return errors.New("must not hold a NUL byte")
	case utf8.RuneCountInString(s) > maxPathChars:
		return fmt.Errorf("at most %d characters", maxPathChars)
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == ".." {
			return errors.New("must not have a '..' segment")
		}
	}
	return nil
}

func parseCwd(raw json.RawMessage) (any, error) { return parsePath(raw) }

func parseEncoding(raw json.RawMessage) (any, error) {
	s, err := parseString(raw)
	if err != nil {
		return nil, err
	}
	if s != "utf-8" && s != "base64" {
		return nil, errors.New(`want "utf-8" or "base64"`)
	}
	return s, nil
}

func parseBool(raw json.RawMessage) (any, error) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, errors.New("want true or false")
	}
	return b, nil
}

func parseTimeout(raw json.RawMessage) (any, error) {
	var n json.Number
	if err := decodeStrict(raw, &n); err != nil {
		return nil, errors.New("want a number of milliseconds")
	}
	ms, err := n.Int64()
	if err != nil || ms < minTimeoutMs || ms > maxTimeoutMs {
		return nil, fmt.Errorf("want an integer from %d to %d", minTimeoutMs, maxTimeoutMs)
	}
	return float64(ms), nil
}

func parseEnv(raw json.RawMessage) (any, error) {
	var env map[string]string
	if err := json.Unmarshal(raw, &env); err != nil || env == nil {
		return nil, errors.New("want an object of strings")
	}
	out := make(map[string]any, len(env))
	for k, v := range env {
		if !envNamePattern.MatchString(k) {
			return nil, fmt.Errorf("name %q: want %s", truncate(k), envNamePattern)
		}
		out[k] = v
	}
	return out, nil
}

func parseEdits(raw json.RawMessage) (any, error) {
	var edits []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &edits); err != nil || edits == nil {
		return nil, errors.New("want a list of {oldContent, newContent}")
	}
	out := make([]any, len(edits))
	for i, e := range edits {
		if len(e) != 2 || e["oldContent"] == nil || e["newContent"] == nil {
			return nil, fmt.Errorf("edit %d: want exactly oldContent and newContent", i)
		}
		oldC, err1 := parseString(e["oldContent"])
		newC, err2 := parseString(e["newContent"])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("edit %d: oldContent and newContent are strings", i)
		}
		out[i] = map[string]any{"oldContent": oldC, "newContent": newC}
	}
	return out, nil
}

func parseApproval(top map[string]json.RawMessage) (message, error) {
	if len(top) != 1 {
		return message{}, malformed("body: an approval message holds only approval")
	}
	var a struct {
		OperationID string `json:"operationId"`
		Decision    string `json:"decision"`
		Reason      string `json:"reason"`
		ApprovalID  string `json:"approvalId"`
	}
	dec := json.NewDecoder(bytes.NewReader(top["approval"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return message{}, malformed("approval: %v", err)
	}
	if a.Decision != "approved" && a.Decision != "denied" {
		return message{}, malformed(`approval.decision: want "approved" or "denied"`)
	}
	if a.OperationID == "" && a.ApprovalID == "" {
		return message{}, malformed("approval: operationId or approvalId is required")
	}
	return message{Kind: kindApproval, Decision: a.Decision, OperationID: a.OperationID, Reason: a.Reason, ApprovalID: a.ApprovalID}, nil
}

// parseUserMessage reads {"type":"userMessage","content"} or a list of
// events holding user messages. Only "approved" and "denied" mean
// something to a runtime that runs operations; the last user message
// counts.
func parseUserMessage(top map[string]json.RawMessage) (message, error) {
	type userMsg struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	var msgs []userMsg
	if raw, ok := top["events"]; ok {
		var evs []json.RawMessage
		if err := json.Unmarshal(raw, &evs); err != nil {
			return message{}, malformed("events: want a list")
		}
		for _, e := range evs {
			var u userMsg
			if err := json.Unmarshal(e, &u); err != nil {
				return message{}, malformed("events: want objects")
			}
			if u.Type == kindUserMessage {
				msgs = append(msgs, u)
			}
		}
	} else {
		var u userMsg
		if err := json.Unmarshal(top["type"], &u.Type); err != nil || u.Type != kindUserMessage {
			return message{}, malformed(`type: want "userMessage"`)
		}
		if err := json.Unmarshal(top["content"], &u.Content); err != nil {
			return message{}, malformed("content: want a string")
		}
		msgs = append(msgs, u)
	}
	if len(msgs) == 0 {
		return message{}, malformed("events: no userMessage")
	}
	m := message{Kind: kindUserMessage}
	switch strings.ToLower(strings.TrimSpace(msgs[len(msgs)-1].Content)) {
	case "approved":
		m.Decision = "approved"
	case "denied":
		m.Decision = "denied"
	}
	return m, nil
}

// truncate keeps what is echoed of a caller's text short.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	for i := max; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return ""
}
