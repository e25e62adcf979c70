package evidence

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/evidence/groupsync"
)

// tempFiles returns the in-flight files Put left under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), tempPrefix) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return found
}

func TestNewFileStoreCreatesDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	newTestFileStore(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&^dirPerm != 0 {
		t.Fatalf("store directory mode = %v, want a directory within %o", fi.Mode(), dirPerm)
	}
}

func TestNewFileStoreErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"", file} {
		if s, err := NewFileStore(dir); err == nil {
			s.Close()
			t.Errorf("NewFileStore(%q) = nil error, want failure", dir)
		}
	}
}

func TestFileStoreDurableAcrossReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "requests/r1/request.json", []byte("payload"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}

	s2 := newTestFileStore(t, dir)
	if got := mustGet(t, s2, "requests/r1/request.json"); string(got) != "payload" {
		t.Fatalf("Get after reopen = %q, want %q", got, "payload")
	}
	if err := s2.Put(ctx, "requests/r1/request.json", []byte("again")); !errors.Is(err, ErrExist) {
		t.Fatalf("Put after reopen = %v, want ErrExist", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "requests", "r1", "request.json"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&^filePerm != 0 {
		t.Fatalf("artifact mode = %o, want no bits beyond %o", perm, filePerm)
	}
}

func TestFileStoreLeavesNoTempFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	mustPut(t, s, "requests/r1/request.json", []byte("one"))
	if err := s.Put(context.Background(), "requests/r1/request.json", []byte("two")); !errors.Is(err, ErrExist) {
		t.Fatalf("second Put = %v, want ErrExist", err)
	}
	if err := s.Put(context.Background(), "requests/r1/request.json/x", []byte("three")); err == nil {
		t.Fatal("Put below an artifact succeeded")
	}
	if found := tempFiles(t, dir); len(found) != 0 {
		t.Fatalf("temporary files left behind: %q", found)
	}
}

func TestFileStoreKeyConflictsWithDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newTestFileStore(t, t.TempDir())
	mustPut(t, s, "a/b", []byte("x"))
	for _, key := range []string{"a", "a/b/c"} {
		err := s.Put(ctx, key, []byte("y"))
		if err == nil || errors.Is(err, ErrExist) {
			t.Errorf("Put(%q) = %v, want a failure that is not ErrExist", key, err)
		}
	}
	if got := mustList(t, s, ""); !slices.Equal(got, []string{"a/b"}) {
		t.Fatalf("List = %q, want only a/b", got)
	}
}

