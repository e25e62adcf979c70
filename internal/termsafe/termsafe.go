// Package termsafe renders untrusted text (a call's arguments, a tool's
// output, an artifact read back from the store) for a person's terminal.
//
// A terminal acts on more than what it shows: C0 controls and DEL, the C1
// controls U+0080–U+009F (U+009B is a complete CSI, as ESC [ is), and
// invisible format characters — the bidirectional overrides and isolates
// (U+202A–U+202E, U+2066–U+2069), the marks U+200E, U+200F and U+061C, and
// the zero-width ones (U+200B, U+2060, U+FEFF …) — let text display as
// something other than what it is. An approver shown `rm -rf ~/x` reversed
// by U+202E approves a command that is not the one on screen.
//
// One predicate, Safe, says which runes may reach the terminal raw; every
// other rune is written as a visible escape (\u202e). Quote and Text are for
// plain text; JSON keeps a JSON document valid and, parsed, equal, while
// none of those runes appears raw in its bytes.
package termsafe

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Safe reports whether r may be written raw to a terminal: a graphic
// character or the ASCII space. Not safe: every control (C0, DEL, C1),
// every format character (category Cf: bidi controls, zero-width
// characters, the byte order mark, tag characters), separators other than
// the space (U+2028 …), private-use and surrogate code points, U+FFFD
// (which stands for bytes that were not UTF-8), and the code points Unicode
// lists as invisible though otherwise graphic (Other_Default_Ignorable:
// the Hangul fillers U+115F, U+3164, the combining grapheme joiner …).
func Safe(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= ' ' && r < 0x7f
	}
	return r != utf8.RuneError && unicode.IsPrint(r) &&
		!unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// Clean reports whether s is valid UTF-8 made only of safe runes, so that it
// may be printed as it is.
func Clean(s string) bool {
	for _, r := range s {
		if !Safe(r) { // a byte that is not UTF-8 ranges as U+FFFD, unsafe
			return false
		}
	}
	return true
}

// Quote returns s unchanged when it is clean, and otherwise as a Go
// double-quoted string literal in which every unsafe rune is an escape
// (\n, \x1b, \u202e, \U000e0041; a byte that is not UTF-8 is \xNN), so
// strconv.Unquote gives s back. Unchanged text cannot start with a quote
// and be confused with a quoted one: a string with a leading '"' is
// always quoted.
func Quote(s string) string {
	if Clean(s) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return QuoteAlways(s)
}

// QuoteAlways returns s as a Go double-quoted string literal whose unsafe
// runes are escapes; strconv.Unquote gives s back.
func QuoteAlways(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(r))
		default:
			writeRune(&b, r, size == 1 && r == utf8.RuneError, s[0])
		}
		s = s[size:]
	}
	b.WriteByte('"')
	return b.String()
}

// Text returns free text with newlines and tabs kept, so that it reads as
// lines, and every other unsafe rune escaped as in Quote. Backslashes are
// kept as they are, so Text is for reading, not for parsing back: use
// Quote where the text must be recovered exactly.
func Text(s string) string {
	if cleanText(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == '\n' || r == '\t' {
			b.WriteRune(r)
		} else {
			writeRune(&b, r, size == 1 && r == utf8.RuneError, s[0])
		}
		s = s[size:]
	}
	return b.String()
}

// cleanText reports whether s is clean but for newlines and tabs.
func cleanText(s string) bool {
	for _, r := range s {
		if !Safe(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// writeRune writes r raw when it is safe, and otherwise as a Go escape;
// invalid says r stands for the single byte b that is not UTF-8.
func writeRune(w *strings.Builder, r rune, invalid bool, b byte) {
	const hex = "0123456789abcdef"
	switch {
	case invalid:
		w.WriteString(`\x`)
		w.WriteByte(hex[b>>4])
		w.WriteByte(hex[b&0xf])
	case Safe(r):
		w.WriteRune(r)
	case goEscape(r) != "":
		w.WriteString(goEscape(r))
	case r < ' ' || r == 0x7f:
		w.WriteString(`\x`)
		w.WriteByte(hex[r>>4])
		w.WriteByte(hex[r&0xf])
	case r < 0x10000:
		w.WriteString(`\u`)
		w.WriteString(pad(strconv.FormatInt(int64(r), 16), 4))
	default:
		w.WriteString(`\U`)
		w.WriteString(pad(strconv.FormatInt(int64(r), 16), 8))
	}
}

// goEscape is the short escape Go gives the C0 control r, or "".
func goEscape(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	return ""
}

// pad left-pads hex digits with zeros to n.
func pad(digits string, n int) string {
	if len(digits) >= n {
		return digits
	}
	return strings.Repeat("0", n-len(digits)) + digits
}
