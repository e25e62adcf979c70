package policy

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go/types"
)

func mustDecimal(t *testing.T, s string) types.Decimal {
	t.Helper()
	d, err := types.ParseDecimal(s)
	if err != nil {
		t.Fatalf("ParseDecimal(%q): %v", s, err)
	}
	return d
}

// decodeArgs decodes a JSON object the way the gateway does.
func decodeArgs(t testing.TB, doc string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	return m
}

func TestArgsValueNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		json string
		want func(t *testing.T) types.Value
	}{
		{"small integer", `7`, long(7)},
		{"negative integer", `-42`, long(-42)},
		{"int64 max", `9223372036854775807`, long(math.MaxInt64)},
		{"int64 min", `-9223372036854775808`, long(math.MinInt64)},
		{"just above int64 max", `9223372036854775808`, str("9223372036854775808")},
		{"twenty digits", `12345678901234567890`, str("12345678901234567890")},
		{"exponent integer", `1e3`, long(1000)},
		{"upper-case exponent with plus", `2E+2`, long(200)},
		{"fraction times exponent is whole", `1.5e1`, long(15)},
		{"negative exponent whole", `100e-2`, long(1)},
		{"whole number with fraction digits", `3.000`, long(3)},
		{"negative zero", `-0.0`, long(0)},
		{"zero with huge exponent", `0e999999999999999999999`, long(0)},
		{"one tenth", `0.1`, dec("0.1")},
		{"four places", `-12.3456`, dec("-12.3456")},
		{"trailing zeros beyond four places", `2.500000`, dec("2.5")},
		{"negative exponent fraction", `1.25e-2`, dec("0.0125")},
		{"decimal max", `922337203685477.5807`, dec("922337203685477.5807")},
		{"decimal min", `-922337203685477.5808`, dec("-922337203685477.5808")},
		{"above decimal max", `922337203685477.5808`, str("922337203685477.5808")},
		{"five places", `1.23456`, str("1.23456")},
		{"too small for decimal", `1e-5`, str("1e-5")},
		{"too large for anything", `1e400`, str("1e400")},
		{"huge exponent", `1e999999999999999999999`, str("1e999999999999999999999")},
		{"huge negative exponent", `-1e-999999999999999999999`, str("-1e-999999999999999999999")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := ArgsValue(decodeArgs(t, `{"n":`+tt.json+`}`))
			if err != nil {
				t.Fatalf("ArgsValue: %v", err)
			}
			got, ok := rec.Get("n")
			if !ok {
				t.Fatalf("attribute n missing from %v", rec)
			}
			want := tt.want(t)
			if !got.Equal(want) {
				t.Errorf("%s mapped to %T %v, want %T %v", tt.json, got, got, want, want)
			}
		})
	}
}

func long(i int64) func(*testing.T) types.Value {
	return func(*testing.T) types.Value { return types.Long(i) }
}

func str(s string) func(*testing.T) types.Value {
	return func(*testing.T) types.Value { return types.String(s) }
}

func dec(s string) func(*testing.T) types.Value {
	return func(t *testing.T) types.Value { return mustDecimal(t, s) }
}

