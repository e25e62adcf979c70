package termsafe

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile are the runes a terminal acts on or hides, one of each kind.
var hostile = map[string]rune{
	"ESC": 0x1b, "BEL": 0x07, "CR": '\r', "backspace": 0x08, "DEL": 0x7f,
	"C1 CSI": 0x9b, "C1 OSC": 0x9d, "C1 NEL": 0x85,
	"RLO": 0x202e, "LRO": 0x202d, "RLE": 0x202b, "PDF": 0x202c,
	"LRI": 0x2066, "RLI": 0x2067, "FSI": 0x2068, "PDI": 0x2069,
	"LRM": 0x200e, "RLM": 0x200f, "ALM": 0x061c,
	"ZWSP": 0x200b, "ZWJ": 0x200d, "word joiner": 0x2060, "BOM": 0xfeff,
	"soft hyphen": 0xad, "line separator": 0x2028, "paragraph separator": 0x2029,
	"tag A": 0xe0041, "Hangul filler": 0x3164, "Hangul choseong filler": 0x115f,
	"private use": 0xe000, "replacement": 0xfffd, "interlinear anchor": 0xfff9,
}

func TestSafeRefusesEveryHostileRune(t *testing.T) {
	t.Parallel()
	for name, r := range hostile {
		if Safe(r) {
			t.Errorf("%s U+%04X: Safe, want not", name, r)
		}
	}
	for _, r := range "az AZ09~!ä€漢字😀é" {
		if !Safe(r) {
			t.Errorf("%q: not Safe, want Safe", r)
		}
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"clean stays", "rm -rf ~/x", "rm -rf ~/x"},
		{"empty stays", "", ""},
		{"leading quote is quoted", `"a`, `"\"a"`},
		{"RLO", "ls \u202etxt.exe", `"ls \u202etxt.exe"`},
		{"CSI", "a\u009b2Jb", `"a\u009b2Jb"`},
		{"ESC and DEL", "a\x1b[2J\x7f", `"a\x1b[2J\x7f"`},
		{"invalid byte", "a\x9bb", `"a\x9bb"`},
		{"newline", "a\nb", `"a\nb"`},
		{"tag beyond BMP", "a\U000E0041", `"a\U000e0041"`},
		{"backslash kept unambiguous", "a\\u202e\u2066", `"a\\u202e\u2066"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Quote(tc.in); got != tc.want {
				t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"lines stay", "a\n\tb\n", "a\n\tb\n"},
		{"bidi escaped", "a\u2066b\u2069", `a\u2066b\u2069`},
		{"CR escaped", "ok\rNOT OK", `ok\rNOT OK`},
		{"C1 escaped", "\u009b31m", `\u009b31m`},
		{"invalid byte", "\xff", `\xff`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Text(tc.in); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"clean stays", `{"a": [1, "b"]}`, `{"a": [1, "b"]}`},
		{"RLO", "{\"cmd\":\"ls \u202etxt\"}", `{"cmd":"ls \u202etxt"}`},
		{"CSI and DEL", "[\"\u009b2J\x7f\"]", `["\u009b2J\u007f"]`},
		{"escapes untouched", `["\\\"\u202e\n"]`, `["\\\"\u202e\n"]`},
		{"beyond BMP", "[\"\U000E0041\"]", `["\udb40\udc41"]`},
		{"invalid byte", "[\"\xff\"]", `["\ufffd"]`},
		{"CR between strings", "[1,\r2]", "[1, 2]"},
		{"key escaped", "{\"\u2066\":1}", `{"\u2066":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := JSON([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("JSON(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
	if _, err := JSON([]byte(`{"a":`)); err == nil {
		t.Error("JSON of a truncated document: no error")
	}
}

// unsafeIn returns the first rune of s that is neither safe nor one of
// allowed, and whether there is one.
func unsafeIn(s string, allowed string) (rune, bool) {
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if size == 1 && r == utf8.RuneError {
			return rune(s[0]), true
		}
		if !Safe(r) && !strings.ContainsRune(allowed, r) {
			return r, true
		}
		s = s[size:]
	}
	return 0, false
}

// seeds are inputs every fuzz target starts from.
var seeds = []string{
	"", "plain", "ls \u202etxt.exe", "\u009b2J", "\x1b]0;title\x07", "a\x7f", "\xff\xfe",
	"\u2066\u2067\u2068\u2069\u200e\u200f\u061c", "\u200b\u2060\ufeff", "\U000E0041", `"\\`, "a\nb\tc\r",
}

func FuzzQuote(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		if r, bad := unsafeIn(q, ""); bad {
			t.Fatalf("Quote(%q) = %q holds U+%04X raw", s, q, r)
		}
		back := q
		if q != s {
			var err error
			if back, err = strconv.Unquote(q); err != nil {
				t.Fatalf("Unquote(Quote(%q) = %s): %v", s, q, err)
			}
		}
		if back != s {
			t.Fatalf("Quote(%q) = %s, reads back as %q", s, q, back)
		}
		if tx := Text(s); tx != "" {
			if r, bad := unsafeIn(tx, "\n\t"); bad {
				t.Fatalf("Text(%q) = %q holds U+%04X raw", s, tx, r)
			}
		}
	})
}

func FuzzJSON(f *testing.F) {
	for _, s := range seeds {
		doc, _ := json.Marshal(map[string]any{s: []any{s, 1.5, nil, true}})
		f.Add(doc)
		f.Add([]byte(`["` + s + `"]`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := JSON(data)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("JSON(%q): no error for invalid JSON", data)
			}
			return
		}
		if err != nil {
			t.Fatalf("JSON(%q): %v", data, err)
		}
		if r, bad := unsafeIn(string(out), "\n\t"); bad {
			t.Fatalf("JSON(%q) = %q holds U+%04X raw", data, out, r)
		}
		if !json.Valid(out) {
			t.Fatalf("JSON(%q) = %q: not valid JSON", data, out)
		}
		if want, got := decode(t, data), decode(t, out); !reflect.DeepEqual(want, got) {
			t.Fatalf("JSON(%q) = %q decodes to %#v, want %#v", data, out, got, want)
		}
	})
}

// decode is data as encoding/json reads it, numbers kept as written.
func decode(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", data, err)
	}
	return v
}
