package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// markerPattern matches the markers the redactor writes.
var markerPattern = regexp.MustCompile(`\[REDACTED:[a-z0-9-]+\]`)

// withoutMarkers replaces each marker by a NUL byte, so that a check for leftover secrets does
// not look inside marker text nor across it.
func withoutMarkers(b []byte) []byte { return markerPattern.ReplaceAll(b, []byte{0}) }

// fenceNumbers puts a NUL, which no usable known value holds, on both
// sides of every number outside a string of a valid JSON document: a
// known value found in the raw text must lie inside one value. A number
// followed by a comma holds no "…42," secret; the number itself is
// still checked whole.
func fenceNumbers(doc []byte) []byte {
	out := make([]byte, 0, len(doc)+16)
	inString, escaped, inNumber := false, false, false
	for _, c := range doc {
		switch {
		case inString:
			inString = escaped || c != '"'
			escaped = !escaped && c == '\\'
		case inNumber && strings.IndexByte("-+.0123456789eE", c) >= 0:
		case !inNumber && strings.IndexByte("-0123456789", c) >= 0:
			out = append(out, 0)
			inNumber = true
		default:
			if inNumber {
				out = append(out, 0)
			}
			inNumber = false
			inString = c == '"'
		}
		out = append(out, c)
	}
	if inNumber {
		out = append(out, 0)
	}
	return out
}

// fuzzRedactors caches redactors by known value: compiling the rules takes a while.
var fuzzRedactors sync.Map

func fuzzRedactor(t *testing.T, known string) *Redactor {
	if r, ok := fuzzRedactors.Load(known); ok {
		return r.(*Redactor)
	}
	base, ok := fuzzRedactors.Load("")
	if !ok {
		r, err := New(Config{FingerprintKey: []byte("fuzz")})
		if err != nil {
			t.Fatal(err)
		}
		fuzzRedactors.Store("", r)
		base = r
	}
	r := base.(*Redactor).WithSecrets(known)
	fuzzRedactors.Store(known, r)
	return r
}

// usableKnown reports whether the fuzz properties about known values apply to v: long enough to
// be registered, and not made of marker text or NUL (see withoutMarkers).
func usableKnown(v string) bool {
	return len(v) >= minKnownSecretLen && !strings.ContainsAny(v, "[]\x00")
}

func seedCorpus(f *testing.F) {
	f.Add("deploy with "+fakeGitHubPAT+" now", "hunter2hunter2")
	f.Add("postgres://app:"+fakePGPassword+"@db/x and aHVudGVyMmh1bnRlcjI=", "hunter2hunter2")
	f.Add(`api_key = "a8f9d7e6c5b4a3928176"`, "a8f9d7e6")
	f.Add("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n", "BAQEFAAS")
	f.Add("Authorization: Bearer abcDEF123456ghiJKL7890mnop", "p%40ss")
}

// holdsForm reports whether text holds f's text, ASCII case-insensitively for a fold form.
func holdsForm(text []byte, f form) bool {
	if f.fold {
		return containsFold(text, bytes.ToLower(f.text))
	}
	return bytes.Contains(text, f.text)
}

// FuzzText: never panics; the output holds no registered known value in any encoding, also when
// the text carries it base64-encoded and wrapped at 64 and 76 columns; a second pass changes
// nothing.
func FuzzText(f *testing.F) {
	seedCorpus(f)
	f.Fuzz(func(t *testing.T, text, known string) {
		r := fuzzRedactor(t, known)
		out, findings := r.Text("fuzz", []byte(text))
		if len(findings) == 0 && !bytes.Equal(out, []byte(text)) {
			t.Fatalf("output changed without a finding")
		}
		if usableKnown(known) {
			stripped := withoutMarkers(out)
			for _, f := range knownForms(nil, []string{known}) {
				if holdsForm(stripped, f) {
					t.Fatalf("known value form %q left in %q", f.text, out)
				}
			}
			for _, width := range []int{64, 76} {
				encoded := base64.StdEncoding.EncodeToString([]byte(text + known + text))
				wrapped, _ := r.Text("fuzz", []byte(text+"\n"+wrapLines(encoded, width, "\n")))
				joined := bytes.ReplaceAll(withoutMarkers(wrapped), []byte("\n"), nil)
				for _, f := range knownForms(nil, []string{known}) {
					if f.base64Middle && bytes.Contains(joined, f.text) {
						t.Fatalf("base64 form %q left in %q wrapped at %d", f.text, wrapped, width)
					}
				}
			}
		}
		if usableKnown(known) {
			checkRuns(t, r, text, known)
		}
		checkDecoded(t, r, text)
		again, _ := r.Text("fuzz", out)
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\nonce  %q\ntwice %q", out, again)
		}
	})
}

// checkRuns: text with a long run of known in it (all but its last 3 bytes) keeps no run of
// partialMin bytes of known.
func checkRuns(t *testing.T, r *Redactor, text, known string) {
	if len(known) <= minPartialRun {
		return
	}
	out, _ := r.Text("fuzz", []byte(text+" "+known[:len(known)-3]+" "+text))
	stripped := withoutMarkers(out)
	n := partialMin(len(known))
	for i := 0; i+n <= len(known); i++ {
		if bytes.Contains(stripped, []byte(known[i:i+n])) {
			t.Fatalf("a run of %d bytes of the known value is left in %q", n, out)
		}
	}
}

