package termsafe

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// errNotJSON is JSON's answer for a document that is not valid JSON.
var errNotJSON = errors.New("termsafe: not valid JSON")

// JSON returns the valid JSON document data with every unsafe rune inside
// its strings written as a \u escape (a pair of them beyond U+FFFF), and a
// byte that is not UTF-8 as \ufffd, which is what a JSON decoder reads it
// as. The result is valid JSON that decodes to the same value, and no
// unsafe rune appears in its bytes: encoding/json and protojson leave
// U+009B, U+202E and DEL raw. Between strings, the only bytes of valid JSON
// are punctuation, literals, numbers and whitespace; a carriage return
// there is whitespace and becomes a space.
func JSON(data []byte) ([]byte, error) {
	if !json.Valid(data) {
		return nil, errNotJSON
	}
	if clean(data) {
		return data, nil
	}
	out := make([]byte, 0, len(data)+16)
	inString, escaped := false, false
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		switch {
		case !inString:
			if r == '"' {
				inString = true
			}
			if r == '\r' {
				r = ' '
			}
			out = utf8.AppendRune(out, r)
		case escaped:
			escaped = false
			out = append(out, data[:size]...)
		case r == '\\':
			escaped = true
			out = append(out, '\\')
		case r == '"':
			inString = false
			out = append(out, '"')
		case Safe(r):
			out = append(out, data[:size]...)
		default: // an invalid byte decodes as U+FFFD, unsafe, escaped as such
			out = appendJSONEscape(out, r)
		}
		data = data[size:]
	}
	return out, nil
}

// clean reports whether data holds no unsafe rune but the newline, tab and
// carriage return a JSON document may hold between its strings.
func clean(data []byte) bool {
	for len(data) > 0 {
		if c := data[0]; c < utf8.RuneSelf {
			if (c < ' ' && c != '\n' && c != '\t') || c == 0x7f {
				return false
			}
			data = data[1:]
			continue
		}
		r, size := utf8.DecodeRune(data)
		if !Safe(r) {
			return false
		}
		data = data[size:]
	}
	return true
}

// appendJSONEscape appends r as JSON's \uXXXX, a surrogate pair beyond the
// Basic Multilingual Plane.
func appendJSONEscape(out []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	one := func(out []byte, u rune) []byte {
		return append(out, '\\', 'u', hex[u>>12&0xf], hex[u>>8&0xf], hex[u>>4&0xf], hex[u&0xf])
	}
	if r >= 0x10000 {
		hi, lo := utf16.EncodeRune(r)
		return one(one(out, hi), lo)
	}
	return one(out, r)
}

// Indent is json.Indent followed by JSON: the document data, indented, for
// a terminal.
func Indent(data []byte, prefix, indent string) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Indent(&b, data, prefix, indent); err != nil {
		return nil, err
	}
	return JSON(b.Bytes())
}
