package storage

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"request artifact", "requests/r1/request.json", true},
		{"single segment", "a", true},
		{"unicode", "requests/日本語/ünïcode-✓.json", true},
		{"dot file", "requests/r1/.hidden", true},
		{"dots inside a segment", "requests/r1..r2/a...b", true},
		{"colon and space", "requests/run:1 step/x", true},
		{"exactly the length limit", strings.Repeat("a", MaxKeyLen), true},
		{"empty", "", false},
		{"parent escape", "../x", false},
		{"escape after a prefix", "requests/../../etc", false},
		{"trailing dotdot", "requests/..", false},
		{"only dotdot", "..", false},
		{"only dot", ".", false},
		{"dot segment", "a/./b", false},
		{"absolute", "/abs", false},
		{"trailing slash", "requests/r1/", false},
		{"empty segment", "a//b", false},
		{"backslash", `a\b`, false},
		{"backslash escape", `..\..\x`, false},
		{"NUL", "a\x00b", false},
		{"newline", "a\nb", false},
		{"DEL", "a\x7fb", false},
		{"C1 control", "a\u0085b", false},
		{"invalid UTF-8", "a/\xff", false},
		{"one byte over the limit", strings.Repeat("a", MaxKeyLen+1), false},
		{"2 KiB", strings.Repeat("ab/", 683), false},
		{"reserved temp prefix", "requests/r1/.tmp-ABC", false},
		{"reserved temp prefix as a directory", ".tmp-x/y", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidKey(tt.key)
			if tt.ok && err != nil {
				t.Fatalf("ValidKey(%q) = %v, want nil", tt.key, err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ValidKey(%q) = %v, want an error wrapping ErrInvalidKey", tt.key, err)
			}
		})
	}
}

func TestValidKeyErrorOmitsLongKey(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("x", 4*MaxKeyLen)
	err := ValidKey(key)
	if err == nil || strings.Contains(err.Error(), key[:MaxKeyLen]) {
		t.Fatalf("ValidKey(4 KiB key) = %.200v, want an error that does not echo the key", err)
	}
}

// FuzzValidKey checks that every accepted key is a clean relative path
// that, joined to a directory, stays inside it.
func FuzzValidKey(f *testing.F) {
	for _, seed := range []string{
		"requests/r1/request.json", "../x", "a/../../b", "/abs", "a//b", "a/./b",
		`a\b`, "a\x00b", "requests/日本/x", ".tmp-x", "..", "a/..b/c..",
	} {
		f.Add(seed)
	}
	root := filepath.Join(string(filepath.Separator), "srv", "evidence")
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidKey(key)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ValidKey(%q) = %v, does not wrap ErrInvalidKey", key, err)
			}
			return
		}
		if len(key) > MaxKeyLen || !utf8.ValidString(key) {
			t.Fatalf("ValidKey accepted %q: too long or not UTF-8", key)
		}
		if path.Clean(key) != key {
			t.Fatalf("ValidKey accepted %q, which cleans to %q", key, path.Clean(key))
		}
		if !filepath.IsLocal(filepath.FromSlash(key)) {
			t.Fatalf("ValidKey accepted %q, which is not a local path", key)
		}
		joined := filepath.Join(root, filepath.FromSlash(key))
		if !strings.HasPrefix(joined, root+string(filepath.Separator)) {
			t.Fatalf("ValidKey accepted %q, which joins to %q outside %q", key, joined, root)
		}
		rel, err := filepath.Rel(root, joined)
		if err != nil || filepath.ToSlash(rel) != key {
			t.Fatalf("ValidKey accepted %q, which joins to %q (relative %q, %v)", key, joined, rel, err)
		}
	})
}
