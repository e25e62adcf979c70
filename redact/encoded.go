package redact

// Base64 blobs. A secret can reach evidence base64-encoded: a file read with encoding base64, a
// Basic credential, a Kubernetes Secret's data, `base64` output wrapped at 76 columns. Rules and
// known values cannot see through an encoding, so each blob is decoded and searched as text of
// its own (with every rule, known value and caller secret, and blobs inside it in turn, down to
// maxDecodeDepth), and what is found there is redacted in the blob: the whole 4-character groups
// that carry any bit of it, so that the text before and after the marker still decodes.
//
// A blob is a run of base64 characters (standard and URL-safe alike, so a run that mixes both
// is decoded too) with up to two '=' after it, at least minEncodedBlob characters long. It goes
// on over line breaks (\n or \r\n) when it is wrapped: its first line ends at a line break, holds
// a multiple of 4 characters, and each following line, all base64, is exactly as long, but for
// the last, which may be shorter (base64 at 76, PEM and base64 -w 64, GitHub's 60, any width a
// multiple of 4). The first line may follow other text ("data: ", `"content": "`). Decoding
// starts at the blob's first character: an encoding glued to the end of other base64
// characters is decoded at the wrong offset, which is the limit of this search.

import "slices"

// minEncodedBlob is the shortest blob decoded, in characters (12 bytes): shorter runs are words,
// and every rule's secret and every usable known value is longer or already has base64 forms
// (see knownForms).
const minEncodedBlob = 16

// maxDecodeDepth bounds how many encodings deep blobs are decoded: a token base64-encoded twice
// (a Kubernetes Secret in a base64 file) is found, and hostile nesting costs a bounded multiple.
const maxDecodeDepth = 2

// blob is one base64 encoding in text: its characters, with line breaks and escapes removed,
// and where they lie in text.
type blob struct {
	chars []byte
	// segs are the pieces of text the characters come from, in order: segs[k] holds chars
	// from starts[k] on. An escaped '/' is a piece of its own.
	segs   [][2]int
	starts []int
	n      int    // how many characters the pieces hold
	end    int    // the end in text, past any padding
	buf    []byte // holds chars when they are not one piece of text
}

// decoding holds the buffers of one level of decoding, reused through scratch.
type decoding struct {
	blob    blob
	decoded []byte
}

// base64Values holds, for each byte, 1 + its 6-bit value as a base64 character of either
// alphabet, or 0: one load per byte in the scans of every text.
const base64Values = "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x3f\x00\x3f\x00\x40\x35\x36\x37\x38\x39\x3a\x3b\x3c\x3d\x3e\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x00\x00\x00\x00\x40\x00\x1b\x1c\x1d\x1e\x1f\x20\x21\x22\x23\x24\x25\x26\x27\x28\x29\x2a\x2b\x2c\x2d\x2e\x2f\x30\x31\x32\x33\x34\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// base64Value returns the 6-bit value of a base64 character of either alphabet, or -1.
func base64Value(c byte) int { return int(base64Values[c]) - 1 }

// escapeAt reads a JSON escape at text[i], a backslash (any number of them, as in JSON inside a
// JSON string): it returns the byte it stands for, '/' and the line break bytes 'n' and 'r' as
// such and 0 for any other, and the offset after it.
func escapeAt(text []byte, i int) (c byte, next int) {
	j := i
	for j < len(text) && text[j] == '\\' {
		j++
	}
	if j == len(text) {
		return 0, j
	}
	switch text[j] {
	case '/':
		return '/', j + 1
	case 'n':
		return '\n', j + 1
	case 'r':
		return '\r', j + 1
	case 'u':
		return 0, min(len(text), j+5)
	}
	return 0, j + 1
}

// slashAt reports whether text[i] starts an escaped '/' (with escaped set) and returns the
// offset after it.
func slashAt(text []byte, i int, escaped bool) (int, bool) {
	if !escaped || text[i] != '\\' {
		return 0, false
	}
	c, next := escapeAt(text, i)
	return next, c == '/'
}

