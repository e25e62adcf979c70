package redact

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// base64Shapes are the ways a blob of base64 reaches evidence: both alphabets, with and without
// padding, on one line and wrapped as base64, PEM and MIME wrap it.
var base64Shapes = []struct {
	name   string
	encode func([]byte) string
}{
	{"standard", base64.StdEncoding.EncodeToString},
	{"standard without padding", base64.RawStdEncoding.EncodeToString},
	{"URL-safe", base64.URLEncoding.EncodeToString},
	{"URL-safe without padding", base64.RawURLEncoding.EncodeToString},
	{"wrapped at 76 (base64)", func(b []byte) string { return wrapLines(base64.StdEncoding.EncodeToString(b), 76, "\n") }},
	{"wrapped at 64 (PEM)", func(b []byte) string { return wrapLines(base64.StdEncoding.EncodeToString(b), 64, "\n") }},
	{"wrapped at 76 with CRLF (MIME)", func(b []byte) string { return wrapLines(base64.StdEncoding.EncodeToString(b), 76, "\r\n") }},
	{"wrapped at 64 with CRLF", func(b []byte) string { return wrapLines(base64.StdEncoding.EncodeToString(b), 64, "\r\n") }},
	{"URL-safe wrapped at 76", func(b []byte) string { return wrapLines(base64.RawURLEncoding.EncodeToString(b), 76, "\n") }},
}

// leaksEncoded reports whether out still holds 8 characters of the base64 of secret at any
// alignment, in either alphabet, line breaks and markers aside: enough of an encoding to
// decode part of the secret.
func leaksEncoded(out []byte, secret string) bool {
	text := withoutMarkers(out)
	text = bytes.ReplaceAll(bytes.ReplaceAll(text, []byte("\r"), nil), []byte("\n"), nil)
	text = bytes.ReplaceAll(text, []byte(`\r`), nil)
	text = bytes.ReplaceAll(text, []byte(`\n`), nil)
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for align := range 3 {
			mid := base64Middle(enc, secret, align)
			for i := 0; i+8 <= len(mid); i++ {
				if bytes.Contains(text, []byte(mid[i:i+8])) {
					return true
				}
			}
		}
	}
	return false
}

// fileAround returns the content of a file that holds secret align bytes after a 3-byte
// boundary, between lines of ordinary text, long enough to be wrapped over several lines.
func fileAround(secret string, align int) []byte {
	head := strings.Repeat("# configuration for the deploy job\n", 3) + "GITHUB_TOKEN="
	for len(head)%3 != align {
		head = " " + head
	}
	return []byte(head + secret + "\nretries: 3\n" + strings.Repeat("log_level: info\n", 4))
}

// TestDecodedTokens: a token the rules detect, inside a file that reaches evidence base64-
// encoded (a readFile with encoding base64, a Kubernetes Secret), is redacted in the encoding,
// in each shape and at each alignment, in text, in JSON strings and in a stream, and the rest of
// the blob still decodes.
func TestDecodedTokens(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{FingerprintKey: []byte("k")})
	for _, shape := range base64Shapes {
		for align := range 3 {
			file := fileAround(fakeGitHubPAT, align)
			blob := shape.encode(file)
			t.Run(shape.name+"/alignment "+string(rune('0'+align)), func(t *testing.T) {
				t.Parallel()
				out, findings := r.Text("out", []byte("content: "+blob))
				if leaksEncoded(out, fakeGitHubPAT) || len(findings) == 0 || findings[0].Rule != "github-pat" {
					t.Fatalf("the token leaks in %q (%v)", out, findings)
				}
				doc, _ := json.Marshal(map[string]any{"path": "deploy.env", "encoding": "base64", "content": blob})
				jout, _, err := r.EncodedJSON("tool_result.json", doc)
				if err != nil || leaksEncoded(jout, fakeGitHubPAT) {
					t.Fatalf("the token leaks in JSON %s (%v)", jout, err)
				}
				var sout bytes.Buffer
				if _, _, err := r.Copy(context.Background(), "out", &sout, strings.NewReader(blob)); err != nil || leaksEncoded(sout.Bytes(), fakeGitHubPAT) {
					t.Fatalf("the token leaks in a stream: %q (%v)", sout.Bytes(), err)
				}
				// The groups before the marker still decode to the file's start.
				before, _, _ := bytes.Cut(bytes.ReplaceAll(bytes.ReplaceAll(out, []byte("\r"), nil), []byte("\n"), nil), []byte("[REDACTED:"))
				enc := strings.TrimPrefix(string(before), "content: ")
				dec, err := base64.RawStdEncoding.DecodeString(strings.NewReplacer("-", "+", "_", "/").Replace(enc))
				if err != nil || !bytes.HasPrefix(file, dec) || len(dec) < 60 {
					t.Errorf("the text before the marker does not decode to the file's start: %q (%v)", dec, err)
				}
			})
		}
	}
}

// TestDecodedTwice: a token base64-encoded twice is found too.
func TestDecodedTwice(t *testing.T) {
	t.Parallel()
	r := newRedactor(t, Config{})
	inner := base64.StdEncoding.EncodeToString(fileAround(fakeGitHubPAT, 1))
	outer := wrapLines(base64.StdEncoding.EncodeToString([]byte("data:\n  token: "+inner+"\n")), 76, "\n")
	out, _ := r.Text("out", []byte(outer))
	if bytes.Equal(out, []byte(outer)) {
		t.Fatalf("nothing was redacted in %q", outer)
	}
	// What is left decodes to no token.
	for _, line := range strings.Split(string(withoutMarkers(out)), "\x00") {
		dec, _ := base64.StdEncoding.DecodeString(strings.ReplaceAll(line, "\n", ""))
		if leaksEncoded(dec, fakeGitHubPAT) || bytes.Contains(dec, []byte(fakeGitHubPAT)) {
			t.Fatalf("the token leaks through two encodings: %q", out)
		}
	}
}

