package drivers

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestOmitNulls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"nothing to drop", `{"a":1,"b":[null,2]}`, `{"a":1,"b":[null,2]}`},
		{"a null argument", `{"path":"x","encoding":null}`, `{"path":"x"}`},
		{"nested members", `{"o":{"a":null,"b":{"c":null}}}`, `{"o":{"b":{}}}`},
		{"objects in arrays, array nulls kept", `{"edits":[{"old":"a","all":null},null]}`, `{"edits":[{"old":"a"},null]}`},
		{"all null", `{"a":null}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, before := decodeArgs(t, tc.in), decodeArgs(t, tc.in)
			got, changed := OmitNulls(in)
			if want := decodeArgs(t, tc.want); !reflect.DeepEqual(got, want) {
				t.Errorf("OmitNulls(%s) = %v, want %v", tc.in, got, want)
			}
			if changed != (tc.in != tc.want) {
				t.Errorf("changed = %v", changed)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("OmitNulls modified its argument: %v", in)
			}
		})
	}
}

func decodeArgs(t testing.TB, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// hasNullMember reports whether an object within v has a null member.
func hasNullMember(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if e == nil || hasNullMember(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasNullMember(e) {
				return true
			}
		}
	}
	return false
}

func FuzzOmitNulls(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":null}`, `{"a":[{"b":null},null,[{"c":null}]]}`, `{"a":{"b":{"c":null,"d":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var in map[string]any
		if dec.Decode(&in) != nil || in == nil {
			return
		}
		before, _ := json.Marshal(in)
		out, changed := OmitNulls(in)
		if hasNullMember(out) {
			t.Fatalf("OmitNulls(%s) kept a null member: %v", data, out)
		}
		if after, _ := json.Marshal(in); !bytes.Equal(before, after) {
			t.Fatalf("OmitNulls modified its argument: %s -> %s", before, after)
		}
		if changed != hasNullMember(in) {
			t.Fatalf("OmitNulls(%s): changed = %v", data, changed)
		}
	})
}
