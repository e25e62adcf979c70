package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
)

// minBase64Form is the shortest base64 fragment of a known value that is redacted: shorter ones
// occur by chance in any base64 text.
const minBase64Form = 8

// knownForms returns base plus the forms of each usable value in values: the value itself, its
// JSON-escaped, URL-encoded (query and path) forms, and the stable parts of its standard and URL
// base64 encodings at each of the three alignments it can have inside a longer encoding.
// Duplicates are dropped.
func knownForms(base []form, values []string) []form {
	out := slices.Clone(base)
	seen := map[string]bool{}
	for _, f := range out {
		seen[string(f.text)] = true
	}
	add := func(text string, middle bool) {
		if text == "" || seen[text] {
			return
		}
		seen[text] = true
		out = append(out, form{text: []byte(text), base64Middle: middle})
	}
	for _, v := range values {
		if len(v) < minKnownSecretLen {
			continue
		}
		add(v, false)
		for _, html := range []bool{false, true} {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(html)
			if enc.Encode(v) == nil {
				quoted := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
				add(string(quoted[1:len(quoted)-1]), false)
			}
		}
		add(url.QueryEscape(v), false)
		add(url.PathEscape(v), false)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for align := 0; align < 3; align++ {
				if m := base64Middle(enc, v, align); len(m) >= minBase64Form {
					add(m, true)
				}
			}
		}
	}
	return out
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
