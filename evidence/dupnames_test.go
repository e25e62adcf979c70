package evidence

import (
	"encoding/json"
	"testing"
)

// TestRejectDuplicateNames: a member name given twice in one object is
// refused however it is spelt, as encoding/json would match it; the same
// name in two objects is not a duplicate.
func TestRejectDuplicateNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		dup        bool
	}{
		{"distinct", `{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`, false},
		{"twice", `{"a":1,"a":2}`, true},
		{"case", `{"key_id":1,"KEY_ID":2}`, true},
		{"escaped", `{"a":1,"\u0061":2}`, true},
		{"escaped case", `{"k":1,"\u004b":2}`, true},
		{"nested twice", `{"x":{"b":1,"b":2}}`, true},
		{"in a value", `{"a":"a","b":"a"}`, false},
		{"quote in a name", `{"a\"b":1,"a\"b":2}`, true},
		{"bad utf-8 folded", "{\"\xff\":1,\"\xfe\":2}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := rejectDuplicateNames([]byte(tc.data)); (err != nil) != tc.dup {
				t.Errorf("rejectDuplicateNames(%q) = %v, want a duplicate: %v", tc.data, err, tc.dup)
			}
		})
	}
}

// FuzzMemberName: the fast path decodes a name as encoding/json does.
func FuzzMemberName(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u0041"`, `"a\"b"`, "\"\xff\"", `"é"`, `"\n"`, `""`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
			return
		}
		var want string
		wantErr := json.Unmarshal(q, &want)
		got, err := memberName(q)
		if wantErr != nil {
			return // the fast path only sees strings a decoder accepted
		}
		if err != nil || got != want {
			t.Fatalf("memberName(%q) = %q, %v; encoding/json says %q", q, got, err, want)
		}
	})
}
