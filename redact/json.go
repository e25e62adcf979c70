package redact

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON redacts a JSON document and returns the redacted document and what was redacted.
// Output: valid JSON, object keys sorted, numbers preserved exactly as written (decode with
// UseNumber), no HTML escaping, indented with two spaces, trailing newline. An input that is not
// exactly one valid JSON value is an error (no partial output).
//
// As in encoding/json, when an object has the same key twice the last value wins, and invalid
// UTF-8 in a string becomes U+FFFD. Findings are sorted by path, then offset; a finding in an
// object key carries the path of that member.
func (r *Redactor) JSON(artifact string, doc []byte) ([]byte, []Finding, error) {
	v, err := decodeOne(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("redact: artifact %q: %w", artifact, err)
	}
	w := walker{r: r, artifact: artifact}
	v = w.value(v, false)

	var buf bytes.Buffer
	buf.Grow(len(doc) + len(doc)/2)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, nil, fmt.Errorf("redact: artifact %q: encoding the redacted document: %w", artifact, err)
	}
	slices.SortFunc(w.findings, func(a, b Finding) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), cmp.Compare(a.Offset, b.Offset), strings.Compare(a.Rule, b.Rule))
	})
	return buf.Bytes(), w.findings, nil
}

// decodeOne decodes doc, which must hold exactly one JSON value. Errors give the byte offset but
// never quote the input: the offending byte may be part of a secret.
func decodeOne(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax):
			return nil, fmt.Errorf("invalid JSON: syntax error at byte offset %d", syntax.Offset)
		case errors.Is(err, io.EOF):
			return nil, errors.New("invalid JSON: no value")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("invalid JSON: value truncated at byte offset %d", len(doc))
		default:
			return nil, errors.New("invalid JSON: cannot decode")
		}
	}
	off := dec.InputOffset()
	if len(bytes.TrimLeft(doc[off:], " \t\r\n")) != 0 {
		return nil, fmt.Errorf("invalid JSON: unexpected data after the value at byte offset %d", off)
	}
	return v, nil
}

// walker redacts one decoded document in place, tracking the path to the current value so that
// findings can name it. Paths are rendered only when a finding needs one.
type walker struct {
	r        *Redactor
	artifact string
	path     []pathElem
	findings []Finding
}

// pathElem is one step of a JSON path: an object key, or an array index when index >= 0.
type pathElem struct {
	key   string
	index int
}

// value redacts v. secret is set below a key that names a secret: every string and number there
// is replaced whole.
func (w *walker) value(v any, secret bool) any {
	switch t := v.(type) {
	case string:
		if secret {
			if t == "" {
				return t
			}
			w.record(ruleSecretKeyName, 0)
			return marker(ruleSecretKeyName)
		}
		spans := w.r.find(t)
		if len(spans) == 0 {
			return t
		}
		for _, sp := range spans {
			w.record(sp.rule, sp.start)
		}
		return replace(t, spans)
	case json.Number:
		if secret {
			w.record(ruleSecretKeyName, 0)
			return marker(ruleSecretKeyName)
		}
		// Part of a number cannot be replaced without making it invalid, so a number holding a
		// known value becomes the marker string.
		for _, k := range w.r.known {
			if strings.Contains(string(t), k) {
				w.record(ruleKnownSecret, 0)
				return marker(ruleKnownSecret)
			}
		}
		return t
	case []any:
		for i := range t {
			w.path = append(w.path, pathElem{index: i})
			t[i] = w.value(t[i], secret)
			w.path = w.path[:len(w.path)-1]
		}
		return t
	case map[string]any:
		return w.object(t, secret)
	default: // bool, nil
		return v
	}
}

// object redacts the keys and values of m.
func (w *walker) object(m map[string]any, secret bool) map[string]any {
	var renamed map[string][]span
	for k := range m {
		if spans := w.r.find(k); len(spans) > 0 {
			if renamed == nil {
				renamed = make(map[string][]span)
			}
			renamed[k] = spans
		}
	}
	if renamed == nil {
		// The common case: no key changes, so the map is updated in place and visiting order does
		// not matter (findings are sorted at the end).
		for k, v := range m {
			w.path = append(w.path, pathElem{key: k, index: -1})
			m[k] = w.value(v, secret || w.r.rules.isSecretKey(k))
			w.path = w.path[:len(w.path)-1]
		}
		return m
	}

	// Redacted keys may collide with each other or with other keys; visiting the original keys in
	// sorted order makes the "#2", "#3" suffixes deterministic.
	out := make(map[string]any, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		spans := renamed[k]
		if len(spans) > 0 {
			name = replace(k, spans)
		}
		if _, taken := out[name]; taken {
			for n := 2; ; n++ {
				alt := name + "#" + strconv.Itoa(n)
				if _, taken := out[alt]; !taken {
					name = alt
					break
				}
			}
		}
		w.path = append(w.path, pathElem{key: name, index: -1})
		for _, sp := range spans {
			w.record(sp.rule, sp.start)
		}
		out[name] = w.value(m[k], secret || w.r.rules.isSecretKey(k))
		w.path = w.path[:len(w.path)-1]
	}
	return out
}

// record adds a finding at the current path.
func (w *walker) record(rule string, offset int) {
	w.findings = append(w.findings, Finding{Rule: rule, Artifact: w.artifact, Path: w.renderPath(), Offset: offset})
}

// renderPath renders the current path, e.g. `$.args.env["API TOKEN"]` or `$.items[3]`.
func (w *walker) renderPath() string {
	var b strings.Builder
	b.WriteByte('$')
	for _, e := range w.path {
		switch {
		case e.index >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(e.index))
			b.WriteByte(']')
		case isIdentifier(e.key):
			b.WriteByte('.')
			b.WriteString(e.key)
		default:
			b.WriteByte('[')
			writeJSONString(&b, e.key)
			b.WriteByte(']')
		}
	}
	return b.String()
}

// isIdentifier reports whether key can follow a '.' in a path: [A-Za-z_][A-Za-z0-9_]*.
func isIdentifier(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// writeJSONString writes s as a JSON string literal, escaping only what JSON requires.
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// isSecretKey reports whether the value under key is secret: its normalized form ends with one of
// the key names. It avoids allocating for ASCII keys, which is nearly all of them.
func (rs *ruleSet) isSecretKey(key string) bool {
	var arr [64]byte
	buf := arr[:0]
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= utf8.RuneSelf:
			return rs.hasKeyNameSuffix(normalizeKey(key))
		case c == '_' || c == '-' || c == '.' || c == ' ':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return rs.hasKeyNameSuffix(string(buf))
}

// hasKeyNameSuffix reports whether the normalized key ends with one of the key names.
func (rs *ruleSet) hasKeyNameSuffix(norm string) bool {
	for _, name := range rs.keyNames {
		if strings.HasSuffix(norm, name) {
			return true
		}
	}
	return false
}

// normalizeKey lower-cases key and removes '_', '-', '.' and spaces, so that DB_PASSWORD,
// db-password and dbPassword compare equal.
func normalizeKey(key string) string {
	return strings.ToLower(strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return r
	}, key))
}
