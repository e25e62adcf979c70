package ident

import "unicode/utf8"

// maxQuoted is how much of an offending input an error message quotes.
const maxQuoted = 160

// Clip keeps an error message that quotes an offending input bounded when
// the input is huge: it cuts s at a rune boundary and marks the cut.
func Clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
