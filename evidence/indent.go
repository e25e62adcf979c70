package evidence

// AppendIndent appends to dst the JSON value src indented with two spaces
// per level and no prefix, byte for byte what json.Indent(dst, src, "", "  ")
// writes, and returns the extended buffer. src must be one valid JSON
// value, such as json.Marshal or a json.Encoder produces (without the
// Encoder's final newline); whitespace outside strings is dropped, as
// json.Indent drops it.
//
// Stored artifacts and manifests are indented for the auditors who read
// them, and their digests cover those exact bytes. json.Indent runs its
// general scanner over every byte, which was the larger half of encoding
// an artifact; a value that is already known to be valid needs only to
// tell strings from punctuation.
func AppendIndent(dst, src []byte) []byte {
	depth := 0
	// open is set after '{' or '[': the newline is held back so that an
	// empty object or array stays "{}" or "[]".
	open := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if open && c != '}' && c != ']' {
			open = false
			depth++
			dst = appendNewline(dst, depth)
		}
		switch c {
		case '"':
			end := stringEnd(src, i)
			dst = append(dst, src[i:end]...)
			i = end - 1
		case '{', '[':
			open = true
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			dst = appendNewline(dst, depth)
		case ':':
			dst = append(dst, c, ' ')
		case '}', ']':
			if open {
				open = false
			} else {
				depth--
				dst = appendNewline(dst, depth)
			}
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// stringEnd returns the index just past the string that starts with the
// quote at src[start], or len(src) when it is not closed.
func stringEnd(src []byte, start int) int {
	for i := start + 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(src)
}

func appendNewline(dst []byte, depth int) []byte {
	dst = append(dst, '\n')
	for range depth {
		dst = append(dst, ' ', ' ')
	}
	return dst
}
