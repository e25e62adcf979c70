package workspace

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// capture keeps the first limit bytes written to it and counts the rest, so
// a command's output costs bounded memory however much it prints. Writes
// never fail: a command must not see a broken pipe because its output was
// capped.
type capture struct {
	limit   int
	buf     []byte
	dropped int64
	// next is the first dropped byte: whether the cut split a token
	// depends on it.
	next byte
}

func (c *capture) Write(p []byte) (int, error) {
	keep := min(len(p), c.limit-len(c.buf))
	c.buf = append(c.buf, p[:keep]...)
	if c.dropped == 0 && keep < len(p) {
		c.next = p[keep]
	}
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// String returns the kept output as valid UTF-8 and reports whether output
// was dropped, in which case a line saying how much ends the text.
func (c *capture) String() (string, bool) {
	kept, dropped := c.buf, c.dropped
	if dropped > 0 {
		// The cut may have split a token (a key, a password): the
		// redactor cannot recognise half of one, so its first characters
		// go to the dropped side too.
		if n := tokenSuffix(kept); n > 0 && isTokenByte(c.next) {
			kept, dropped = kept[:len(kept)-n], dropped+int64(n)
		}
		// The cut may have split a character; move its first bytes to the
		// dropped side rather than turning them into a replacement rune.
		if n := partialRuneSuffix(kept); n > 0 {
			kept, dropped = kept[:len(kept)-n], dropped+int64(n)
		}
	}
	s := strings.ToValidUTF8(string(kept), string(utf8.RuneError))
	if dropped == 0 {
		return s, false
	}
	return s + fmt.Sprintf("\n[output truncated: %d bytes omitted]\n", dropped), true
}

// tokenLookBack bounds how far a cut moves back to leave no partial token.
const tokenLookBack = 256

// tokenSuffix returns the length of the run of token bytes (the alphabet of
// keys, passwords and their base64, hex or URL encodings) that ends b, at
// most tokenLookBack. A run that fills the whole look-back is dropped whole:
// a secret may start anywhere in it.
func tokenSuffix(b []byte) int {
	n := 0
	for n < len(b) && n < tokenLookBack && isTokenByte(b[len(b)-1-n]) {
		n++
	}
	return n
}

// isTokenByte reports whether c may be part of a secret-like token.
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("+/=_.:-%~", c) >= 0
}

// partialRuneSuffix returns the length of an incomplete UTF-8 sequence at the
// end of b, or 0 if b ends on a character boundary.
func partialRuneSuffix(b []byte) int {
	for n := 1; n < utf8.UTFMax && n <= len(b); n++ {
		c := b[len(b)-n]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}