func TestFileStoreListSkipsForeignEntries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	mustPut(t, s, "requests/r1/request.json", []byte("x"))
	r1 := filepath.Join(dir, "requests", "r1")
	// An interrupted Put, a symbolic link and a file no key can name.
	for name, data := range map[string]string{tempPrefix + "ABC": "partial", "bad\x01name": "x"} {
		if err := os.WriteFile(filepath.Join(r1, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("request.json", filepath.Join(r1, "link.json")); err != nil {
		t.Fatal(err)
	}
	if got, want := mustList(t, s, "requests/r1/"), []string{"requests/r1/request.json"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
}

func TestFileStoreStaysInsideDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newTestFileStore(t, dir)
	// A link planted inside the store that points out of it.
	if err := os.Symlink(outside, filepath.Join(dir, "requests")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "requests/r1/request.json", []byte("x")); err == nil {
		t.Error("Put through an escaping link succeeded")
	}
	if _, err := s.Get(ctx, "requests/secret"); err == nil {
		t.Error("Get through an escaping link succeeded")
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("outside directory now holds %d entries, want only the original file", len(entries))
	}
}

// TestFileStoreUnwritableDirectory checks that a store Put cannot write to
// reports the failure instead of claiming the key exists or succeeding.
func TestFileStoreUnwritableDirectory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	// Permission bits do not stop root; when they don't, block the write by
	// putting a file where Put needs a directory.
	probe := filepath.Join(dir, "probe")
	if err := os.WriteFile(probe, nil, 0o600); err == nil {
		t.Log("directory is still writable (running as root); blocking requests/ with a file instead")
		if err := os.Rename(probe, filepath.Join(dir, "requests")); err != nil {
			t.Fatal(err)
		}
	}

	err := s.Put(ctx, "requests/r1/request.json", []byte("x"))
	if err == nil || errors.Is(err, ErrExist) {
		t.Fatalf("Put = %v, want a failure that is not ErrExist", err)
	}
	if _, err := s.Get(ctx, "requests/r1/request.json"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Get after failed Put = %v, want ErrNotExist", err)
	}
	if found := tempFiles(t, dir); len(found) != 0 {
		t.Fatalf("temporary files left behind: %q", found)
	}
}

// TestFileStoreCompressesLargeArtifacts: a large artifact is gzip on disk,
// readable with ordinary tools, and Get returns the original bytes.
func TestFileStoreCompressesLargeArtifacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	large := []byte(`{"stdout":"` + strings.Repeat("log line\n", 30000) + `"}`)
	small := []byte(`{"ok":true}`)
	mustPut(t, s, "requests/r1/tool_result.json", large)
	mustPut(t, s, "requests/r1/response.json", small)

	onDisk, err := os.ReadFile(filepath.Join(dir, "requests", "r1", "tool_result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !isGzip(onDisk) || len(onDisk) >= len(large)/4 {
		t.Fatalf("large artifact on disk: %d bytes, gzip %v; want it compressed", len(onDisk), isGzip(onDisk))
	}
	if got := mustGet(t, s, "requests/r1/tool_result.json"); !bytes.Equal(got, large) {
		t.Fatal("Get did not return the original bytes of a compressed artifact")
	}
	if got := mustGet(t, s, "requests/r1/response.json"); !bytes.Equal(got, small) {
		t.Fatal("small artifact changed")
	}
	// An auditor reads both with zcat -f, which passes plain files through.
	for name, want := range map[string][]byte{"tool_result.json": large, "response.json": small} {
		out, err := exec.Command("zcat", "-f", filepath.Join(dir, "requests", "r1", name)).Output()
		if err != nil || !bytes.Equal(out, want) {
			t.Errorf("zcat -f %s: %v, %d bytes; want the artifact", name, err, len(out))
		}
	}
}

// countingSyncs makes s record the directories it syncs.
func countingSyncs(s *FileStore) func() []string {
	var mu sync.Mutex
	var synced []string
	s.syncs = groupsync.New(func(dir string) error {
		mu.Lock()
		synced = append(synced, dir)
		mu.Unlock()
		return s.syncDir(dir)
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(synced)
		synced = nil
		slices.Sort(out)
		return out
	}
}

// TestFileStoreSyncsEachEntryOnce checks which directories a Put syncs:
// the parent of every folder it makes, and the folder it links into, but
// not, again, a folder whose entry this process has already synced.
func TestFileStoreSyncsEachEntryOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	synced := countingSyncs(s)
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{"requests/r1/request.json", []string{".", "requests", "requests/r1"}},
		{"requests/r1/attempts/1/policy_decision.json", []string{"requests/r1", "requests/r1/attempts", "requests/r1/attempts/1"}},
		{"requests/r1/attempts/1/dispatch.json", []string{"requests/r1/attempts/1"}},
		{"requests/r1/response.json", []string{"requests/r1"}},
		{"requests/r2/request.json", []string{"requests", "requests/r2"}},
		{"top.json", []string{"."}},
	} {
		if err := s.Put(ctx, tc.key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if got := synced(); !slices.Equal(got, tc.want) {
			t.Errorf("Put %s synced %v, want %v", tc.key, got, tc.want)
		}
	}
	// Told it exists, a caller still gets the winner's entry synced.
	if err := s.Put(ctx, "requests/r1/response.json", []byte(`{}`)); !errors.Is(err, ErrExist) {
		t.Fatalf("second Put: %v", err)
	}
	if got := synced(); !slices.Equal(got, []string{"requests/r1"}) {
		t.Errorf("a Put told ErrExist synced %v", got)
	}
}

// TestFileStoreFolderRemovedBehindItsBack checks that a folder removed
// after the store synced it is made, and synced, again.
func TestFileStoreFolderRemovedBehindItsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, "requests/r1/a.json", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "requests")); err != nil {
		t.Fatal(err)
	}
	synced := countingSyncs(s)
	if err := s.Put(ctx, "requests/r1/b.json", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := synced(); !slices.Equal(got, []string{".", "requests", "requests/r1"}) {
		t.Errorf("synced %v, want every entry made again", got)
	}
	if got, err := s.Get(ctx, "requests/r1/b.json"); err != nil || string(got) != `{}` {
		t.Errorf("Get = %q, %v", got, err)
	}
}

// TestSpoolSyncsEveryLevel checks that the spool, which removes folders,
// never takes one as durable from memory.
func TestSpoolSyncsEveryLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sp, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	synced := countingSyncs(sp.files)
	for _, key := range []string{"requests/r1/a.json", "requests/r1/b.json"} {
		if err := sp.Put(ctx, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if got := synced(); !slices.Equal(got, []string{".", "requests", "requests/r1"}) {
			t.Errorf("Put %s synced %v", key, got)
		}
	}
}