// lineBreakAt returns the offset after the line break (\n or \r\n, JSON-escaped with escaped
// set) at text[i], or ok false.
func lineBreakAt(text []byte, i int, escaped bool) (int, bool) {
	if i >= len(text) {
		return 0, false
	}
	if !escaped {
		switch {
		case text[i] == '\n':
			return i + 1, true
		case i+1 < len(text) && text[i] == '\r' && text[i+1] == '\n':
			return i + 2, true
		}
		return 0, false
	}
	if text[i] != '\\' {
		return 0, false
	}
	c, next := escapeAt(text, i)
	if c == '\r' && next < len(text) && text[next] == '\\' {
		c, next = escapeAt(text, next)
	}
	if c != '\n' {
		return 0, false
	}
	return next, true
}

// skipNonBase64 returns the offset of the first base64 character at or after text[i] or, with
// escaped set, of the first backslash (which may escape a '/'), or len(text).
func skipNonBase64(text []byte, i int, escaped bool) int {
	for i < len(text) && base64Values[text[i]] == 0 && (!escaped || text[i] != '\\') {
		i++
	}
	return i
}

// runEndHex returns the end of the run of base64 characters at text[i], and whether the run
// holds only hex digits and '-': a digest or a UUID, not base64 worth decoding (the base64 forms
// of known values still find them there).
func runEndHex(text []byte, i int) (int, bool) {
	hex := true
	for ; i < len(text); i++ {
		c := text[i]
		if base64Values[c] == 0 {
			break
		}
		if hex && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == '-') {
			hex = false
		}
	}
	return i, hex
}

// runEnd returns the end of the run of base64 characters at text[i].
func runEnd(text []byte, i int) int {
	for i < len(text) && base64Values[text[i]] != 0 {
		i++
	}
	return i
}

// readSegment adds to b the base64 characters from text[i] on (with escaped set, escaped '/'
// too) and returns how many it added and the offset after them.
func (b *blob) readSegment(text []byte, i int, escaped bool) (int, int) {
	n := 0
	for i < len(text) {
		if j := runEnd(text, i); j > i {
			b.starts = append(b.starts, b.n)
			b.segs = append(b.segs, [2]int{i, j})
			b.n += j - i
			n += j - i
			i = j
			continue
		}
		next, ok := slashAt(text, i, escaped)
		if !ok {
			break
		}
		b.starts = append(b.starts, b.n)
		b.segs = append(b.segs, [2]int{i, next})
		b.n++
		n++
		i = next
	}
	return n, i
}

// truncate drops the pieces from k on.
func (b *blob) truncate(k int) { b.n, b.segs, b.starts = b.starts[k], b.segs[:k], b.starts[:k] }

// scanBlobs calls fn with each blob of text (see the top of this file). b's buffers are reused
// from one call of fn to the next. Each byte of text is read a bounded number of times.
func scanBlobs(text []byte, escaped bool, b *blob, fn func(*blob)) {
	for i := 0; i < len(text); {
		// Most bytes are skipped here: outside runs, one table load each; in a run too short to
		// be a blob (a word), one more.
		i = skipNonBase64(text, i, escaped)
		if i == len(text) {
			return
		}
		if text[i] == '\\' {
			if _, ok := slashAt(text, i, true); !ok {
				_, i = escapeAt(text, i)
				continue
			}
		} else if j, hex := runEndHex(text, i); (j-i < minEncodedBlob || hex) && (j == len(text) || !escaped || text[j] != '\\') {
			// Not continued by an escape: a word, a digest or a UUID.
			i = j
			continue
		}
		b.n, b.segs, b.starts = 0, b.segs[:0], b.starts[:0]
		width, end := b.readSegment(text, i, escaped)
		if width%4 == 0 && width >= minEncodedBlob {
			end = b.readLines(text, end, width, escaped)
		}
		for n := 0; n < 2 && end < len(text) && text[end] == '='; n++ {
			end++
		}
		b.end = end
		if b.n >= minEncodedBlob {
			b.join(text, escaped)
			fn(b)
		}
		i = max(end, i+1)
	}
}

// join sets b.chars: the piece of text itself when there is one, else the pieces joined.
func (b *blob) join(text []byte, escaped bool) {
	if len(b.segs) == 1 {
		b.chars = text[b.segs[0][0]:b.segs[0][1]]
		return
	}
	b.buf = b.buf[:0]
	for _, seg := range b.segs {
		if escaped && text[seg[0]] == '\\' {
			b.buf = append(b.buf, '/')
			continue
		}
		b.buf = append(b.buf, text[seg[0]:seg[1]]...)
	}
	b.chars = b.buf
}

