// Package wire holds the forms a call takes on the wire and in
// response.json that need no gateway: the response's JSON encoding and
// decoding, a driver's output as a protobuf Value, the check that a
// response reads back unchanged, and the scan that bounds a request's args
// before they are decoded. It never imports gateway.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// MarshalResponse encodes a response as the contract's JSON, the form of
// response.json and of `toolgate call`'s output.
func MarshalResponse(r *toolgatev1.RunToolResponse) ([]byte, error) {
	out := evidence.ResponseRecord{
		OK: r.GetOk(),
		PolicyCheck: evidence.ResponsePolicyCheck{
			Decision: r.GetPolicyCheck().GetDecision(),
			Reason:   r.GetPolicyCheck().GetReason(),
			RuleID:   r.GetPolicyCheck().GetRuleId(),
			// Omitted when empty, so responses of rules without one keep
			// their bytes.
			Suggestion:   r.GetPolicyCheck().GetSuggestion(),
			RetryAfterMS: r.GetPolicyCheck().GetRetryAfterMs(),
		},
		EvidenceRefs:       nonNil(r.GetEvidenceRefs()),
		LocalEvidencePaths: r.GetLocalEvidencePaths(),
		EngineRef:          r.GetEngineRef(),
		RunID:              r.GetRunId(),
		StepID:             r.GetStepId(),
	}
	if pa := r.GetPendingApproval(); pa != nil {
		out.PendingApproval = &evidence.ResponsePendingApproval{
			ApprovalID: pa.GetApprovalId(), Reason: pa.GetReason(), ExpiresAt: pa.GetExpiresAt().AsTime().UTC(),
			RuleID: pa.GetRuleId(), Approvers: pa.GetApprovers(), RequestHash: pa.GetRequestHash(),
		}
	}
	if tr := r.GetToolResult(); tr != nil {
		out.ToolResult = &evidence.ResponseToolResult{ExitCode: tr.GetExitCode(), Stdout: tr.GetStdout(), Stderr: tr.GetStderr()}
		if tr.GetData() != nil {
			data, err := protojson.Marshal(tr.GetData())
			if err != nil {
				return nil, fmt.Errorf("response: tool_result.data: %w", err)
			}
			out.ToolResult.Data = data
		}
	}
	return MarshalJSON(out)
}

// DecodeResponse reads response.json back into the wire type. The proto
// field names are the contract's, which protojson accepts. The seal, which
// is not the caller's, is left out.
func DecodeResponse(data []byte) (*toolgatev1.RunToolResponse, error) {
	data, _, _ = trust.Split(data)
	var r toolgatev1.RunToolResponse
	if err := protojson.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return &r, nil
}

// ToValue converts a driver's structured output into a protobuf Value by way
// of JSON, the form drivers promise it has. Plain JSON values (what
// encoding/json decodes into, and ints) are converted directly, to the
// Value the JSON round trip gives (FuzzToValue pins it); anything else
// takes the round trip.
func ToValue(v any) (*structpb.Value, error) {
	if v == nil {
		return nil, nil
	}
	if out, ok := directValue(v, 1); ok {
		return out, nil
	}
	return toValueByJSON(v)
}

// maxDirectDepth bounds the nesting directValue converts; deeper values,
// and values built in Go with a cycle, take the JSON round trip, which
// reports them.
const maxDirectDepth = 64

// directValue converts v to the Value that json.Marshal followed by
// protojson.Unmarshal gives, or reports false when v holds something it
// does not convert exactly that way: another Go type, a string or key
// that is not valid UTF-8 (JSON encoding replaces its bytes), a NaN or an
// infinity (no JSON form), or nesting beyond maxDirectDepth.
func directValue(v any, depth int) (*structpb.Value, bool) {
	if depth > maxDirectDepth {
		return nil, false
	}
	switch v := v.(type) {
	case nil:
		return structpb.NewNullValue(), true
	case bool:
		return structpb.NewBoolValue(v), true
	case string:
		return structpb.NewStringValue(v), utf8.ValidString(v)
	case float64:
		return structpb.NewNumberValue(v), !math.IsNaN(v) && !math.IsInf(v, 0)
	case int:
		// JSON carries the decimal digits; reading them back rounds to
		// the nearest float64, as the conversion does.
		return structpb.NewNumberValue(float64(v)), true
	case int64:
		return structpb.NewNumberValue(float64(v)), true
	case map[string]any:
		if v == nil {
			return structpb.NewNullValue(), true
		}
		fields := make(map[string]*structpb.Value, len(v))
		for k, item := range v {
			if !utf8.ValidString(k) {
				return nil, false
			}
			cv, ok := directValue(item, depth+1)
			if !ok {
				return nil, false
			}
			fields[k] = cv
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: fields}), true
	case []any:
		if v == nil {
			return structpb.NewNullValue(), true
		}
		values := make([]*structpb.Value, len(v))
		for i, item := range v {
			cv, ok := directValue(item, depth+1)
			if !ok {
				return nil, false
			}
			values[i] = cv
		}
		return structpb.NewListValue(&structpb.ListValue{Values: values}), true
	}
	return nil, false
}

