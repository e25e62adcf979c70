package policy

import (
	"bytes"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
)

// parseChunk is how many statements parsePolicies hands cedar-go at once.
const parseChunk = 256

// parsePolicies parses a policy file as cedar.NewPolicyListFromBytes does,
// with the same policies, positions and errors, in less memory.
//
// cedar-go tokenizes a whole document into one slice before parsing it;
// at 10,000 rules that slice, grown by doubling, was most of the memory a
// load allocated. The file is therefore parsed a chunk of statements at a
// time, each chunk preceded by blank lines and spaces that put its first
// byte on its own line and column, so every position is what the whole
// file gives. Chunks cover the file end to end, so nothing is skipped;
// when any chunk fails, the whole file is parsed again and that result
// (its error, with its message and position) is the one returned.
func parsePolicies(file string, src []byte, chunk int) (cedar.PolicyList, error) {
	stmts := statements(src)
	if len(stmts) <= chunk {
		return cedar.NewPolicyListFromBytes(file, src)
	}
	list := make(cedar.PolicyList, 0, len(stmts))
	var buf []byte
	start := 0
	for i := chunk - 1; start < len(src); i += chunk {
		end := len(src)
		if i < len(stmts)-1 {
			end = stmts[i].end
		}
		buf = appendPadding(buf[:0], src[:start])
		buf = append(buf, src[start:end]...)
		part, err := cedar.NewPolicyListFromBytes(file, buf)
		if err != nil {
			return cedar.NewPolicyListFromBytes(file, src)
		}
		list = append(list, part...)
		start = end
	}
	return list, nil
}

// appendPadding appends the whitespace that stands for before: as many
// newlines, then as many spaces as before's last line has characters.
func appendPadding(dst, before []byte) []byte {
	for range bytes.Count(before, []byte{'\n'}) {
		dst = append(dst, '\n')
	}
	lastLine := before[bytes.LastIndexByte(before, '\n')+1:]
	for range utf8.RuneCount(lastLine) {
		dst = append(dst, ' ')
	}
	return dst
}
