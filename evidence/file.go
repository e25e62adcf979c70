package evidence

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/toolgate/toolgate/evidence/groupsync"
)

const (
	dirPerm  = 0o750
	filePerm = 0o640
)

// FileStore is a Store kept in a local directory, one file per key. All
// access goes through an os.Root, so no key, symbolic link or concurrent
// rename can make it read or write outside that directory.
//
// Put never exposes a partly written file: data goes to a temporary file
// that is synced and then hard-linked to its final name. Linking fails if
// the name exists, which gives create-only semantics without a window in
// which a reader could see a torn artifact. The directory must therefore
// be on a file system that supports hard links and directory fsync.
//
// Because keys map to paths, a key cannot be stored beneath another stored
// key ("a" and "a/b"); such a Put fails with an error that does not wrap
// ErrExist.
//
// Concurrent Puts share their directory syncs (package groupsync): one
// fsync of a directory covers every link made in it before the fsync
// began. And a directory is synced into its parent once, when this
// process first needs it, not on every Put below it.
type FileStore struct {
	root *os.Root
	// rootFD is the store's folder opened for resolving below it in one
	// system call where the kernel can (see openDir); -1 where it cannot.
	rootFD    int
	noOpenat2 atomic.Bool
	syncs     *groupsync.Group
	// remembers is false for a store whose directories may be removed
	// (the spool): then no directory is taken as durable from memory.
	remembers bool

	mu sync.Mutex
	// durable holds directories whose entry, and every entry above it,
	// this process has synced (or found synced); at most maxDurableDirs,
	// then it starts again, which costs one sync per directory.
	durable map[string]bool
}

// maxDurableDirs bounds FileStore.durable: three directories a request.
const maxDurableDirs = 1 << 16

var (
	_ Store      = (*FileStore)(nil)
	_ InfoWalker = (*FileStore)(nil)
)

