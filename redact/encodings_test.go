package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// wrapLines breaks s into lines of width characters ended by eol, as base64 -w, PEM, MIME and
// xxd -p print them.
func wrapLines(s string, width int, eol string) string {
	var b strings.Builder
	for len(s) > width {
		b.WriteString(s[:width])
		b.WriteString(eol)
		s = s[width:]
	}
	b.WriteString(s)
	b.WriteString(eol)
	return b.String()
}

// lowerPercent percent-encodes every byte of s with lower-case hex digits.
func lowerPercent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString("%" + hex.EncodeToString([]byte{s[i]}))
	}
	return b.String()
}

// secretEncodings are the ways tool output carries a known secret: each returns the text that
// holds secret, given random bytes to put around it inside the encoding.
var secretEncodings = []struct {
	name   string
	encode func(secret string, before, after []byte) string
}{
	{"hex", func(s string, b, a []byte) string { return hex.EncodeToString(join(b, s, a)) }},
	{"upper-case hex", func(s string, b, a []byte) string { return strings.ToUpper(hex.EncodeToString(join(b, s, a))) }},
	{"xxd -p (hex wrapped at 60)", func(s string, b, a []byte) string { return wrapLines(hex.EncodeToString(join(b, s, a)), 60, "\n") }},
	{"base64", func(s string, b, a []byte) string { return base64.StdEncoding.EncodeToString(join(b, s, a)) }},
	{"base64 wrapped at 76 (base64)", func(s string, b, a []byte) string {
		return wrapLines(base64.StdEncoding.EncodeToString(join(b, s, a)), 76, "\n")
	}},
	{"base64 wrapped at 64 (base64 -w 64, PEM)", func(s string, b, a []byte) string {
		return wrapLines(base64.StdEncoding.EncodeToString(join(b, s, a)), 64, "\n")
	}},
	{"base64 wrapped at 76 with CRLF (MIME)", func(s string, b, a []byte) string {
		return wrapLines(base64.StdEncoding.EncodeToString(join(b, s, a)), 76, "\r\n")
	}},
	{"base64 wrapped at 64 with CRLF", func(s string, b, a []byte) string {
		return wrapLines(base64.StdEncoding.EncodeToString(join(b, s, a)), 64, "\r\n")
	}},
	{"URL-safe base64", func(s string, b, a []byte) string { return base64.RawURLEncoding.EncodeToString(join(b, s, a)) }},
	{"JSON with escaped slashes", func(s string, _, _ []byte) string {
		q, _ := json.Marshal(s)
		return strings.ReplaceAll(string(q), "/", `\/`)
	}},
	{"lower-case percent-encoding of every byte", func(s string, _, _ []byte) string { return lowerPercent(s) }},
	{"lower-case query escaping", func(s string, _, _ []byte) string { return lowerHexEscapes(url.QueryEscape(s)) }},
	{"lower-case path escaping", func(s string, _, _ []byte) string { return lowerHexEscapes(url.PathEscape(s)) }},
}

func join(before []byte, s string, after []byte) []byte {
	return append(append(append([]byte{}, before...), s...), after...)
}

// lowerHexEscapes lower-cases the hex digits of each %XX escape in s.
func lowerHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = foldByte(b[i+1]), foldByte(b[i+2])
		}
	}
	return string(b)
}

// randomBytes returns n random bytes from alphabet.
func randomBytes(rng *rand.Rand, n int, alphabet string) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return b
}

// leftoverForm returns a form of secret left in out once markers and line breaks are gone, or
// "" when none is.
func leftoverForm(out []byte, secret string) string {
	stripped := strings.NewReplacer("\r", "", "\n", "").Replace(string(withoutMarkers(out)))
	for _, f := range knownForms(nil, []string{secret}) {
		if f.fold && containsFold([]byte(stripped), bytes.ToLower(f.text)) || bytes.Contains([]byte(stripped), f.text) {
			return string(f.text)
		}
	}
	return ""
}

// TestKnownSecretSurvivesNoEncoding is a property test: a random secret, encoded each way tool
// output carries it, inside random text, never survives redaction in any form, as text or inside
// a JSON document.
func TestKnownSecretSurvivesNoEncoding(t *testing.T) {
	t.Parallel()
	const (
		secretAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=:@!%\" "
		textAlphabet   = "abcdefghijklmnopqrstuvwxyz ABCDEFG0123456789.,:=\n"
	)
	rng := rand.New(rand.NewPCG(11, 9))
	base := newRedactor(t, Config{})
	for i := range 40 {
		secret := string(randomBytes(rng, 8+rng.IntN(40), secretAlphabet))
		r := base.WithSecrets(secret)
		for _, enc := range secretEncodings {
			before := randomBytes(rng, rng.IntN(40), "\x00\x01\xffabcXYZ019/+")
			after := randomBytes(rng, rng.IntN(40), "\x00\x01\xffabcXYZ019/+")
			encoded := enc.encode(secret, before, after)
			// The encoding starts its own line, or follows text on its first line
			// ("key: " and the output of base64).
			sep := "\n"
			if rng.IntN(2) == 0 {
				sep = ": "
			}
			text := string(randomBytes(rng, rng.IntN(200), textAlphabet)) + sep + encoded + "\n" + string(randomBytes(rng, rng.IntN(200), textAlphabet))
			out, _ := r.Text("stdout", []byte(text))
			if left := leftoverForm(out, secret); left != "" {
				t.Fatalf("case %d, %s: form %q of secret %q left in\n%s", i, enc.name, left, secret, out)
			}
			doc, _ := json.Marshal(map[string]any{"stdout": text, "encoded": encoded, "n": i})
			jout, _, err := r.JSON("tool_result.json", doc)
			if err != nil {
				t.Fatal(err)
			}
			var decoded struct{ Stdout, Encoded string }
			if err := json.Unmarshal(jout, &decoded); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{decoded.Stdout, decoded.Encoded} {
				if left := leftoverForm([]byte(v), secret); left != "" {
					t.Fatalf("case %d, %s in JSON: form %q of secret %q left in\n%s", i, enc.name, left, secret, v)
				}
			}
		}
	}
}
