package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/internal/argsize"
	"github.com/toolgate/toolgate/internal/ident"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Limits on a request. They bound what one caller can make the gateway
// parse, store and hand to Cedar.
const (
	maxToolIDBytes  = ident.MaxToolIDBytes
	maxArgsBytes    = argsize.MaxBytes
	maxArgsDepth    = argsize.MaxDepth
	maxCtxFieldSize = 256
	defaultPolicy   = "policy.default"
	// maxArgsNodes bounds the values in args (every object member, list
	// item and scalar counts one). It is checked on the wire before args
	// are decoded, so what a caller can make the gateway allocate for one
	// request is bounded by it, whatever the message holds.
	maxArgsNodes = argsize.MaxNodes
	// maxArgsWireBytes bounds the args field as it arrives. Protobuf can
	// take more room than the JSON a value encodes to (a number is 11
	// bytes in a list, "0," 2 in JSON), but at most 24 bytes more per value
	// with all its framing, so any args within maxArgsBytes and
	// maxArgsNodes fit.
	maxArgsWireBytes = maxArgsBytes + 24*maxArgsNodes
	// maxRequestBytes is the transport's cap on one RunToolRequest: args
	// plus request_id (128 bytes), tool_id (256) and three ctx fields (256
	// each) at their limits with their framing, rounded up to 4 KiB.
	maxRequestBytes = maxArgsWireBytes + 4<<10
)

// RequestIDPattern is the form of a request id. It keeps the id inside its
// evidence prefix: no slash, no leading dot, nothing a path could be built
// from. Front doors check a key that becomes a request id against it
// before anything is recorded.
const RequestIDPattern = ident.RequestIDPattern

const requestIDPattern = ident.RequestID

// call is a validated RunTool request in the gateway's own terms.
type call struct {
	RequestID string
	ToolID    string
	RunID     string
	StepID    string
	PolicyRef string // effective: defaultPolicy when the caller gave none
	// ParentRequestID is set on nested calls: the request whose sandboxed
	// code made this call. Such calls are decided as Action::"CallTool".
	ParentRequestID string
	// Args is the canonical JSON of the arguments: keys sorted, numbers as
	// JSON numbers, and (once run has canonicalised them) the arguments
	// that name resources in their driver's canonical form. It is what is
	// hashed, stored, decided on and decoded for drivers.
	Args json.RawMessage
	// FrontDoor is the front door the call came through (see Call); empty
	// for gRPC. It is recorded, never hashed.
	FrontDoor string
	// Identity is what the door proved of the caller besides its name
	// (see Call); its groups and roles reach Cedar. Recorded as auth,
	// never hashed.
	Identity *Identity
	// TraceID is the trace id of the call's traceparent; recorded, never
	// hashed.
	TraceID string
	// decodedArgs, when set, is decodeArgs(Args), which parseRequest
	// builds from the request's Struct without reading Args back. Only
	// prepare reads it, and clears it: Args may change after.
	decodedArgs map[string]any
}

// invalidArgument is a validation failure; its message names the field and
// the rule it broke.
type invalidArgument struct{ msg string }

func (e *invalidArgument) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &invalidArgument{msg: fmt.Sprintf(format, args...)}
}

// parseRequest validates a RunTool request and puts it in canonical form.
func parseRequest(req *toolgatev1.RunToolRequest) (call, error) {
	c := call{
		RequestID: req.GetRequestId(),
		ToolID:    req.GetToolId(),
		RunID:     req.GetCtx().GetRunId(),
		StepID:    req.GetCtx().GetStepId(),
		PolicyRef: req.GetCtx().GetPolicyRef(),
	}
	if !requestIDPattern.MatchString(c.RequestID) {
		return call{}, invalidf("request_id %q: must match %s", ident.Clip(c.RequestID), requestIDPattern)
	}
	if err := ident.ValidateToolID(c.ToolID); err != nil {
		return call{}, invalidf("tool_id: %v", err)
	}
	for _, f := range []struct{ name, value string }{
		{"ctx.run_id", c.RunID}, {"ctx.step_id", c.StepID}, {"ctx.policy_ref", c.PolicyRef},
	} {
		if err := ident.ValidatePrintable(f.value, maxCtxFieldSize); err != nil {
			return call{}, invalidf("%s: %v", f.name, err)
		}
	}
	if c.PolicyRef == "" {
		c.PolicyRef = defaultPolicy
	}
	args := req.GetArgs()
	if args == nil {
		args = &structpb.Struct{}
	}
	if err := checkStruct(args, "args", 1); err != nil {
		return call{}, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args.AsMap()); err != nil {
		return call{}, invalidf("args: not encodable as JSON: %v", err)
	}
	if buf.Len() > maxArgsBytes {
		return call{}, invalidf("args: %d bytes encoded as JSON, the limit is %d", buf.Len(), maxArgsBytes)
	}
	c.Args = bytes.TrimRight(buf.Bytes(), "\n")
	c.decodedArgs = structArgs(args)
	return c, nil
}

