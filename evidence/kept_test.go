package evidence

import (
	"bytes"
	"testing"
)

func TestKeptCheckpointsRoundTrip(t *testing.T) {
	t.Parallel()
	a := []byte("toolgate.log/x/gw-1\n5\nAAAA\n\n\u2014 toolgate.log/x/gw-1 c2ln\n")
	b := []byte("toolgate.log/x/gw-2\n7\nBBBB\n\n\u2014 toolgate.log/x/gw-2 c2ln\n\u2014 witness d2l0\n")
	notes, err := ParseCheckpoints(FormatCheckpoints([][]byte{a, b}))
	if err != nil || len(notes) != 2 || !bytes.Equal(notes[0], a) || !bytes.Equal(notes[1], b) {
		t.Fatalf("round trip: %q, %v", notes, err)
	}
	for name, bad := range map[string]string{
		"an empty file":             "",
		"a note without signatures": "o\n1\nAAAA\n\n",
		"two lines of body":         "o\n1\n\n\u2014 o c2ln\n",
		"no blank line between":     string(a) + string(b),
		"a trailing stray line":     string(a) + "\nstray\n",
	} {
		if _, err := ParseCheckpoints([]byte(bad)); err == nil {
			t.Errorf("%s parsed", name)
		}
	}
}