// NewFileStore opens the store kept in dir, creating dir (mode 0750) if it
// does not exist. Close releases it.
func NewFileStore(dir string) (*FileStore, error) {
	if dir == "" {
		return nil, errors.New("evidence: file store directory is empty")
	}
	if err := mkdirAllDurable(dir); err != nil {
		return nil, fmt.Errorf("evidence: create file store directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("evidence: open file store directory: %w", err)
	}
	s := &FileStore{root: root, rootFD: openRootFD(dir), remembers: true, durable: map[string]bool{}}
	s.syncs = groupsync.New(s.syncDir)
	return s, nil
}

// mkdirAllDurable is os.MkdirAll that also syncs the parent of every
// directory it creates: Put syncs entries only up to the store's root, so
// the root's own entry must be durable before the first Put relies on it.
func mkdirAllDurable(dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break // present, or a problem MkdirAll will report
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return err
	}
	for _, d := range missing {
		parent, err := os.Open(filepath.Dir(d))
		if err != nil {
			return err
		}
		if err := syncAndClose(parent); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the directory handle. The store must not be used after.
func (s *FileStore) Close() error {
	return errors.Join(closeRootFD(s.rootFD), s.root.Close())
}

// Put stores data under key if key is not yet stored. When it returns nil,
// the file and every directory entry leading to it have been synced.
func (s *FileStore) Put(ctx context.Context, key string, data []byte) error {
	if err := checkPut(ctx, key, data); err != nil {
		return err
	}
	dir := path.Dir(key)
	parents, err := s.makeDirs(dir)
	if err != nil {
		return fmt.Errorf("evidence: put %q: %w", key, err)
	}
	// The folders made for this key are synced into their parents while
	// the file is written and synced: neither waits for the other.
	chain := s.chainOf(ctx)
	syncCtx := ctx
	if chain != nil {
		// The folders' syncs may outlive this call (see Chain), and those
		// the chain's last write syncs are durable before this link.
		syncCtx = context.WithoutCancel(ctx)
		parents = chain.uncovered(parents)
	}
	parentsSynced := s.startSyncs(syncCtx, parents)
	body := encodeBody(data, 0)
	// A chained write's name is taken only once the chain's last write
	// is durable.
	beforeLink := func() error { return chain.Wait(ctx) }
	linkErr, rmErr, err := s.writeAndLink(dir, key, body, beforeLink)
	if isNotExist(err) && s.isDurable(dir) {
		// A directory remembered as durable is gone (removed behind the
		// store's back): make it again, and sync it, this time.
		s.forget()
		if parents, err = s.makeDirs(dir); err == nil {
			_ = parentsSynced() // nothing made before; superseded below
			parentsSynced = s.startSyncs(syncCtx, parents)
			linkErr, rmErr, err = s.writeAndLink(dir, key, body, beforeLink)
		}
	}
	if err != nil {
		return fmt.Errorf("evidence: put %q: %w", key, errors.Join(err, parentsSynced()))
	}
	exists := false
	switch {
	case linkErr == nil:
	case errors.Is(linkErr, fs.ErrExist):
		fi, err := s.root.Lstat(key)
		if err != nil {
			return fmt.Errorf("evidence: put %q: %w", key, errors.Join(linkErr, err, rmErr))
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("evidence: put %q: the name is taken by a directory or special file: %w", key, errors.Join(linkErr, rmErr))
		}
		exists = true
	default:
		return fmt.Errorf("evidence: put %q: %w", key, errors.Join(linkErr, rmErr))
	}
	if chain != nil && !exists {
		dirSynced := s.startSyncs(syncCtx, []string{dir})
		chain.pend(key, data, append(parents, dir), func() error {
			err := errors.Join(dirSynced(), parentsSynced())
			if err == nil {
				s.remember(dir)
			}
			return err
		})
		return nil
	}
	// Synced on ErrExist too: a caller told the key exists must be able to
	// rely on the winner's entry surviving a crash.
	if err := errors.Join(s.syncs.Sync(ctx, dir), parentsSynced()); err != nil {
		return fmt.Errorf("evidence: put %q: %w", key, err)
	}
	s.remember(dir)
	if exists {
		return fmt.Errorf("%w: %q", ErrExist, key)
	}
	return nil
}

// makeDirs makes dir and its parents as needed and returns the
// directories to sync so that every entry leading to dir is durable: the
// parent of each level made here, or made by a concurrent Put whose sync
// may not have run yet. A dir remembered as durable needs nothing.
func (s *FileStore) makeDirs(dir string) ([]string, error) {
	if dir == "." || s.isDurable(dir) {
		return nil, nil
	}
	var parents []string
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		level := dir[:i]
		if s.isDurable(level) {
			continue // made and synced: only what lies below it is new
		}
		err := s.mkdir(level)
		if isNotExist(err) && path.Dir(level) != "." && s.isDurable(path.Dir(level)) {
			// A folder remembered as durable is gone (removed behind the
			// store's back): make every level again, and sync it.
			s.forget()
			return s.makeDirs(dir)
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		// Made here, or found but not known to be synced into its parent.
		if parent := path.Dir(level); !slices.Contains(parents, parent) {
			parents = append(parents, parent)
		}
	}
	return parents, nil
}

// startSyncs starts syncing dirs, concurrently and each through the
// group syncer, and returns the function that waits until all are synced
// or ctx ends.
func (s *FileStore) startSyncs(ctx context.Context, dirs []string) func() error {
	if len(dirs) == 0 {
		return func() error { return nil }
	}
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Go(func() { errs[i] = s.syncs.Sync(ctx, d) })
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// chainOf returns the chain ctx carries, if this store chains writes:
// the spool never does, since what it is given must be durable before Put
// returns.
func (s *FileStore) chainOf(ctx context.Context) *Chain {
	if !s.remembers {
		return nil
	}
	return chainOf(ctx)
}

func (s *FileStore) isDurable(dir string) bool {
	if !s.remembers {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.durable[dir]
}

// remember records dir and every level above it as durable.
func (s *FileStore) remember(dir string) {
	if !s.remembers || dir == "." {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.durable) >= maxDurableDirs {
		clear(s.durable)
	}
	for d := dir; d != "." && !s.durable[d]; d = path.Dir(d) {
		s.durable[d] = true
	}
}

// forget drops every directory remembered as durable.
func (s *FileStore) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.durable)
}

// writeAndLink writes data to a new, synced file in dir and links it as
// key: an unnamed file where the system has them (one directory entry
// made, none removed), a temporary file otherwise. err is a failure before
// the link, linkErr the link's, rmErr the temporary file's removal.
//
// The spool (remembers false) always writes a named temporary file: it
// removes folders it has emptied, and a named file keeps its folder from
// being removed between the write and the link, which an unnamed one
// does not.
func (s *FileStore) writeAndLink(dir, key string, data []byte, beforeLink func() error) (linkErr, rmErr, err error) {
	if s.remembers {
		if done, linkErr, err := s.writeUnnamed(dir, key, data, beforeLink); done {
			return linkErr, nil, err
		}
	}
	tmp, err := s.writeTemp(dir, data)
	if err != nil {
		return nil, nil, err
	}
	if err := beforeLink(); err != nil {
		return nil, nil, errors.Join(err, s.root.Remove(tmp))
	}
	linkErr = s.root.Link(tmp, key)
	// Once the link exists, or is known to exist, a failure to remove the
	// temporary file is dropped: the key's state is settled, and a stray
	// temporary file is invisible to Get and List. Reporting it would tell
	// the caller the key is free when it is not.
	return linkErr, s.root.Remove(tmp), nil
}

// writeTemp writes data to a new, synced temporary file in dir and returns
// its name.
func (s *FileStore) writeTemp(dir string, data []byte) (string, error) {
	name := path.Join(dir, tempPrefix+rand.Text())
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return "", errors.Join(err, s.root.Remove(name))
	}
	return name, nil
}

// syncAndClose syncs and closes an open directory.
func syncAndClose(dir *os.File) error {
	err := dir.Sync()
	if closeErr := dir.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("sync directory %q: %w", dir.Name(), err)
	}
	return nil
}

