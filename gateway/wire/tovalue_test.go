package wire

import (
	"encoding/json"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
)

// checkDirectValue asserts directValue's promise for v: when it converts
// v, its Value is the one the JSON round trip gives. It reports whether it
// converted v.
func checkDirectValue(t *testing.T, v any) bool {
	t.Helper()
	direct, ok := directValue(v, 1)
	if !ok {
		return false
	}
	want, err := toValueByJSON(v)
	if err != nil {
		t.Fatalf("converted %#v directly, but the JSON round trip refuses it: %v", v, err)
	}
	if !proto.Equal(direct, want) {
		t.Fatalf("directly %v, by JSON %v", direct, want)
	}
	return true
}

func TestToValueConvertsPlainJSONDirectly(t *testing.T) {
	t.Parallel()
	deep := any("leaf")
	for range maxDirectDepth {
		deep = []any{deep}
	}
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	type custom struct{ A int }
	for _, tc := range []struct {
		name   string
		v      any
		direct bool
	}{
		{"a decoded JSON object converts directly", map[string]any{"done": true, "n": 1e21, "tiny": 5e-324, "neg": -0.0,
			"s": "<a> & \u2028 é \x00", "l": []any{nil, 2.5, "x", map[string]any{}}, "": []any{}}, true},
		{"ints convert as their nearest float64", map[string]any{"max": math.MaxInt64, "min": int64(math.MinInt64), "odd": 1<<53 + 1}, true},
		{"typed nil maps and lists are null", map[string]any{"m": map[string]any(nil), "l": []any(nil)}, true},
		{"a string that is not UTF-8 takes the round trip", map[string]any{"s": "\xff"}, false},
		{"a key that is not UTF-8 takes the round trip", map[string]any{"\xfe": 1.0}, false},
		{"a NaN takes the round trip, which refuses it", []any{math.NaN()}, false},
		{"another Go type takes the round trip", map[string]any{"c": custom{A: 1}, "n": json.Number("12")}, false},
		{"nesting beyond the bound takes the round trip", deep, false},
		{"a cycle takes the round trip, which refuses it", cyclic, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkDirectValue(t, tc.v); got != tc.direct {
				t.Fatalf("converted directly: %v, want %v", got, tc.direct)
			}
			got, gotErr := ToValue(tc.v)
			want, wantErr := toValueByJSON(tc.v)
			if (gotErr != nil) != (wantErr != nil) || !proto.Equal(got, want) {
				t.Fatalf("toValue = %v, %v; by JSON %v, %v", got, gotErr, want, wantErr)
			}
		})
	}
}

// FuzzToValue checks directValue against the JSON round trip on decoded
// JSON with one Go value the decoder never makes put in.
func FuzzToValue(f *testing.F) {
	f.Add([]byte(`{"a":[1,"b",null,true,{"c":-2.5e-8}]}`), uint8(0), "k", int64(7), 0.5)
	f.Add([]byte(`[1e308, -0, "\u2028"]`), uint8(2), "\xff", int64(-1), math.Inf(1))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8, s string, n int64, x float64) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			v = map[string]any{}
		}
		var extra any
		switch kind % 6 {
		case 0:
			extra = s
		case 1:
			extra = n
		case 2:
			extra = x
		case 3:
			extra = int(n)
		case 4:
			extra = map[string]any{s: x}
		case 5:
			extra = []any(nil)
		}
		switch c := v.(type) {
		case map[string]any:
			c[s] = extra
		case []any:
			v = append(c, extra)
		default:
			v = []any{c, extra}
		}
		checkDirectValue(t, v)
	})
}