// TestKnownSecretEncoded: a configured secret, a secret added per call and a caller's secret
// are redacted when base64 carries them at any alignment inside a longer encoding, wrapped or
// not, in either alphabet.
func TestKnownSecretEncoded(t *testing.T) {
	t.Parallel()
	const secret = "hostile/Value+q8Zr27vkP0x_4f9c2a7e1b"
	base := newRedactor(t, Config{})
	redactors := []struct {
		name string
		r    *Redactor
	}{
		{"configured", newRedactor(t, Config{KnownSecrets: []string{secret}})},
		{"added per call", base.WithSecrets(secret)},
		{"a caller's", base.Standalone(secret)},
	}
	for _, rc := range redactors {
		for _, shape := range base64Shapes {
			for align := range 3 {
				blob := shape.encode(fileAround(secret, align))
				t.Run(rc.name+"/"+shape.name+"/alignment "+string(rune('0'+align)), func(t *testing.T) {
					t.Parallel()
					out, _ := rc.r.Text("out", []byte("content: "+blob))
					if leaksEncoded(out, secret) {
						t.Fatalf("the secret leaks in %q", out)
					}
					doc, _ := json.Marshal(map[string]string{"stdout": blob})
					jout, _, err := rc.r.EncodedJSON("response.json", doc)
					if err != nil || leaksEncoded(jout, secret) {
						t.Fatalf("the secret leaks in JSON %s (%v)", jout, err)
					}
				})
			}
		}
	}
}

// TestPartialEcho: a long run of a known value's bytes — all but its last characters, a
// slice of its middle — is redacted; a run shorter than the minimum is not, and a caller's
// run only where it stands alone.
func TestPartialEcho(t *testing.T) {
	t.Parallel()
	const secret = "c4ll3r-S3cret-9f8e7d6c5b4a39281706" // 34 bytes: runs of 17 count
	base := newRedactor(t, Config{})
	configured := newRedactor(t, Config{KnownSecrets: []string{secret}})
	caller := base.Standalone(secret)
	cases := []struct {
		name, text string
		r          *Redactor
		leak       string // must not remain; "" when the text must stay as it is
	}{
		{"configured: all but the last 3", "token=" + secret[:len(secret)-3] + "\n", configured, secret[:len(secret)-3]},
		{"configured: a slice of the middle", "x " + secret[5:25] + " y", configured, secret[5:25]},
		{"configured: the minimum run", secret[10:27] + "!", configured, secret[10:27]},
		{"configured: glued to other text", "abc" + secret[2:30] + "xyz", configured, secret[2:30]},
		{"configured: twice in a row", secret[:20] + secret[:20], configured, secret[:20]},
		{"configured: reversed", "echo " + reversals(secret)[0], configured, reversals(secret)[0]},
		{"configured: a run one short of the minimum stays", "x " + secret[3:19] + " y", configured, ""},
		{"added per call: all but the last 4", secret[:len(secret)-4], base.WithSecrets(secret), secret[:len(secret)-4]},
		{"a caller's: all but the last 3", "TOKEN=" + secret[:len(secret)-3] + "\n", caller, secret[:len(secret)-3]},
		{"a caller's: a slice of the middle", "[" + secret[4:30] + "]", caller, secret[4:30]},
		{"a caller's: reversed", reversals(secret)[0] + "\n", caller, reversals(secret)[0]},
		{"a caller's run inside a word stays", "xx" + secret[:30] + "yy", caller, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, findings := tc.r.Text("out", []byte(tc.text))
			if tc.leak == "" {
				if string(out) != tc.text || len(findings) != 0 {
					t.Fatalf("got %q (%v), want the text unchanged", out, findings)
				}
				return
			}
			if bytes.Contains(out, []byte(tc.leak)) || len(findings) == 0 {
				t.Fatalf("the run leaks: %q", out)
			}
			doc, _ := json.Marshal(map[string]string{"stdout": tc.text})
			jout, _, err := tc.r.JSON("response.json", doc)
			if err != nil || bytes.Contains(jout, []byte(tc.leak)) {
				t.Fatalf("the run leaks in JSON: %s (%v)", jout, err)
			}
			if again, _ := tc.r.Text("out", out); !bytes.Equal(again, out) {
				t.Fatalf("not a fixed point: %q then %q", out, again)
			}
		})
	}
}

func TestPartialMin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, want int }{{8, 12}, {13, 12}, {24, 12}, {25, 13}, {34, 17}, {40, 20}, {1000, 500}} {
		if got := partialMin(tc.n); got != tc.want {
			t.Errorf("partialMin(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestBase64Values(t *testing.T) {
	t.Parallel()
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	for c := range 256 {
		want := strings.IndexByte(std, byte(c))
		switch byte(c) {
		case '+', '-':
			want = 62
		case '/', '_':
			want = 63
		}
		if got := base64Value(byte(c)); got != want || (want >= 0) != isBase64Byte(byte(c)) {
			t.Errorf("base64Value(%q) = %d, want %d", byte(c), got, want)
		}
	}
}
