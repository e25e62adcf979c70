package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// fuzzSecret is the known value the fuzz targets plant; it must never reach any output.
const fuzzSecret = "s3cr3t-known-value"

// FuzzJSON checks that JSON accepts exactly the inputs json.Valid accepts, and that for those the
// output is canonical JSON of the same structure, deterministic, and free of the planted secret.
func FuzzJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`,
		`[1, -0.0, 1.5e300, 12345678901234567890, true, null, ""]`,
		`{"password":"x","max_tokens":1,"nested":{"api_key":[1,"two",{"k":"v"}]}}`,
		`{"s3cr3t-known-value":"s3cr3t-known-value","s3cr3t\u002dknown-value":2}`,
		`{"env":{"TOKEN":"` + fakeGitHub + `"},"stdout":"Authorization: Bearer ` + fakeOpaque + `"}`,
		`{"alpha ` + fakeAWSKeyID + `":1,"alpha [REDACTED:aws-access-key-id]":2}`,
		`"postgres://u:` + fakeURLPassword + `@db/x"`,
		`{"a":1}{"b":2}`,
		`[1,]`,
		"\"\xff\xfe s3cr3t-known-value\"",
	} {
		f.Add([]byte(seed))
	}
	r, err := New(Config{KnownSecrets: []string{fuzzSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, findings, err := r.JSON("fuzz.json", in)
		if !json.Valid(in) {
			if err == nil || out != nil || findings != nil {
				t.Fatalf("invalid input accepted: out=%q findings=%+v err=%v", out, findings, err)
			}
			if strings.Contains(err.Error(), fuzzSecret) {
				t.Fatalf("error message contains the secret: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid input rejected: %v", err)
		}
		if !json.Valid(out) || !bytes.HasSuffix(out, []byte("\n")) {
			t.Fatalf("output is not valid JSON with a trailing newline: %q", out)
		}
		if bytes.Contains(out, []byte(fuzzSecret)) {
			t.Fatalf("known secret in output: %q", out)
		}
		for _, f := range findings {
			if strings.Contains(f.Path, fuzzSecret) || f.Artifact != "fuzz.json" || f.Offset < 0 {
				t.Fatalf("bad finding %+v", f)
			}
		}
		assertCanonical(t, out)
		inV, outV := decodeForTest(t, in), decodeForTest(t, out)
		if a, b := shapeOf(inV), shapeOf(outV); a != b {
			t.Fatalf("structure changed:\n in %s\nout %s", a, b)
		}
		again, _, err := r.JSON("fuzz.json", in)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not deterministic: %q vs %q (%v)", out, again, err)
		}
	})
}

// FuzzString checks that String never leaves the planted secret behind, changes nothing without a
// finding, and reports findings in order with a marker for each.
func FuzzString(f *testing.F) {
	for _, seed := range []string{
		"",
		"plain text",
		"Authorization: Bearer " + fakeOpaque,
		"https://u:p@ss@host/" + fuzzSecret,
		fakePrivateKey[:60],
		"sk-ant-" + fakeOpenAI,
		fuzzSecret + fuzzSecret[:6],
	} {
		f.Add(seed)
	}
	r, err := New(Config{KnownSecrets: []string{fuzzSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, findings := r.String(in)
		if strings.Contains(out, fuzzSecret) {
			t.Fatalf("known secret in output %q", out)
		}
		if len(findings) == 0 && out != in {
			t.Fatalf("output changed without a finding: %q -> %q", in, out)
		}
		prev := -1
		for _, f := range findings {
			if f.Offset <= prev || f.Offset >= len(in) || f.Path != "" || f.Artifact != "" {
				t.Fatalf("bad finding %+v for %q", f, in)
			}
			if !strings.Contains(out, "[REDACTED:"+f.Rule+"]") {
				t.Fatalf("finding %+v has no marker in %q", f, out)
			}
			prev = f.Offset
		}
	})
}

func decodeForTest(t *testing.T, doc []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", doc, err)
	}
	return v
}

// shapeOf describes the structure of v without its text: object members (in sorted order of their
// shapes, since keys may be renamed), array elements, booleans and null. Strings and numbers are
// both "v" because redaction may turn a number into a marker string.
func shapeOf(v any) string {
	switch t := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(t))
		for _, e := range t {
			parts = append(parts, shapeOf(e))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = shapeOf(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case bool:
		if t {
			return "t"
		}
		return "f"
	case nil:
		return "n"
	default:
		return "v"
	}
}
