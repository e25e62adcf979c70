package redact

import "bytes"

// wrapWidths are the line lengths at which encoders wrap their output: xxd -p (60 hex digits),
// PEM and base64 -w 64 (64), base64 and MIME (76).
var wrapWidths = [...]int{60, 64, 76}

// minWrappedLines is the fewest lines a wrapped encoding has: one line is searched as it is.
const minWrappedLines = 2

// lineBreak returns the next line break in text at or after from: the start of the line's end
// (before a '\r' of "\r\n") and the start of the next line, or -1. With escaped set, line breaks
// are JSON escapes (`\n`, `\r\n`), as in the text of a JSON document.
func lineBreak(text []byte, from int, escaped bool) (end, next int) {
	if escaped {
		i := bytes.Index(text[from:], []byte(`\n`))
		if i < 0 {
			return -1, -1
		}
		end, next = from+i, from+i+2
		if end-2 >= from && text[end-2] == '\\' && text[end-1] == 'r' {
			end -= 2
		}
		return end, next
	}
	i := bytes.IndexByte(text[from:], '\n')
	if i < 0 {
		return -1, -1
	}
	end, next = from+i, from+i+1
	if end > from && text[end-1] == '\r' {
		end--
	}
	return end, next
}

// isEncodingLine reports whether line is all base64 characters (hex digits included), with
// padding only at its end.
func isEncodingLine(line []byte) bool {
	if len(line) == 0 {
		return false
	}
	line = bytes.TrimRight(line, "=")
	for _, c := range line {
		if !isBase64Byte(c) {
			return false
		}
	}
	return true
}

// trailingEncoding returns how many bytes at the end of line are base64 characters (hex digits
// included). It reads no further back than the longest wrap width and one byte more.
func trailingEncoding(line []byte) int {
	longest := wrapWidths[len(wrapWidths)-1]
	n := 0
	for i := len(line) - 1; i >= 0 && n <= longest && isBase64Byte(line[i]); i-- {
		n++
	}
	return n
}

// isWrapWidth reports whether n is one of wrapWidths.
func isWrapWidth(n int) bool {
	for _, w := range wrapWidths {
		if n == w {
			return true
		}
	}
	return false
}

// wrappedRuns calls fn with each run of wrapped encoding in text: at least minWrappedLines
// lines of encoding characters, each but the last exactly as long as the first, which is one of
// wrapWidths, and the last no longer. The first line's encoding characters may follow other
// text on that line; lines is then where they start. lines holds [start, end) of each line. It reads each byte
// of text a bounded number of times.
func wrappedRuns(text []byte, escaped bool, fn func(lines [][2]int)) {
	var lines [][2]int
	flush := func() {
		if len(lines) >= minWrappedLines {
			fn(lines)
		}
		lines = lines[:0]
	}
	width := 0
	for start := 0; start < len(text); {
		end, next := lineBreak(text, start, escaped)
		if end < 0 {
			end, next = len(text), len(text)
		}
		n := end - start
		switch {
		case len(lines) > 0 && n == width && isEncodingLine(text[start:end]):
			lines = append(lines, [2]int{start, end})
		case len(lines) > 0 && n > 0 && n < width && isEncodingLine(text[start:end]):
			lines = append(lines, [2]int{start, end})
			flush()
		default:
			flush()
			// The first line may follow other text on its line ("key: " before the
			// output of base64, `"stdout": "` in a JSON document): its encoding
			// characters at the end count.
			if t := trailingEncoding(text[start:end]); isWrapWidth(t) {
				width = t
				lines = append(lines, [2]int{end - t, end})
			}
		}
		start = next
	}
	flush()
}

// canWrap reports whether r knows values whose encodings may be line-wrapped.
func (r *Redactor) canWrap() bool { return r.wrapped || len(r.extra) > 0 }

// hasWrappedRun reports whether text holds a run of wrapped encoding (see wrappedRuns).
func hasWrappedRun(text []byte, escaped bool) bool {
	found := false
	wrappedRuns(text, escaped, func([][2]int) { found = true })
	return found
}

// findWrapped finds known values in line-wrapped hex and base64 (xxd -p, base64, PEM, MIME):
// each run of wrapped lines is joined, searched for the known values' forms, and what is found
// mapped back to text, where a span then covers the line breaks inside it.
func (r *Redactor) findWrapped(text []byte, sc *scratch) []span {
	if !r.canWrap() {
		return nil
	}
	var spans []span
	var joined []byte
	var offsets []int
	wrappedRuns(text, false, func(lines [][2]int) {
		joined, offsets = joined[:0], offsets[:0]
		for _, l := range lines {
			joined = append(joined, text[l[0]:l[1]]...)
			for i := l[0]; i < l[1]; i++ {
				offsets = append(offsets, i)
			}
		}
		for _, h := range r.hits(joined, sc) {
			p := r.patternAt(h.pattern)
			if p.form == nil || p.form.standalone || p.form.partial != nil {
				continue
			}
			if sp, ok := p.form.at(joined, h.end); ok {
				sp.start, sp.end = offsets[sp.start], offsets[sp.end-1]+1
				spans = append(spans, sp)
			}
		}
	})
	return spans
}
