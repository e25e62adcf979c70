package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// fileFolder reads the artifacts of one folder of a FileStore through one
// open handle on the folder: a read opens the file relative to it, checks
// it with one fstat and reads it with one read, four system calls where a
// Get through the store's root makes thirteen (a walk of every level of
// the key, and the runtime's poller set-up for each file).
type fileFolder struct {
	s  *FileStore
	fd int
}

func (d *fileFolder) close() { unix.Close(d.fd) }

// storeFolders opens the folders of a FileStore's requests, for one
// verification: the "requests" folder is opened through the root once,
// when first needed, and each request's folder by name relative to it,
// one system call instead of a walk of the path through the root. It is
// safe for concurrent use; close releases the "requests" folder.
type storeFolders struct {
	s    *FileStore
	once sync.Once
	f    *os.File // nil when "requests" did not open
	fd   int
}

func (s *FileStore) requestFolders() *storeFolders { return &storeFolders{s: s} }

// open opens request id's folder. ok is false, with nothing opened, when
// it cannot be opened so (gone, not a folder, a symbolic link the root
// would follow): the caller then reads through Get.
func (sf *storeFolders) open(id string) (*fileFolder, bool) {
	sf.once.Do(func() {
		if f, err := sf.s.root.Open(strings.TrimSuffix(requestsRoot, "/")); err == nil {
			sf.f, sf.fd = f, int(f.Fd())
		}
	})
	if sf.f == nil || id == "" || id == "." || id == ".." || strings.Contains(id, "/") {
		return nil, false
	}
	for {
		fd, err := unix.Openat(sf.fd, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, false
		}
		return &fileFolder{s: sf.s, fd: fd}, true
	}
}

func (sf *storeFolders) close() {
	sf.once.Do(func() {}) // no folder opens after close
	if sf.f != nil {
		sf.f.Close()
	}
}

// get returns the artifact key, whose last element, name, lies directly in
// the folder, as Get returns it. The name comes from a key ValidKey
// accepts, so it holds no slash, and it is opened without following a
// symbolic link and without blocking (a FIFO planted in its place is not
// a regular file, and not an artifact). Anything but a regular file or an
// absent name (a symbolic link the root would follow, a permission
// denied) is left to Get, so that what is read, and every error, is what
// Get gives.
func (d *fileFolder) get(ctx context.Context, key, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	fd, err := openatRetry(d.fd, name)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	if err != nil {
		return d.s.Get(ctx, key)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return d.s.Get(ctx, key)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	if st.Size > MaxArtifactSize {
		return nil, fmt.Errorf("evidence: get %q: %w", key, errTooLarge)
	}
	// Artifacts are immutable once linked, so the size read above holds.
	body := make([]byte, st.Size)
	for n := 0; n < len(body); {
		m, err := unix.Read(fd, body[n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, fmt.Errorf("evidence: get %q: %w", key, &os.PathError{Op: "read", Path: key, Err: err})
		case m == 0:
			return nil, fmt.Errorf("evidence: get %q: %w", key, io.ErrUnexpectedEOF)
		}
		n += m
	}
	data, err := decodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	return data, nil
}

// openatRetry opens name in the folder dirFD for reading, retrying when a
// signal interrupts it.
func openatRetry(dirFD int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// walkFolders is WalkInfo's walk of the folder start, which it opens
// through the store's root; each folder below is opened relative to its
// parent's handle, by name and without following a symbolic link, and
// each entry is checked with one fstatat relative to its folder. Reading
// a folder through the root re-walks every level of its path and sets up
// the runtime's poller for it, twice the system calls of the listing
// itself. It visits what WalkInfo's generic walk visits, in the same
// order, with the same sizes and times (both come from the same lstat),
// and a folder that vanishes, or turns into something else, while it is
// walked has no keys, as one absent when the walk reached it has none.
func (s *FileStore) walkFolders(ctx context.Context, start, prefix string, fn func(KeyInfo) error) (bool, error) {
	f, err := s.root.Open(start)
	if isNotExist(err) {
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("evidence: walk %q: %w", prefix, err)
	}
	w := folderWalk{prefix: prefix, fn: fn}
	return true, w.dir(ctx, f, start)
}

// folderWalk is one walkFolders.
type folderWalk struct {
	prefix string
	fn     func(KeyInfo) error
}

// folderEntry is one entry of a folder, as its lstat describes it.
type folderEntry struct {
	name         string
	dir, regular bool
	size         int64
	sec, nsec    int64
	sortName     string
}

// dir visits the entries of folder f, named dir, and closes it.
func (w *folderWalk) dir(ctx context.Context, f *os.File, dir string) error {
	defer f.Close()
	entries, err := w.list(f, dir)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
		}
		p := e.name
		if dir != "." {
			p = dir + "/" + p
		}
		if e.dir {
			if !strings.HasPrefix(p+"/", w.prefix) && !strings.HasPrefix(w.prefix, p+"/") {
				continue
			}
			child, err := openFolderAt(fd, e.name, p)
			if err != nil {
				return fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
			}
			if child == nil {
				continue // gone, or no longer a folder
			}
			if err := w.dir(ctx, child, p); err != nil {
				return err
			}
			continue
		}
		// Temporary files fail ValidKey; anything else that does (or that
		// is not a regular file) was not written by Put.
		if !e.regular || !strings.HasPrefix(p, w.prefix) || ValidKey(p) != nil {
			continue
		}
		if err := w.fn(KeyInfo{Key: p, Size: e.size, ModTime: time.Unix(e.sec, e.nsec)}); err != nil {
			return err
		}
	}
	return nil
}

// list reads folder f's entries, each with its lstat, in the order of the
// keys below them (see fileWalk.dir). An entry removed before its lstat is
// left out, as os.File.ReadDir leaves it out.
func (w *folderWalk) list(f *os.File, dir string) ([]folderEntry, error) {
	names, err := f.Readdirnames(-1)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("evidence: walk %q: %w", w.prefix, err)
	}
	fd := int(f.Fd())
	entries := make([]folderEntry, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		err := fstatatRetry(fd, name, &st)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("evidence: walk %q: %w", w.prefix, &os.PathError{Op: "lstatat", Path: path.Join(dir, name), Err: err})
		}
		e := folderEntry{name: name, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR, regular: st.Mode&unix.S_IFMT == unix.S_IFREG,
			size: st.Size, sec: st.Mtim.Sec, nsec: st.Mtim.Nsec, sortName: name}
		if e.dir {
			e.sortName = name + "/"
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b folderEntry) int { return strings.Compare(a.sortName, b.sortName) })
	return entries, nil
}

// openFolderAt opens the folder name in the folder dirFD without
// following a symbolic link; nil, and no error, when name is gone or no
// longer a folder.
func openFolderAt(dirFD int, name, p string) (*os.File, error) {
	for {
		fd, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			return nil, nil
		case err != nil:
			return nil, &os.PathError{Op: "openat", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	}
}

// fstatatRetry is lstat of name in the folder dirFD, retried when a
// signal interrupts it.
func fstatatRetry(dirFD int, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(dirFD, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
