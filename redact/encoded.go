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
// and where each lies in text.
type blob struct {
	chars []byte
	offs  []int // offs[i]: the offset in text of chars[i]
	end   int   // the end in text, past any padding
}

// base64Value returns the 6-bit value of a base64 character of either alphabet, or -1.
func base64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '+' || c == '-':
		return 62
	case c == '/' || c == '_':
		return 63
	}
	return -1
}

// escapeAt reads a JSON escape at text[i] (with escaped set; any number of backslashes, as in
// JSON inside a JSON string): it returns the byte it stands for, '/' and the line break bytes
// 'n' and 'r' as such and 0 for any other, and the offset after it. ok is false if text[i] is
// not a backslash.
func escapeAt(text []byte, i int) (c byte, next int, ok bool) {
	if text[i] != '\\' {
		return 0, 0, false
	}
	j := i
	for j < len(text) && text[j] == '\\' {
		j++
	}
	if j == len(text) {
		return 0, j, true
	}
	switch text[j] {
	case '/':
		return '/', j + 1, true
	case 'n':
		return '\n', j + 1, true
	case 'r':
		return '\r', j + 1, true
	case 'u':
		return 0, min(len(text), j+5), true
	}
	return 0, j + 1, true
}

// charAt returns the base64 character at text[i] and the offset after it, or ok false. With
// escaped set, `\/` is a '/'.
func charAt(text []byte, i int, escaped bool) (c byte, next int, ok bool) {
	if isBase64Byte(text[i]) {
		return text[i], i + 1, true
	}
	if escaped {
		if e, n, isEsc := escapeAt(text, i); isEsc && e == '/' {
			return '/', n, true
		}
	}
	return 0, 0, false
}

// lineBreakAt returns the offset after the line break (\n or \r\n, JSON-escaped with escaped
// set) at text[i], or ok false.
func lineBreakAt(text []byte, i int, escaped bool) (int, bool) {
	if !escaped {
		switch {
		case i < len(text) && text[i] == '\n':
			return i + 1, true
		case i+1 < len(text) && text[i] == '\r' && text[i+1] == '\n':
			return i + 2, true
		}
		return 0, false
	}
	if i >= len(text) {
		return 0, false
	}
	c, next, ok := escapeAt(text, i)
	if ok && c == '\r' && next < len(text) {
		c, next, ok = escapeAt(text, next)
	}
	if !ok || c != '\n' {
		return 0, false
	}
	return next, true
}

// readSegment appends to b the base64 characters from text[i] on and returns the offset after
// them.
func (b *blob) readSegment(text []byte, i int, escaped bool) int {
	for i < len(text) {
		c, next, ok := charAt(text, i, escaped)
		if !ok {
			break
		}
		b.chars = append(b.chars, c)
		b.offs = append(b.offs, i)
		i = next
	}
	return i
}

// scanBlobs calls fn with each blob of text (see the top of this file). b's buffers are reused
// from one call of fn to the next. Each byte of text is read a bounded number of times.
func scanBlobs(text []byte, escaped bool, b *blob, fn func(*blob)) {
	for i := 0; i < len(text); {
		if _, _, ok := charAt(text, i, escaped); !ok {
			if escaped {
				if _, next, isEsc := escapeAt(text, i); isEsc {
					i = next
					continue
				}
			}
			i++
			continue
		}
		b.chars, b.offs = b.chars[:0], b.offs[:0]
		end := b.readSegment(text, i, escaped)
		if width := len(b.chars); width%4 == 0 && width >= minEncodedBlob {
			end = b.readLines(text, end, width, escaped)
		}
		for n := 0; n < 2 && end < len(text) && text[end] == '='; n++ {
			end++
		}
		b.end = end
		if len(b.chars) >= minEncodedBlob {
			fn(b)
		}
		i = end
	}
}

// readLines reads the lines that continue a wrapped blob whose first line, width characters,
// ends at text[end], and returns the blob's new end.
func (b *blob) readLines(text []byte, end, width int, escaped bool) int {
	for {
		next, ok := lineBreakAt(text, end, escaped)
		if !ok || next >= len(text) {
			return end
		}
		if _, _, ok := charAt(text, next, escaped); !ok {
			return end
		}
		before := len(b.chars)
		lineEnd := b.readSegment(text, next, escaped)
		n := len(b.chars) - before
		if n > width {
			// A longer line is something else: it starts a blob of its own.
			b.chars, b.offs = b.chars[:before], b.offs[:before]
			return end
		}
		end = lineEnd
		if n < width {
			return end
		}
	}
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

// groupSpan maps decoded bytes [a, b) of blob to the text covered by the whole 4-character
// groups that carry them.
func (b *blob) groupSpan(from, to int) (int, int) {
	first := from / 3 * 4
	last := min(len(b.chars), (to+2)/3*4) // exclusive
	start := b.offs[first]
	if last == len(b.chars) {
		return start, b.end
	}
	return start, b.offs[last-1] + 1
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
	var b blob
	var decoded []byte
	scanBlobs(text, false, &b, func(b *blob) {
		decoded = decodeBase64(decoded[:0], b.chars)
		for _, sp := range r.findAll(decoded, sc, depth+1) {
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
	var b blob
	var decoded []byte
	scanBlobs(text, escaped, &b, func(b *blob) {
		decoded = decodeBase64(decoded[:0], b.chars)
		if r.holdsHit(decoded, sc) || depth+1 < maxDecodeDepth && len(r.encodedHits(decoded, false, sc, depth+1)) > 0 {
			out = append(out, span{start: b.offs[0], end: b.end})
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
