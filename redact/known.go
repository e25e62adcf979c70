package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// minBase64Form is the shortest base64 fragment of a known value that is redacted: shorter ones
// occur by chance in any base64 text.
const minBase64Form = 8

// knownForms returns base plus the forms of each usable value in values: the value itself, its
// JSON-escaped forms (with and without HTML escapes, with '/' as `\/`), its percent-encodings
// (query, path, every byte; hex digits in either case), its hex (either case), and the stable
// parts of its standard and URL base64 encodings at each of the three alignments it can have
// inside a longer encoding. Line-wrapped hex and base64 are found by findWrapped. Duplicates are
// dropped.
func knownForms(base []form, values []string) []form {
	out := slices.Clone(base)
	seen := map[string]bool{}
	for _, f := range out {
		if f.partial == nil {
			seen[string(f.text)] = true
		}
	}
	add := func(text string, f form) {
		if text == "" || seen[text] {
			return
		}
		seen[text] = true
		f.text = []byte(text)
		out = append(out, f)
	}
	for _, v := range values {
		if len(v) < minKnownSecretLen {
			continue
		}
		textForms(v, add)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for align := 0; align < 3; align++ {
				if m := base64Middle(enc, v, align); len(m) >= minBase64Form {
					add(m, form{base64Middle: true})
				}
			}
		}
	}
	return out
}

// textForms hands add the forms of v that are text of their own: v itself and
// reversed, its JSON-escaped and percent-encoded spellings and its hex, the last two
// matched in either case. Base64 forms depend on what surrounds them and are
// added by each caller.
func textForms(v string, add func(text string, f form)) {
	add(v, form{})
	for _, t := range reversals(v) {
		add(t, form{})
	}
	for _, t := range jsonForms(v) {
		add(t, form{})
	}
	for _, t := range percentForms(v) {
		add(t, form{fold: true})
	}
	add(hex.EncodeToString([]byte(v)), form{fold: true})
}

// jsonForms returns v as it appears inside JSON string literals: escaped as encoding/json does,
// with and without HTML escapes, and with each '/' escaped as `\/` (PHP, some Java libraries);
// and escaped twice, as in JSON text held in a string of a JSON document.
func jsonForms(v string) []string {
	var out []string
	for _, html := range []bool{false, true} {
		inner := jsonEscape(v, html)
		out = append(out, inner, strings.ReplaceAll(inner, "/", `\/`))
	}
	return append(out, jsonEscape(out[0], false), jsonEscape(out[1], false))
}

// jsonEscape returns v escaped as the content of a JSON string literal.
func jsonEscape(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if enc.Encode(v) != nil {
		return ""
	}
	quoted := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return string(quoted[1 : len(quoted)-1])
}

// percentForms returns v percent-encoded as a query value, as a path segment, and with every
// byte encoded. Forms are compared with hex digits in either case (see form.fold).
func percentForms(v string) []string {
	const digits = "0123456789ABCDEF"
	all := make([]byte, 0, 3*len(v))
	for i := 0; i < len(v); i++ {
		all = append(all, '%', digits[v[i]>>4], digits[v[i]&0xf])
	}
	return []string{url.QueryEscape(v), url.PathEscape(v), string(all)}
}

// base64Middle returns the characters of the encoding of v that are the same whatever the bytes
// around v, when v starts align bytes after a 3-byte group boundary.
func base64Middle(enc *base64.Encoding, v string, align int) string {
	buf := make([]byte, align+len(v))
	copy(buf[align:], v)
	s := enc.EncodeToString(buf)
	// Characters carry 6 bits: skip those holding any bit of the align prefix bytes, and the last
	// one when it would also hold bits of the byte after v.
	from := (align*8 + 5) / 6
	to := (align + len(v)) * 8 / 6
	if to <= from {
		return ""
	}
	return s[from:to]
}
