package evidence

import (
	"bytes"
	"testing"
)

// FuzzParseCheckpoints: whatever a kept-checkpoints file parses into
// formats back to the same bytes, and nothing panics.
func FuzzParseCheckpoints(f *testing.F) {
	f.Add([]byte("toolgate.log/x/gw-1\n5\nAAAA\n\n\u2014 toolgate.log/x/gw-1 c2ln\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		notes, err := ParseCheckpoints(data)
		if err != nil {
			return
		}
		if got := FormatCheckpoints(notes); !bytes.Equal(got, data) {
			t.Fatalf("%q parsed into notes that format as %q", data, got)
		}
	})
}

// FuzzCheckpointBody: a stored checkpoint, which a bucket's owner
// controls, never panics the writer that restores from it.
func FuzzCheckpointBody(f *testing.F) {
	f.Add([]byte("toolgate.log/x/gw-1\n5\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\u2014 toolgate.log/x/gw-1 c2ln\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		origin, _, _, err := checkpointBody(data)
		if err == nil && bytes.Contains([]byte(origin), []byte("\n")) {
			t.Fatalf("origin %q spans lines", origin)
		}
	})
}
