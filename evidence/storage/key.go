package storage

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that ValidKey accepts.
const MaxKeyLen = 1024

// ErrInvalidKey is returned (wrapped) for a key that ValidKey rejects.
var ErrInvalidKey = errors.New("evidence: invalid key")

// TempPrefix starts the name of every file the file store
// (evidence.FileStore) writes before it is linked into place. ValidKey
// reserves it so that a key can never collide with, or be hidden from
// List as, an in-flight write.
const TempPrefix = ".tmp-"

// ValidKey reports whether key may name an artifact. A key is a non-empty
// slash-separated relative path of at most MaxKeyLen bytes of valid UTF-8,
// with no leading or trailing slash, no empty, "." or ".." segment, no
// backslash and no control character. Segments starting with ".tmp-" are
// reserved for the file store's in-flight writes.
//
// The rules make every valid key a clean, local path on any backend, so a
// key can never address anything outside the store.
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		// The key itself is left out: it is long and possibly hostile.
		return fmt.Errorf("%w: key is %d bytes, longer than the %d-byte limit", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		switch {
		case r == '\\':
			return fmt.Errorf("%w %q: contains a backslash", ErrInvalidKey, key)
		case unicode.IsControl(r):
			return fmt.Errorf("%w %q: contains control character %U", ErrInvalidKey, key, r)
		}
	}
	if key[0] == '/' {
		return fmt.Errorf("%w %q: starts with '/'", ErrInvalidKey, key)
	}
	if key[len(key)-1] == '/' {
		return fmt.Errorf("%w %q: ends with '/'", ErrInvalidKey, key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w %q: has an empty segment", ErrInvalidKey, key)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w %q: has a %q segment", ErrInvalidKey, key, seg)
		case strings.HasPrefix(seg, TempPrefix):
			return fmt.Errorf("%w %q: segment %q uses the reserved prefix %q", ErrInvalidKey, key, seg, TempPrefix)
		}
	}
	return nil
}