// Get returns the data stored under key.
func (s *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	f, err := s.root.Open(key)
	if isNotExist(err) {
		return nil, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	if err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		// A directory holding other keys is not itself an artifact.
		return nil, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	if fi.Size() > MaxArtifactSize {
		return nil, fmt.Errorf("evidence: get %q: %w", key, errTooLarge)
	}
	// Artifacts are immutable once linked, so the size read above holds.
	body := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, body); err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	data, err := decodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	return data, nil
}

// List returns the keys that start with prefix, sorted. The prefix need
// not end at a segment boundary: "requests/r" matches "requests/r1/x" and
// "requests/r2/x". A prefix that no valid key can start with yields no keys.
func (s *FileStore) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := s.Walk(ctx, prefix, func(key string) error {
		keys = append(keys, key)
		return nil
	})
	return keys, err
}

// Walk calls fn with each key that starts with prefix, in ascending byte
// order. It holds one directory listing per level of the walk, so memory
// grows with the widest directory rather than with the store.
func (s *FileStore) Walk(ctx context.Context, prefix string, fn func(key string) error) error {
	return s.WalkInfo(ctx, prefix, func(ki KeyInfo) error { return fn(ki.Key) })
}

// WalkInfo is Walk with each key's file size and modification time. The
// time is when Put wrote the file, by this machine's clock; the size is
// the file's, which for a compressed artifact is less than Get returns.
// Like Walk, it lists each directory as it stood when the walk reached it,
// and it costs no more than Walk: reading a directory through an os.Root
// stats every entry anyway.
func (s *FileStore) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("evidence: walk %q: %w", prefix, err)
	}
	// Walk only the deepest directory that the prefix names in full.
	start := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
		if ValidKey(start) != nil {
			return nil
		}
	}
	if done, err := s.walkFolders(ctx, start, prefix, fn); done {
		return err
	}
	w := fileWalk{s: s, prefix: prefix, fn: fn}
	return w.dir(ctx, start)
}

// fileWalk is one walk of a FileStore.
type fileWalk struct {
	s      *FileStore
	prefix string
	fn     func(KeyInfo) error
}

// dir visits dir's entries in the order of the keys below them. Every key
// below a directory d starts with "d/", so a directory sorts as its name
// plus a slash: "a.b" comes before the keys of directory "a".
func (w *fileWalk) dir(ctx context.Context, dir string) error {
	entries, err := fs.ReadDir(w.s.root.FS(), dir)
	if err != nil {
		if isNotExist(err) {
			// The prefix names a directory that does not exist: no keys.
			return nil
		}
		return fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
	}
	sortName := func(e fs.DirEntry) string {
		if e.IsDir() {
			return e.Name() + "/"
		}
		return e.Name()
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(sortName(a), sortName(b)) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
		}
		p := e.Name()
		if dir != "." {
			p = dir + "/" + p
		}
		if e.IsDir() {
			if strings.HasPrefix(p+"/", w.prefix) || strings.HasPrefix(w.prefix, p+"/") {
				if err := w.dir(ctx, p); err != nil {
					return err
				}
			}
			continue
		}
		// Temporary files fail ValidKey; anything else that does (or that
		// is not a regular file) was not written by Put.
		if !e.Type().IsRegular() || !strings.HasPrefix(p, w.prefix) || ValidKey(p) != nil {
			continue
		}
		if err := w.visit(e, p); err != nil {
			return err
		}
	}
	return nil
}

// visit passes the key p, found as entry e, to the walk's fn.
func (w *fileWalk) visit(e fs.DirEntry, p string) error {
	// Entries read through an os.Root carry the lstat made while reading
	// the directory, so this asks the file system nothing more.
	fi, err := e.Info()
	if err != nil {
		return fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
	}
	return w.fn(KeyInfo{Key: p, Size: fi.Size(), ModTime: fi.ModTime()})
}

// isNotExist reports whether err means a path is absent, including the
// case where one of its parents is a file.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
