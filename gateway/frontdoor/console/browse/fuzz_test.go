package browse

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzMarkers checks that splitting stored text into plain runs and
// redaction markers loses and adds nothing, and marks only whole markers.
func FuzzMarkers(f *testing.F) {
	for _, s := range []string{"", "plain", "a [REDACTED:aws-key] b", "[REDACTED:", "[REDACTED:x", "[REDACTED:]]", "x[REDACTED:" + strings.Repeat("y", 200) + "]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var b strings.Builder
		for _, seg := range markers(text) {
			if seg.Text == "" {
				t.Fatal("an empty segment")
			}
			if seg.Marker && (!strings.HasPrefix(seg.Text, markerPrefix) || !strings.HasSuffix(seg.Text, "]")) {
				t.Fatalf("marker %q is not a whole marker", seg.Text)
			}
			b.WriteString(seg.Text)
		}
		if b.String() != text {
			t.Fatalf("segments join to %q, want %q", b.String(), text)
		}
	})
}

// FuzzFoldArgs checks that folding keeps every value whole, with a head
// that is a prefix of it, cut on a rune boundary.
func FuzzFoldArgs(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"p":"` + strings.Repeat("é", 200) + `"}`, `[1,2]`, `not json`, `{"a":`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, a := range foldArgs([]byte(raw)) {
			if !a.Long {
				continue
			}
			if !strings.HasPrefix(a.Value, a.Head) || len(a.Head)+a.Rest != len(a.Value) {
				t.Fatalf("folded %+v loses bytes", a)
			}
			if utf8.ValidString(a.Value) && !utf8.ValidString(a.Head) {
				t.Fatalf("head %q cuts a rune", a.Head)
			}
		}
	})
}
