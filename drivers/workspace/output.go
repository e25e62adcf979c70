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
}

func (c *capture) Write(p []byte) (int, error) {
	keep := min(len(p), c.limit-len(c.buf))
	c.buf = append(c.buf, p[:keep]...)
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}

// String returns the kept output as valid UTF-8 and reports whether output
// was dropped, in which case a line saying how much ends the text.
func (c *capture) String() (string, bool) {
	kept, dropped := c.buf, c.dropped
	if dropped > 0 {
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