// toValueByJSON is ToValue's round trip through JSON.
func toValueByJSON(v any) (*structpb.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("tool_result.data is not JSON: %w", err)
	}
	var out structpb.Value
	if err := protojson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("tool_result.data: %w", err)
	}
	return &out, nil
}

func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	return EncodeJSON(&buf, v)
}

// EncodeJSON is MarshalJSON encoding by way of buf, which it resets; the
// result does not share buf's memory.
func EncodeJSON(buf *bytes.Buffer, v any) ([]byte, error) {
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// Indented: auditors read these files, and the redactor keeps the
	// layout it is given. AppendIndent writes what the Encoder's own
	// SetIndent would, with less work; the Encoder's final newline is
	// kept.
	compact := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	out := evidence.AppendIndent(make([]byte, 0, len(compact)+len(compact)/2+1), compact)
	return append(out, '\n'), nil
}

// ReadBack returns DecodeResponse(MarshalResponse(resp)) without encoding
// or decoding, when it can tell what that is: the fields MarshalResponse
// writes, each as decoding gives it back (an absent policy_check as an
// empty one). That holds when every string is valid UTF-8, which JSON
// encoding would otherwise change, and tool_result.data is a value
// protojson writes and reads back unchanged (wellFormedValue). A pending
// approval, never stored as response.json, is not read back here. ok is
// false when ReadBack cannot tell; TestReadBackIsWhatDecodingGives and
// FuzzReadBack pin the equality.
func ReadBack(resp *toolgatev1.RunToolResponse) (reply *toolgatev1.RunToolResponse, ok bool) {
	pc := resp.GetPolicyCheck()
	if resp.GetPendingApproval() != nil ||
		!validStrings(resp.GetEngineRef(), resp.GetRunId(), resp.GetStepId(),
			pc.GetDecision(), pc.GetReason(), pc.GetRuleId(), pc.GetSuggestion()) ||
		!validStrings(resp.GetEvidenceRefs()...) || !validStrings(resp.GetLocalEvidencePaths()...) {
		return nil, false
	}
	reply = &toolgatev1.RunToolResponse{
		Ok: resp.GetOk(),
		PolicyCheck: &toolgatev1.PolicyCheck{
			Decision: pc.GetDecision(), Reason: pc.GetReason(), RuleId: pc.GetRuleId(), Suggestion: pc.GetSuggestion(),
			RetryAfterMs: pc.GetRetryAfterMs(),
		},
		EvidenceRefs:       resp.GetEvidenceRefs(),
		LocalEvidencePaths: resp.GetLocalEvidencePaths(),
		EngineRef:          resp.GetEngineRef(),
		RunId:              resp.GetRunId(),
		StepId:             resp.GetStepId(),
	}
	if tr := resp.GetToolResult(); tr != nil {
		if !validStrings(tr.GetStdout(), tr.GetStderr()) || (tr.GetData() != nil && !wellFormedValue(tr.GetData(), 1)) {
			return nil, false
		}
		reply.ToolResult = &toolgatev1.ToolResult{
			ExitCode: tr.GetExitCode(), Stdout: tr.GetStdout(), Stderr: tr.GetStderr(), Data: tr.GetData(),
		}
	}
	return reply, true
}

func validStrings(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// maxReadBackDepth bounds the nesting ReadBack vouches for, far inside
// protojson's own limit on reading.
const maxReadBackDepth = 64

// wellFormedValue reports whether protojson writes v and reads it back as
// an equal value: a kind is set everywhere, numbers are finite, strings
// and keys are valid UTF-8, no message carries unknown fields (JSON does
// not write them), and v is nested at most maxReadBackDepth levels.
func wellFormedValue(v *structpb.Value, depth int) bool {
	if depth > maxReadBackDepth || hasUnknown(v) {
		return false
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue, *structpb.Value_BoolValue:
		return true
	case *structpb.Value_NumberValue:
		return !math.IsNaN(k.NumberValue) && !math.IsInf(k.NumberValue, 0)
	case *structpb.Value_StringValue:
		return utf8.ValidString(k.StringValue)
	case *structpb.Value_StructValue:
		if k.StructValue == nil || hasUnknown(k.StructValue) {
			return false
		}
		for key, item := range k.StructValue.GetFields() {
			if !utf8.ValidString(key) || !wellFormedValue(item, depth+1) {
				return false
			}
		}
		return true
	case *structpb.Value_ListValue:
		if k.ListValue == nil || hasUnknown(k.ListValue) {
			return false
		}
		for _, item := range k.ListValue.GetValues() {
			if !wellFormedValue(item, depth+1) {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// hasUnknown reports whether m carries fields its schema does not name,
// as a message decoded from another version's wire form may.
func hasUnknown(m proto.Message) bool {
	return len(m.ProtoReflect().GetUnknown()) > 0
}

// nonNil keeps an empty list a list in JSON.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