// checkDecoded: what the redactor finds in text, it finds in text's base64, in every shape a
// blob has, and redacts there.
func checkDecoded(t *testing.T, r *Redactor, text string) {
	if len(text) < 12 {
		return
	}
	sc := r.getScratch()
	found := len(r.findAll([]byte(text), sc, maxDecodeDepth-1)) > 0
	r.scratch.Put(sc)
	if !found {
		return
	}
	for _, shape := range base64Shapes {
		encoded := shape.encode([]byte(text))
		if _, findings := r.Text("fuzz", []byte(encoded)); len(findings) == 0 {
			t.Fatalf("a secret in %q was not found in its %s encoding %q", text, shape.name, encoded)
		}
	}
}

// FuzzScanBlobs: never panics; each blob's characters are those of text at its offsets
// (escapes aside), in order, inside the blob's extent; decoding agrees with encoding/base64.
func FuzzScanBlobs(f *testing.F) {
	f.Add("content: "+wrapLines(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("secret value ", 20))), 76, "\r\n"), false)
	f.Add(`{"c":"`+strings.ReplaceAll(wrapLines(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x/y?", 40))), 64, "\n"), "\n", `\n`)+`"}`, true)
	f.Add(`a\\/b\u0041QUJDREVGR0hJSktMTU5PUFFS\\r\\nx==`, true)
	f.Fuzz(func(t *testing.T, text string, escaped bool) {
		var b blob
		last := -1
		scanBlobs([]byte(text), escaped, &b, func(b *blob) {
			if len(b.chars) < minEncodedBlob || b.offset(0) <= last || b.end > len(text) {
				t.Fatalf("bad blob %q at %v, end %d", b.chars, b.segs, b.end)
			}
			for i := range b.chars {
				o := b.offset(i)
				if i > 0 && o <= b.offset(i-1) || o >= b.end {
					t.Fatalf("offsets out of order or extent: %v end %d", b.segs, b.end)
				}
				if c := text[o]; c != b.chars[i] && !(escaped && c == '\\' && b.chars[i] == '/') {
					t.Fatalf("char %q at %d is %q in text", b.chars[i], o, c)
				}
			}
			last = b.end - 1
			chars := strings.NewReplacer("-", "+", "_", "/").Replace(string(b.chars))
			want, err := base64.RawStdEncoding.DecodeString(chars[:len(chars)-len(chars)%4])
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeBase64(nil, b.chars); !bytes.HasPrefix(got, want) {
				t.Fatalf("decoded %q, want %q first", got, want)
			}
		})
	})
}

// FuzzJSON: never panics; valid JSON in gives valid JSON out with no known value left in any
// string; a second pass changes nothing; invalid JSON is an error; EncodedJSON gives JSON's
// result for every valid document.
func FuzzJSON(f *testing.F) {
	f.Add(`{"password": "hunter2", "n": 1}`, "hunter2!")
	f.Add(`{"stdout": "token `+fakeGitHubPAT+`\n", "items": [1, 2.5e3, true, null]}`, "2.5e3x")
	f.Add(`{"k\u0041": "\ud83d\ude00 `+fakeSlackBot+`", "`+fakeAWSKeyID+`": {}}`, "AKIA")
	f.Add(`{"card": 4242424242424242, "config": {"api_key": "a8f9d7e6c5b4a3928176"}}`, "4242424242424242")
	f.Add(`[{"a": "x\"y\\z"}, "`+"\xff"+`"]`, `x"y\z`)
	f.Fuzz(func(t *testing.T, doc, known string) {
		r := fuzzRedactor(t, known)
		out, found, err := r.JSON("fuzz", []byte(doc))
		if !json.Valid([]byte(doc)) {
			if err == nil {
				t.Fatalf("invalid JSON accepted: %q", doc)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid JSON rejected: %v", err)
		}
		if enc, encFound, err := r.EncodedJSON("fuzz", []byte(doc)); err != nil || !bytes.Equal(enc, out) || !reflect.DeepEqual(encFound, found) {
			t.Fatalf("EncodedJSON differs from JSON (%v):\nJSON        %q %v\nEncodedJSON %q %v", err, out, found, enc, encFound)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out: %q", out)
		}
		if usableKnown(known) {
			var v any
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.UseNumber() // 1E700 is valid JSON but no float64
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			decoded, _ := json.Marshal(v) // strings decoded, then re-escaped: check both
			var raw bytes.Buffer
			collectStrings(v, &raw)
			for _, text := range [][]byte{withoutMarkers(raw.Bytes()), withoutMarkers(fenceNumbers(out))} {
				for _, f := range knownForms(nil, []string{known}) {
					if holdsForm(text, f) {
						t.Fatalf("known value form %q left in %q (%s)", f.text, out, decoded)
					}
				}
			}
		}
		again, _, err := r.JSON("fuzz", out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent (%v):\nonce  %q\ntwice %q", err, out, again)
		}
	})
}

// collectStrings writes every string and key of a decoded document, each followed by NUL.
func collectStrings(v any, b *bytes.Buffer) {
	switch x := v.(type) {
	case string:
		b.WriteString(x)
		b.WriteByte(0)
	case []any:
		for _, e := range x {
			collectStrings(e, b)
		}
	case map[string]any:
		for k, e := range x {
			b.WriteString(k)
			b.WriteByte(0)
			collectStrings(e, b)
		}
	}
}

func TestFenceNumbers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"a number is fenced, the comma after it is not", `{"":4242,"a":1}`, "{\"\":\x004242\x00,\"a\":\x001\x00}"},
		{"digits in a string are not a number", `["12",-1.5e+3]`, "[\"12\",\x00-1.5e+3\x00]"},
		{"an escaped quote does not end the string", `["a\"1",true]`, `["a\"1",true]`},
		{"a top-level number", `7`, "\x007\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(fenceNumbers([]byte(tc.doc))); got != tc.want {
				t.Errorf("fenceNumbers(%q) = %q, want %q", tc.doc, got, tc.want)
			}
		})
	}
}
