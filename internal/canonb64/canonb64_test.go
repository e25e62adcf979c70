package canonb64

import (
	"encoding/base64"
	"testing"
)

func TestRespellingsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func(string) ([]byte, error)
		s      string
		ok     bool
	}{
		{"std canonical", Std, "AAE=", true},
		{"std spare bits set", Std, "AAF=", false},
		{"std line break", Std, "AA\nE=", false},
		{"std carriage return", Std, "AAE=\r", false},
		{"std padding missing", Std, "AAE", false},
		{"std url alphabet", Std, "-_8=", false},
		{"url canonical", RawURL, "AAE", true},
		{"url spare bits set", RawURL, "AAF", false},
		{"url line break", RawURL, "A\nAE", false},
		{"url padded", RawURL, "AAE=", false},
		{"url std alphabet", RawURL, "+/8", false},
		{"empty", Std, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.decode(tc.s)
			if (err == nil) != tc.ok {
				t.Errorf("decode(%q): err %v, want ok=%v", tc.s, err, tc.ok)
			}
		})
	}
}

// FuzzCanonical: whatever is accepted is exactly what the encoder writes
// for the bytes it decodes to, and whatever the encoder writes is accepted.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"AAE=", "AAF=", "AA\nE=", "AAE", "AAF", "-_8", "+/8=", "Zm9vYg==", "Zm9vYh=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			decode func(string) ([]byte, error)
			enc    *base64.Encoding
		}{{Std, base64.StdEncoding}, {RawURL, base64.RawURLEncoding}} {
			b, err := c.decode(s)
			if err == nil && c.enc.EncodeToString(b) != s {
				t.Fatalf("accepted %q, which encodes back as %q", s, c.enc.EncodeToString(b))
			}
			if _, err := c.decode(c.enc.EncodeToString([]byte(s))); err != nil {
				t.Fatalf("refused the encoding of %q: %v", s, err)
			}
		}
	})
}
