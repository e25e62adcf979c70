package redact

// Partial echoes. A tool that prints part of a secret — all but its last characters, a slice
// ${TOKEN:4:20} — leaks most of it. Known values and caller secrets are therefore also redacted
// where a long run of their consecutive bytes appears: any run of at least partialMin(len)
// bytes of the value, exactly as written, found at the value's offset it matches (the longest
// such run is replaced). The minimum is half the value, and never under minPartialRun, so that
// what may still be shown of one occurrence leaves at least half the value unknown, and short
// runs that occur by chance in text are never touched. A value no longer than minPartialRun is
// only redacted whole.
//
// Runs are found from grams: the value's substrings of gramLen bytes at every gramStep-th offset
// are automaton patterns, spaced so that every run of the minimum length holds one whole. Each
// hit is extended both ways along the value; a run is computed once per alignment of the value
// in the text, so text dense with one value costs a bounded multiple of its length.

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// minPartialRun is the shortest run of a value's bytes that is redacted short of the whole.
const minPartialRun = 12

// partialMin returns the shortest run of a value of n bytes that is redacted: half of it, at
// least minPartialRun.
func partialMin(n int) int { return max(minPartialRun, (n+1)/2) }

// partialValue is a value whose runs are redacted.
type partialValue struct {
	value      []byte
	min        int
	standalone bool // a caller secret: runs count where they stand alone (see Standalone)
}

// partialRef places a gram in its value.
type partialRef struct {
	v      *partialValue
	offset int
}

// runKey identifies one alignment of a value in a text: where its first byte would be.
type runKey struct {
	v    *partialValue
	diag int
}

// partialForms returns the gram forms of values longer than minPartialRun.
func partialForms(values []string, standalone bool) []form {
	var out []form
	index := map[string]int{}
	for _, s := range values {
		if len(s) <= minPartialRun {
			continue
		}
		v := &partialValue{value: []byte(s), min: partialMin(len(s)), standalone: standalone}
		gramLen := max(6, min(16, v.min/2))
		step := v.min - gramLen + 1
		for off := 0; off+gramLen <= len(s); off += step {
			g := s[off : off+gramLen]
			i, ok := index[g]
			if !ok {
				i = len(out)
				index[g] = i
				out = append(out, form{text: []byte(g)})
			}
			out[i].partial = append(out[i].partial, partialRef{v: v, offset: off})
		}
	}
	return out
}

// appendRuns appends the runs of f's values through its gram ending at end in text.
func (f *form) appendRuns(spans []span, text []byte, end int, done map[runKey]int) []span {
	gramStart := end - len(f.text)
	if gramStart < 0 || !bytes.Equal(text[gramStart:end], f.text) {
		return spans
	}
	for _, ref := range f.partial {
		v := ref.v.value
		key := runKey{v: ref.v, diag: gramStart - ref.offset}
		if e, ok := done[key]; ok && e >= end {
			continue
		}
		d := key.diag
		start, stop := gramStart, end
		for start > 0 && start-1-d >= 0 && text[start-1] == v[start-1-d] {
			start--
		}
		for stop < len(text) && stop-d < len(v) && text[stop] == v[stop-d] {
			stop++
		}
		done[key] = stop
		if stop-start < ref.v.min {
			continue
		}
		rule := RuleKnownSecret
		if ref.v.standalone {
			if !standsAlone(text, start, stop) {
				continue
			}
			rule = RuleCallerSecret
		}
		spans = append(spans, span{start: start, end: stop, rule: rule, order: -1})
	}
	return spans
}

// reversals returns s with its bytes in reverse order and, when s is UTF-8, with its characters
// in reverse order, as rev and most languages reverse text (the same for ASCII).
func reversals(s string) []string {
	b := []byte(s)
	slices.Reverse(b)
	if !utf8.ValidString(s) {
		return []string{string(b)}
	}
	r := []rune(s)
	slices.Reverse(r)
	return []string{string(r), string(b)}
}
