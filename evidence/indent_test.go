package evidence

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// indentCases are values whose indented form must not change: artifacts
// already stored were indented by json.Indent, and a verifier or auditor
// comparing new evidence with old must see the same layout.
var indentCases = map[string]string{
	"an empty object stays on one line":            `{}`,
	"an empty array stays on one line":             `[]`,
	"nested empty containers stay on one line":     `{"a":{},"b":[],"c":[{}]}`,
	"a scalar at the top is copied":                `"x"`,
	"numbers and literals are copied":              `[1,-2.5e+3,true,false,null]`,
	"punctuation inside strings is not indented":   `{"k{":"a,b:c[d]e}","[":"]"}`,
	"escaped quotes do not end a string":           `{"q":"say \"hi\", {ok}","b":"\\","c":"\\\""}`,
	"unicode and escapes are copied":               `{"é":"\u2028 ✓ \u003c","t":"\t"}`,
	"deep nesting indents one level per container": `{"a":[[{"b":[1,{"c":{}}]}]],"d":2}`,
	"whitespace outside strings is dropped":        "{ \"a\" :\t[ 1 ,\n 2 ] ,\"b\": \"x y\" }",
}

func TestAppendIndentWritesWhatJSONIndentWrites(t *testing.T) {
	t.Parallel()
	for name, src := range indentCases {
		t.Run(name, func(t *testing.T) {
			var want bytes.Buffer
			if err := json.Indent(&want, []byte(src), "", "  "); err != nil {
				t.Fatal(err)
			}
			if got := AppendIndent([]byte("prefix:"), []byte(src)); string(got) != "prefix:"+want.String() {
				t.Fatalf("AppendIndent(%q) =\n%s\nwant\n%s", src, got, want.String())
			}
		})
	}
}

// TestEncodeManifestKeepsItsBytes pins the stored form of a manifest:
// manifests already written were encoded with json.MarshalIndent.
func TestEncodeManifestKeepsItsBytes(t *testing.T) {
	t.Parallel()
	m := Manifest{
		Version: ManifestVersion, RequestID: "r1", Outcome: OutcomeCompleted,
		CreatedAt:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Artifacts:  []ArtifactDigest{Digest(Key("r1", ArtifactRequest), []byte(`{"a":"<&>"}`))},
		Redactions: []Redaction{{Rule: "r", Artifact: ArtifactRequest, Path: "$.a", Offset: 1, Fingerprint: "sha256:" + string(bytes.Repeat([]byte("0"), 64))}},
	}
	got, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want)+"\n" {
		t.Fatalf("EncodeManifest =\n%s\nwant\n%s", got, want)
	}
}

// FuzzAppendIndent checks AppendIndent against json.Indent on every valid
// JSON value (json.Indent keeps whitespace after the value, which
// AppendIndent's callers never pass, so it is trimmed first).
func FuzzAppendIndent(f *testing.F) {
	for _, src := range indentCases {
		f.Add([]byte(src))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		src = bytes.TrimRight(src, " \t\r\n")
		if !json.Valid(src) {
			return
		}
		var want bytes.Buffer
		if err := json.Indent(&want, src, "", "  "); err != nil {
			t.Fatal(err)
		}
		if got := AppendIndent(nil, src); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("AppendIndent(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}

// BenchmarkEncodeManifest encodes the manifest of a call with five
// artifacts, as the gateway does once per call.
func BenchmarkEncodeManifest(b *testing.B) {
	m := Manifest{Version: ManifestVersion, RequestID: "r1", CanonicalRequestHash: "sha256:" + strings.Repeat("0", 64),
		EngineRef: "toolgate/noop", PolicySetDigest: "sha256:" + strings.Repeat("1", 64), Outcome: OutcomeCompleted,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for _, name := range []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactDispatch, ArtifactToolResult, ArtifactResponse} {
		m.Artifacts = append(m.Artifacts, Digest(Key("r1", name), []byte(name)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeManifest(m); err != nil {
			b.Fatal(err)
		}
	}
}
