package evidence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestWalkFoldersMatchesRootWalk: WalkInfo's walk by open folders visits
// exactly what the walk through the store's root visits, in the same
// order and with the same sizes and times, in a folder an attacker has
// salted with symbolic links (to files and folders, inside and outside),
// a FIFO, temporary files, names no key can have and empty folders.
func TestWalkFoldersMatchesRootWalk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	outside := t.TempDir()
	s := newTestFileStore(t, dir)
	for _, key := range []string{"requests/a/request.json", "requests/a/attempts/2/dispatch.json", "requests/a.b/x",
		"requests/b/manifest.json", "requests/b0/x", "log/gw/checkpoint/00000000000000000001", "top"} {
		if err := s.Put(ctx, key, []byte("data of "+key)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	salt := []func() error{
		func() error {
			return os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "requests/a/evil.json"))
		},
		func() error { return os.Symlink("request.json", filepath.Join(dir, "requests/a/inside.json")) },
		func() error { return os.Symlink(outside, filepath.Join(dir, "requests/c")) },
		func() error { return os.Symlink("a", filepath.Join(dir, "requests/d")) },
		func() error { return syscall.Mkfifo(filepath.Join(dir, "requests/b/fifo.json"), 0o600) },
		func() error {
			return os.WriteFile(filepath.Join(dir, "requests/b/"+tempPrefix+"x"), []byte("t"), 0o600)
		},
		func() error { return os.WriteFile(filepath.Join(dir, "requests/b/back\\slash"), []byte("t"), 0o600) },
		func() error { return os.MkdirAll(filepath.Join(dir, "requests/e/empty"), 0o700) },
	}
	for i, f := range salt {
		if err := f(); err != nil {
			t.Fatalf("salt %d: %v", i, err)
		}
	}
	for _, prefix := range []string{"", "requests/", "requests/a", "requests/a/", "requests/a/attempts/2/d", "requests/b",
		"requests/c/", "requests/d/", "requests/zz/", "top", "top/x", "log/", "nothing/at/all/"} {
		t.Run(fmt.Sprintf("prefix %q", prefix), func(t *testing.T) {
			t.Parallel()
			var fast, root []KeyInfo
			fastErr := s.WalkInfo(ctx, prefix, func(ki KeyInfo) error { fast = append(fast, ki); return nil })
			start := "."
			if i := lastSlash(prefix); i >= 0 {
				start = prefix[:i]
			}
			w := fileWalk{s: s, prefix: prefix, fn: func(ki KeyInfo) error { root = append(root, ki); return nil }}
			var rootErr error
			if ValidKey(start) == nil || start == "." {
				rootErr = w.dir(ctx, start)
			}
			if fmt.Sprint(fastErr) != fmt.Sprint(rootErr) {
				t.Fatalf("walk by folders: error %v; walk through the root: %v", fastErr, rootErr)
			}
			if prefix == "" && len(fast) != 7 {
				t.Fatalf("the whole store walks to %v, want the 7 keys put", keysOf(fast))
			}
			same := slices.EqualFunc(fast, root, func(a, b KeyInfo) bool {
				return a.Key == b.Key && a.Size == b.Size && a.ModTime.Equal(b.ModTime)
			})
			if !same {
				t.Fatalf("walk by folders: %v\nwalk through the root: %v", keysOf(fast), keysOf(root))
			}
		})
	}
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func keysOf(infos []KeyInfo) []string {
	var out []string
	for _, ki := range infos {
		out = append(out, fmt.Sprintf("%s:%d@%s", ki.Key, ki.Size, ki.ModTime.Format(time.RFC3339Nano)))
	}
	return out
}

// TestFolderReadsMatchGet: reading an artifact through its request's
// open folder gives what Get gives, data or error, for every kind of
// entry an attacker can leave under an artifact's name, and a FIFO, on
// which Get would block, is no artifact. A request folder opens only by
// a plain name, never through a symbolic link (a read then goes through
// Get, as before).
func TestFolderReadsMatchGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	outside := t.TempDir()
	s := newTestFileStore(t, dir)
	if err := s.Put(ctx, "requests/r/request.json", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "requests", "r")
	for i, f := range []func() error{
		func() error {
			return os.Symlink(filepath.Join(outside, "secret"), filepath.Join(folder, "outside.json"))
		},
		func() error { return os.Symlink("request.json", filepath.Join(folder, "inside.json")) },
		func() error { return os.Mkdir(filepath.Join(folder, "folder.json"), 0o700) },
		func() error { return syscall.Mkfifo(filepath.Join(folder, "fifo.json"), 0o600) },
	} {
		if err := f(); err != nil {
			t.Fatalf("salt %d: %v", i, err)
		}
	}
	folders := s.requestFolders()
	defer folders.close()
	for _, id := range []string{"absent", "..", ".", "r/x", ""} {
		if _, ok := folders.open(id); ok {
			t.Fatalf("request folder %q opened", id)
		}
	}
	if err := os.Symlink("r", filepath.Join(dir, "requests", "link")); err != nil {
		t.Fatal(err)
	}
	if _, ok := folders.open("link"); ok {
		t.Fatal("a symbolic link opened as a request's folder")
	}
	d, ok := folders.open("r")
	if !ok {
		t.Fatal("the request's folder does not open")
	}
	defer d.close()
	for _, name := range []string{"request.json", "outside.json", "inside.json", "folder.json", "absent.json"} {
		t.Run(name, func(t *testing.T) {
			key := "requests/r/" + name
			got, gotErr := d.get(ctx, key, name)
			want, wantErr := s.Get(ctx, key)
			if string(got) != string(want) || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("through the folder: %q, %v; Get: %q, %v", got, gotErr, want, wantErr)
			}
		})
	}
	if _, err := d.get(ctx, "requests/r/fifo.json", "fifo.json"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("a FIFO read through the folder: %v, want ErrNotExist", err)
	}
}
