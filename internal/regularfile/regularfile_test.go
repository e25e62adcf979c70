package regularfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadRefusesWhatWouldHangOrFlood: only a regular file within the
// bound is read; a named pipe without a writer is refused at once rather
// than waited on, and a device or folder is refused unread.
func TestReadRefusesWhatWouldHangOrFlood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok"), []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "pipe"), filepath.Join(dir, "link-to-pipe")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		limit      int64
		wantErr    string
	}{
		{"a regular file within the bound is read", filepath.Join(dir, "ok"), 10, ""},
		{"a regular file over the bound is refused", filepath.Join(dir, "ok"), 9, "more than the 9"},
		{"a named pipe is refused without blocking", filepath.Join(dir, "pipe"), 10, "is a named pipe"},
		{"a link to a named pipe is refused too", filepath.Join(dir, "link-to-pipe"), 10, "is a named pipe"},
		{"a device is refused unread", "/dev/zero", 1 << 20, "is a device"},
		{"a folder is refused", dir, 10, "is a folder"},
		{"a missing file is an error", filepath.Join(dir, "missing"), 10, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, read := range []struct {
				how string
				fn  func() ([]byte, error)
			}{
				{"Read", func() ([]byte, error) { return Read(tc.path, tc.limit) }},
				{"ReadFS", func() ([]byte, error) {
					return ReadFS(os.DirFS(filepath.Dir(tc.path)), filepath.Base(tc.path), tc.limit)
				}},
			} {
				data, err := read.fn()
				switch {
				case tc.wantErr == "" && (err != nil || string(data) != "0123456789"):
					t.Errorf("%s: %q, %v", read.how, data, err)
				case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
					t.Errorf("%s: %v, want an error saying %q", read.how, err, tc.wantErr)
				}
			}
		})
	}
}
