package evidence

import (
	"errors"
	"fmt"
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
