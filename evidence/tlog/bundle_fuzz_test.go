package tlog

import (
	"bytes"
	"testing"
)

// FuzzParseBundle: an entry bundle read from a bucket either is refused or
// holds exactly the entries that marshal back to its bytes.
func FuzzParseBundle(f *testing.F) {
	f.Add(marshalBundle([][]byte{[]byte("a"), []byte("bc")}), 2)
	f.Add([]byte{0, 5, 'x'}, 1)
	f.Fuzz(func(t *testing.T, data []byte, width int) {
		entries, err := ParseBundle(data, width)
		if err != nil {
			return
		}
		if len(entries) != width || !bytes.Equal(marshalBundle(entries), data) {
			t.Fatalf("%q parsed into %d entries that marshal differently", data, len(entries))
		}
	})
}
