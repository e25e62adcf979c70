package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// writeUnnamed writes data to an unnamed file in dir (O_TMPFILE), syncs
// it and links it as key, so that a Put changes its folder once instead
// of three times (a temporary name made, linked, removed). done is false,
// with nothing done, when the file system or the kernel has no unnamed
// files, or no /proc to link one through; the caller then writes a
// temporary file. The folder is opened through the store's root and the
// link made relative to it, with key's last element, which ValidKey keeps
// free of slashes: nothing outside the root can be reached.
func (s *FileStore) writeUnnamed(dir, key string, data []byte) (done bool, linkErr, err error) {
	d, err := s.root.Open(dir)
	if err != nil {
		return true, nil, err
	}
	defer d.Close()
	dirFD := int(d.Fd())
	fd, err := unix.Openat(dirFD, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, filePerm)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		return false, nil, nil
	}
	if err != nil {
		return true, nil, fmt.Errorf("open an unnamed file in %q: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), path.Join(dir, "(unnamed)"))
	defer f.Close()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return true, nil, err
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	err = unix.Linkat(unix.AT_FDCWD, proc, dirFD, path.Base(key), unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		if _, statErr := os.Stat(proc); statErr != nil {
			return false, nil, nil // no /proc: the temporary file's way
		}
	}
	if err != nil {
		return true, &os.LinkError{Op: "link", Old: "(unnamed)", New: key, Err: err}, nil
	}
	return true, nil, nil
}

// fileFolder reads the artifacts of one folder of a FileStore through one
// open handle on the folder: a read opens the file relative to it, checks
// it with one fstat and reads it with one read, four system calls where a
// Get through the store's root makes thirteen (a walk of every level of
// the key, and the runtime's poller set-up for each file).
type fileFolder struct {
	s  *FileStore
	f  *os.File
	fd int
}

// openFolder opens dir through the store's root, which refuses to leave
// it. ok is false, with nothing opened, when the folder cannot be opened
// so: the caller then reads through Get, whatever the reason.
func (s *FileStore) openFolder(dir string) (*fileFolder, bool) {
	f, err := s.root.Open(dir)
	if err != nil {
		return nil, false
	}
	return &fileFolder{s: s, f: f, fd: int(f.Fd())}, true
}

func (d *fileFolder) close() { d.f.Close() }

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