func TestArgsValueStructure(t *testing.T) {
	t.Parallel()
	got, err := ArgsValue(decodeArgs(t, `{
		"path": "docs/a.md",
		"force": true,
		"gone": null,
		"tags": ["a", null, "b", "a"],
		"nested": {"keep": 1, "drop": null, "deeper": {"x": [null]}},
		"empty": {}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := types.NewRecord(types.RecordMap{
		"path":  types.String("docs/a.md"),
		"force": types.True,
		"tags":  types.NewSet(types.String("a"), types.String("b")),
		"nested": types.NewRecord(types.RecordMap{
			"keep":   types.Long(1),
			"deeper": types.NewRecord(types.RecordMap{"x": types.NewSet()}),
		}),
		"empty": types.NewRecord(nil),
	})
	if !got.Equal(want) {
		t.Errorf("ArgsValue =\n%s\nwant\n%s", got.MarshalCedar(), want.MarshalCedar())
	}
}

func TestArgsValueGoTypes(t *testing.T) {
	t.Parallel()
	got, err := ArgsValue(map[string]any{"f": 2.5, "whole": 3.0, "i": 4, "i64": int64(-5)})
	if err != nil {
		t.Fatal(err)
	}
	want := types.NewRecord(types.RecordMap{
		"f":     mustDecimal(t, "2.5"),
		"whole": types.Long(3),
		"i":     types.Long(4),
		"i64":   types.Long(-5),
	})
	if !got.Equal(want) {
		t.Errorf("ArgsValue = %s, want %s", got.MarshalCedar(), want.MarshalCedar())
	}
}

func TestArgsValueNil(t *testing.T) {
	t.Parallel()
	got, err := ArgsValue(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 0 {
		t.Errorf("ArgsValue(nil) = %s, want an empty record", got.MarshalCedar())
	}
}

func TestArgsValueErrors(t *testing.T) {
	t.Parallel()
	deep := map[string]any{}
	cur := deep
	for range maxArgsDepth {
		next := map[string]any{}
		cur["d"] = next
		cur = next
	}
	deepList := map[string]any{}
	var list any = "leaf"
	for range maxArgsDepth {
		list = []any{list}
	}
	deepList["l"] = list

	tests := []struct {
		name     string
		args     map[string]any
		wantPath string
	}{
		{"invalid json.Number", map[string]any{"n": json.Number("1.2.3")}, "args.n"},
		{"empty json.Number", map[string]any{"n": json.Number("")}, "args.n"},
		{"leading zero", map[string]any{"n": json.Number("012")}, "args.n"},
		{"NaN", map[string]any{"x": []any{math.NaN()}}, "args.x[0]"},
		{"infinity", map[string]any{"x": math.Inf(1)}, "args.x"},
		{"unsupported type", map[string]any{"o": map[string]any{"f": struct{}{}}}, "args.o.f"},
		{"too deep object", deep, "args" + strings.Repeat(".d", maxArgsDepth)},
		{"too deep array", deepList, "args.l" + strings.Repeat("[0]", maxArgsDepth-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ArgsValue(tt.args)
			if err == nil {
				t.Fatal("ArgsValue succeeded, want an error")
			}
			if !strings.HasPrefix(err.Error(), tt.wantPath+":") {
				t.Errorf("error %q does not start with the path %q", err, tt.wantPath)
			}
		})
	}
}

func TestArgsValueSizeLimits(t *testing.T) {
	t.Parallel()
	array := func(n int) []any {
		a := make([]any, n)
		for i := range a {
			a[i] = json.Number(strconv.Itoa(i))
		}
		return a
	}
	withNulls := append(array(maxSetElements), nil, nil)
	many := map[string]any{}
	for i := range maxTotalSetElements / maxSetElements {
		many["a"+strconv.Itoa(i)] = array(maxSetElements)
	}
	tooMany := map[string]any{"nested": []any{many, array(1)}}

	tests := []struct {
		name    string
		args    map[string]any
		wantErr string // "" for success
	}{
		{"largest array", map[string]any{"a": array(maxSetElements)}, ""},
		{"nulls do not count", map[string]any{"a": withNulls}, ""},
		{"array too large", map[string]any{"a": array(maxSetElements + 1)}, "args.a: 1001 elements"},
		{"all arrays at the limit", many, ""},
		{"all arrays beyond the limit", tooMany, "more than 10000 array elements"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ArgsValue(tt.args)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ArgsValue: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ArgsValue error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestArgsValueDepthLimitIsInclusive(t *testing.T) {
	t.Parallel()
	m := map[string]any{}
	cur := m
	for range maxArgsDepth - 1 {
		next := map[string]any{}
		cur["d"] = next
		cur = next
	}
	if _, err := ArgsValue(m); err != nil {
		t.Errorf("%d levels of nesting rejected: %v", maxArgsDepth, err)
	}
}

// emptySession and emptyCaller are the history records of a first call.
func emptySession() types.Record {
	return types.NewRecord(types.RecordMap{
		"calls": types.Long(0), "toolCalls": types.Long(0), "labels": types.NewSet(),
	})
}

func emptyCaller() types.Record {
	return types.NewRecord(types.RecordMap{
		"callsLastMinute": types.Long(0), "toolCallsLastMinute": types.Long(0),
	})
}

func TestContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  Request
		want types.RecordMap
	}{
		{
			name: "minimal request gets the default policy ref and empty args",
			req:  Request{RequestID: "r1"},
			want: types.RecordMap{
				"requestId": types.String("r1"),
				"policyRef": types.String(DefaultRef),
				"args":      types.NewRecord(nil),
				"session":   emptySession(),
				"caller":    emptyCaller(),
			},
		},
		{
			name: "optional attributes appear when set",
			req: Request{
				RequestID: "r2", RunID: "run", StepID: "step", ParentRequestID: "r1",
				PolicyRef: "team", Args: map[string]any{"path": "a"},
			},
			want: types.RecordMap{
				"requestId":       types.String("r2"),
				"policyRef":       types.String("team"),
				"runId":           types.String("run"),
				"stepId":          types.String("step"),
				"parentRequestId": types.String("r1"),
				"args":            types.NewRecord(types.RecordMap{"path": types.String("a")}),
				"session":         emptySession(),
				"caller":          emptyCaller(),
			},
		},
		{
			name: "history appears as session and caller",
			req: Request{
				RequestID: "r3",
				History: History{Calls: 4, ToolCalls: 2, Labels: []string{"sensitive", "pii"},
					CallsLastMinute: 7, ToolCallsLastMinute: 3},
			},
			want: types.RecordMap{
				"requestId": types.String("r3"),
				"policyRef": types.String(DefaultRef),
				"args":      types.NewRecord(nil),
				"session": types.NewRecord(types.RecordMap{
					"calls": types.Long(4), "toolCalls": types.Long(2),
					"labels": types.NewSet(types.String("pii"), types.String("sensitive")),
				}),
				"caller": types.NewRecord(types.RecordMap{
					"callsLastMinute": types.Long(7), "toolCallsLastMinute": types.Long(3),
				}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Context(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if want := types.NewRecord(tt.want); !got.Equal(want) {
				t.Errorf("Context = %s, want %s", got.MarshalCedar(), want.MarshalCedar())
			}
		})
	}
}

func TestContextRejectsBadArgs(t *testing.T) {
	t.Parallel()
	if _, err := Context(Request{Args: map[string]any{"c": make(chan int)}}); err == nil {
		t.Error("Context accepted a channel argument")
	}
}