// structArgs is what decodeArgs gives for the JSON parseRequest encodes
// s as, built from s directly (a JSON decoder was a twentieth of a denied
// call): objects as map[string]any, lists as []any, numbers as the
// json.Number of the text encoding/json writes for them, an unset value
// as nil, as AsMap has it. s has passed checkStruct. FuzzParseRequest
// pins the equality.
func structArgs(s *structpb.Struct) map[string]any {
	m := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		m[k] = valueArg(v)
	}
	return m
}

func valueArg(v *structpb.Value) any {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return jsonNumber(k.NumberValue)
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_BoolValue:
		return k.BoolValue
	case *structpb.Value_StructValue:
		return structArgs(k.StructValue)
	case *structpb.Value_ListValue:
		items := make([]any, len(k.ListValue.GetValues()))
		for i, item := range k.ListValue.GetValues() {
			items[i] = valueArg(item)
		}
		return items
	}
	return nil // null, or no kind set
}

// jsonNumber is the text encoding/json writes for a finite float64: the
// shortest decimal that reads back as f, in plain notation unless f is
// below 1e-6 or from 1e21 on (as in JavaScript), then in exponent notation
// with at least two exponent digits dropped to one for negative exponents
// (1e-07 is written 1e-7; 1e+21 stays).
func jsonNumber(f float64) json.Number {
	abs := math.Abs(f)
	if abs == 0 || (abs >= 1e-6 && abs < 1e21) {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	text := strconv.FormatFloat(f, 'e', -1, 64)
	if mantissa, exp, ok := strings.Cut(text, "e-0"); ok {
		text = mantissa + "e-" + exp
	}
	return json.Number(text)
}

// checkStruct enforces the depth limit and rejects numbers JSON cannot carry,
// naming the offending path. depth counts the object itself.
func checkStruct(s *structpb.Struct, path string, depth int) error {
	if depth > maxArgsDepth {
		return invalidf("%s: nested deeper than %d levels", path, maxArgsDepth)
	}
	for k, v := range s.GetFields() {
		if !utf8.ValidString(k) {
			return invalidf("%s: key is not valid UTF-8", path)
		}
		if err := checkValue(v, path+"."+k, depth); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(v *structpb.Value, path string, depth int) error {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return invalidf("%s: NaN and infinities are not JSON numbers", ident.Clip(path))
		}
	case *structpb.Value_StringValue:
		if !utf8.ValidString(k.StringValue) {
			return invalidf("%s: string is not valid UTF-8", ident.Clip(path))
		}
	case *structpb.Value_StructValue:
		return checkStruct(k.StructValue, path, depth+1)
	case *structpb.Value_ListValue:
		if depth+1 > maxArgsDepth {
			return invalidf("%s: nested deeper than %d levels", ident.Clip(path), maxArgsDepth)
		}
		for i, item := range k.ListValue.GetValues() {
			if err := checkValue(item, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	case nil:
		// A Value with no kind set is how a sender encodes nothing at all;
		// AsMap turns it into null, like an explicit null.
	}
	return nil
}

// canonicalRequest is the identity of a request: what must match for a
// retry to count as the same request.
type canonicalRequest struct {
	Caller string                  `json:"caller"`
	ToolID string                  `json:"tool_id"`
	Args   json.RawMessage         `json:"args"`
	Ctx    evidence.RequestContext `json:"ctx"`
}

// canonicalHash is the SHA-256 of the canonical JSON of caller, tool_id,
// args and ctx, as "sha256:<hex>". Args are already canonical (sorted keys,
// ES6 number formatting); the struct fixes the order of the rest.
func canonicalHash(caller string, c call) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(canonicalRequest{
		Caller: caller,
		ToolID: c.ToolID,
		Args:   c.Args,
		Ctx:    evidence.RequestContext{RunID: c.RunID, StepID: c.StepID, PolicyRef: c.PolicyRef},
	})
	if err != nil {
		return "", fmt.Errorf("canonical request: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimRight(buf.Bytes(), "\n"))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// decodeArgs gives drivers and policy the arguments as plain JSON values,
// numbers as json.Number so no precision is lost on the way.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode args: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}