// readLines reads the lines that continue a wrapped blob whose first line, width characters,
// ends at text[end], and returns the blob's new end.
func (b *blob) readLines(text []byte, end, width int, escaped bool) int {
	for {
		next, ok := lineBreakAt(text, end, escaped)
		if !ok || next >= len(text) {
			return end
		}
		if _, ok := slashAt(text, next, escaped); !ok && !isBase64Byte(text[next]) {
			return end
		}
		before := len(b.segs)
		n, lineEnd := b.readSegment(text, next, escaped)
		if n > width {
			// A longer line is something else: it starts a blob of its own.
			b.truncate(before)
			return end
		}
		end = lineEnd
		if n < width {
			return end
		}
	}
}

// offset returns where in text character c of b lies.
func (b *blob) offset(c int) int {
	k, found := slices.BinarySearch(b.starts, c)
	if !found {
		k--
	}
	return b.segs[k][0] + c - b.starts[k]
}

// decodeBase64 appends the bytes chars encode to dst: each 4 characters give 3 bytes, a final 2
// or 3 give 1 or 2, and a final single character, which holds no whole byte, is dropped.
func decodeBase64(dst, chars []byte) []byte {
	var acc, bits uint
	for _, c := range chars {
		acc = acc<<6 | uint(base64Value(c))
		bits += 6
		if bits >= 8 {
			bits -= 8
			dst = append(dst, byte(acc>>bits))
		}
	}
	return dst
}

// groupSpan maps decoded bytes [from, to) of b to the text covered by the whole 4-character
// groups that carry them.
func (b *blob) groupSpan(from, to int) (int, int) {
	first := from / 3 * 4
	last := min(len(b.chars), (to+2)/3*4) // exclusive
	if last == len(b.chars) {
		return b.offset(first), b.end
	}
	return b.offset(first), b.offset(last-1) + 1
}

// findAll returns the secrets in text: by rule and known value, in line-wrapped encodings, and
// in base64 blobs, decoded, depth encodings deep.
func (r *Redactor) findAll(text []byte, sc *scratch, depth int) []span {
	spans := slices.Clone(r.find(text, sc, true))
	if wrapped := r.findWrapped(text, sc); len(wrapped) > 0 {
		spans = append(spans, wrapped...)
	}
	if depth < maxDecodeDepth {
		spans = append(spans, r.findEncoded(text, sc, depth)...)
	}
	return mergeSpans(spans)
}

// findEncoded returns the secrets in the base64 blobs of text, each as the span of the groups
// that encode it.
func (r *Redactor) findEncoded(text []byte, sc *scratch, depth int) []span {
	var spans []span
	d := &sc.decoding[depth]
	scanBlobs(text, false, &d.blob, func(b *blob) {
		d.decoded = decodeBase64(d.decoded[:0], b.chars)
		for _, sp := range r.findAll(d.decoded, sc, depth+1) {
			sp.start, sp.end = b.groupSpan(sp.start, sp.end)
			spans = append(spans, sp)
		}
	})
	return spans
}

// encodedHits returns the extent in text of each base64 blob whose decoding holds a keyword,
// a known value or, depth permitting, such a blob itself: the blobs a search must decode. With
// escaped set, text is JSON text, whose line breaks and slashes may be escaped.
func (r *Redactor) encodedHits(text []byte, escaped bool, sc *scratch, depth int) []span {
	var out []span
	d := &sc.decoding[depth]
	scanBlobs(text, escaped, &d.blob, func(b *blob) {
		d.decoded = decodeBase64(d.decoded[:0], b.chars)
		if r.holdsHit(d.decoded, sc) || depth+1 < maxDecodeDepth && len(r.encodedHits(d.decoded, false, sc, depth+1)) > 0 {
			out = append(out, span{start: b.segs[0][0], end: b.end})
		}
	})
	return out
}

// holdsHit reports whether text holds a keyword or a known value (markers aside).
func (r *Redactor) holdsHit(text []byte, sc *scratch) bool {
	for _, h := range r.hits(text, sc) {
		if !r.patternAt(h.pattern).marker {
			return true
		}
	}
	return false
}

// overlapsAny reports whether [start, end) overlaps one of spans (sorted, disjoint).
func overlapsAny(spans []span, start, end int) bool {
	i, _ := slices.BinarySearchFunc(spans, start, func(s span, t int) int { return s.end - t - 1 })
	return i < len(spans) && spans[i].start < end
}
