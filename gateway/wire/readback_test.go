package wire

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// checkReadBack asserts readBack's promise for resp: when it answers, its
// answer is what decoding MarshalResponse(resp) gives. It reports whether
// readBack answered.
func checkReadBack(t *testing.T, resp *toolgatev1.RunToolResponse) bool {
	t.Helper()
	reply, ok := ReadBack(resp)
	body, err := MarshalResponse(resp)
	if err != nil {
		if ok {
			t.Fatalf("readBack answered for a response MarshalResponse refuses: %v", err)
		}
		return false
	}
	want, err := DecodeResponse(body)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("readBack answered for bytes that do not decode: %v\n%s", err, body)
	}
	if !proto.Equal(reply, want) {
		t.Fatalf("readBack gave\n%v\ndecoding gives\n%v", reply, want)
	}
	return true
}

func TestReadBackIsWhatDecodingGives(t *testing.T) {
	t.Parallel()
	data, _ := structpb.NewValue(map[string]any{
		"done": true, "n": 1e21, "small": 1e-7, "neg": -0.0, "s": "<tag> & \u2028 \x00 é",
		"list": []any{nil, 1.5, "x", map[string]any{}}, "empty": []any{},
	})
	invalid := string([]byte{0xff, 'a'})
	withUnknown := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown([]byte{0xc2, 0x3e, 0x01, '0'}) // field 1000, bytes "0"
		return m
	}
	unknownInList := structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
		withUnknown(structpb.NewNumberValue(1)).(*structpb.Value)}})
	unknownOnList := structpb.NewListValue(withUnknown(&structpb.ListValue{}).(*structpb.ListValue))
	unknownOnStruct := structpb.NewStructValue(withUnknown(&structpb.Struct{}).(*structpb.Struct))
	nested := structpb.NewNullValue()
	for range maxReadBackDepth + 1 {
		nested = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{nested}})
	}
	for _, tc := range []struct {
		name     string
		resp     *toolgatev1.RunToolResponse
		answered bool
	}{
		{"an allowed call's response is read back without decoding", &toolgatev1.RunToolResponse{
			Ok: true, ToolResult: &toolgatev1.ToolResult{Stdout: "ok\n", Stderr: "warn", ExitCode: 0, Data: data},
			PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "allow", Reason: "r", RuleId: "allow_noop", Suggestion: "s"},
			EvidenceRefs: []string{"requests/a/request.json"}, LocalEvidencePaths: []string{"/tmp/t.jsonl"},
			EngineRef: "bench/noop", RunId: "run", StepId: "step",
		}, true},
		{"a denied call's response is read back without decoding", &toolgatev1.RunToolResponse{
			PolicyCheck: &toolgatev1.PolicyCheck{Decision: "deny", Reason: "no"}, EngineRef: "bench",
		}, true},
		{"a rate-limit deny's retry hint is read back", &toolgatev1.RunToolResponse{
			PolicyCheck: &toolgatev1.PolicyCheck{Decision: "deny", Reason: "too many (retry after 31s)", RuleId: "rate", RetryAfterMs: 31000},
			EngineRef:   "bench",
		}, true},
		{"a response without a policy check reads back with an empty one", &toolgatev1.RunToolResponse{}, true},
		{"a failed tool's exit code and empty data read back", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{ExitCode: -3}, PolicyCheck: &toolgatev1.PolicyCheck{},
		}, true},
		{"output that is not UTF-8 is decoded, since encoding changes it", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Stdout: invalid},
		}, false},
		{"a reason that is not UTF-8 is decoded", &toolgatev1.RunToolResponse{
			PolicyCheck: &toolgatev1.PolicyCheck{Reason: invalid},
		}, false},
		{"an evidence ref that is not UTF-8 is decoded", &toolgatev1.RunToolResponse{EvidenceRefs: []string{"a", invalid}}, false},
		{"data with an unset value is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{{}}})},
		}, false},
		{"data with a NaN is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: structpb.NewNumberValue(math.NaN())},
		}, false},
		{"a value with unknown fields, which JSON drops, is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: unknownInList},
		}, false},
		{"a list with unknown fields is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: unknownOnList},
		}, false},
		{"a struct with unknown fields is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: unknownOnStruct},
		}, false},
		{"unknown fields outside data are dropped as decoding drops them", withUnknown(&toolgatev1.RunToolResponse{
			ToolResult:  withUnknown(&toolgatev1.ToolResult{Stdout: "x"}).(*toolgatev1.ToolResult),
			PolicyCheck: withUnknown(&toolgatev1.PolicyCheck{Decision: "allow"}).(*toolgatev1.PolicyCheck),
		}).(*toolgatev1.RunToolResponse), true},
		{"data nested beyond the bound is left to decoding", &toolgatev1.RunToolResponse{
			ToolResult: &toolgatev1.ToolResult{Data: nested},
		}, false},
		{"a pending approval is left to decoding", &toolgatev1.RunToolResponse{
			PendingApproval: &toolgatev1.PendingApproval{ApprovalId: "a", ExpiresAt: timestamppb.New(time.Unix(1e9, 5))},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkReadBack(t, tc.resp); got != tc.answered {
				t.Fatalf("readBack answered: %v, want %v", got, tc.answered)
			}
		})
	}
}

// FuzzReadBack checks readBack against decoding on arbitrary responses,
// with one field set to a string the wire would not carry (it may be
// invalid UTF-8).
func FuzzReadBack(f *testing.F) {
	data, _ := structpb.NewValue(map[string]any{"a": []any{1.0, "b", nil, true, map[string]any{"c": -2.5e-8}}})
	seed, _ := proto.Marshal(&toolgatev1.RunToolResponse{
		Ok: true, ToolResult: &toolgatev1.ToolResult{Stdout: "ok", ExitCode: 2, Data: data},
		PolicyCheck: &toolgatev1.PolicyCheck{Decision: "allow"}, EvidenceRefs: []string{"x"}, RunId: "r",
	})
	unknown := structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1e-76)}})
	unknown.GetListValue().GetValues()[0].ProtoReflect().SetUnknown([]byte{0xc2, 0x3e, 0x01, '0'})
	seedUnknown, _ := proto.Marshal(&toolgatev1.RunToolResponse{ToolResult: &toolgatev1.ToolResult{Data: unknown}})
	f.Add(seed, uint8(0), "\u2028")
	f.Add(seedUnknown, uint8(9), "")
	f.Add(seed, uint8(3), "\xff")
	f.Add([]byte{}, uint8(9), "")
	f.Fuzz(func(t *testing.T, wire []byte, field uint8, s string) {
		var resp toolgatev1.RunToolResponse
		if proto.Unmarshal(wire, &resp) != nil {
			resp.Reset()
		}
		switch field % 10 {
		case 0:
			resp.EngineRef = s
		case 1:
			resp.RunId = s
		case 2:
			resp.PolicyCheck = &toolgatev1.PolicyCheck{Reason: s}
		case 3:
			resp.ToolResult = &toolgatev1.ToolResult{Stdout: s, Data: resp.GetToolResult().GetData()}
		case 4:
			resp.EvidenceRefs = append(resp.EvidenceRefs, s)
		case 5:
			resp.ToolResult = &toolgatev1.ToolResult{Data: structpb.NewStringValue(s)}
		case 6:
			resp.ToolResult = &toolgatev1.ToolResult{Data: structpb.NewStructValue(&structpb.Struct{
				Fields: map[string]*structpb.Value{s: structpb.NewNumberValue(float64(len(s)) / 7)}})}
		}
		checkReadBack(t, &resp)
	})
}
