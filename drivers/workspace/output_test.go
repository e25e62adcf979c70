package workspace

import (
	"strings"
	"testing"
)

func TestCapture(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		limit         int
		writes        []string
		want          string
		wantTruncated bool
	}{
		{"under the limit", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly the limit", 6, []string{"abc", "def"}, "abcdef", false},
		{"over the limit", 4, []string{"ab ", "def"}, "ab \n[output truncated: 3 bytes omitted]\n", true},
		{"a token cut at the limit is dropped whole", 12, []string{"key: sk_live_4eC39HqLyjWDarjtT1zdp7dc\n"}, "key: \n[output truncated: 33 bytes omitted]\n", true},
		{"a cut after a token keeps it", 8, []string{"ab cd ef gh"}, "ab cd ef\n[output truncated: 3 bytes omitted]\n", true},
		{"a run longer than the look-back goes with it", 300, []string{strings.Repeat("x", 400)}, strings.Repeat("x", 300-tokenLookBack) + "\n[output truncated: 356 bytes omitted]\n", true},
		{"zero limit", 0, []string{"abc"}, "\n[output truncated: 3 bytes omitted]\n", true},
		{"cut inside a character", 4, []string{"a €"}, "a \n[output truncated: 3 bytes omitted]\n", true},
		{"invalid bytes", 10, []string{"a\xffb\xc0"}, "a\uFFFDb\uFFFD", false},
		{"invalid byte at the cut", 2, []string{" \xffbc"}, " \uFFFD\n[output truncated: 2 bytes omitted]\n", true},
		{"character split across writes", 10, []string{"a\xe2\x82", "\xac"}, "a€", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := capture{limit: tt.limit}
			for _, w := range tt.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(w))
				}
			}
			got, truncated := c.String()
			if got != tt.want || truncated != tt.wantTruncated {
				t.Errorf("String() = %q, %v; want %q, %v", got, truncated, tt.want, tt.wantTruncated)
			}
		})
	}
}
