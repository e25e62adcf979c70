package evidencetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// Gzipped returns data as one gzip member, as a store's compressed body
// holds it.
func Gzipped(tb testing.TB, data []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// JSONOfSize returns a compressible JSON document of about n bytes.
func JSONOfSize(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"lines":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"the quick brown fox jumps over the lazy dog"`)
	}
	b.WriteString("]}")
	return []byte(b.String())
}
