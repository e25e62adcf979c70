package evidence

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// beneath is how the store resolves a folder below its root in one
// openat2 call: the kernel keeps the walk inside the root and refuses
// every symbolic link on the way, where the os.Root walks the path one
// openat a level. A path the kernel refuses (a planted link, a name taken
// by a file) is walked by the os.Root all the same, so that what the store
// does with such a path, and the errors it reports, stay the root's.
var beneath = unix.OpenHow{
	Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
}

// openRootFD opens the store's folder for openat2 to resolve below; -1
// when it cannot, and the os.Root does all the walking.
func openRootFD(dir string) int {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

func closeRootFD(fd int) error {
	if fd < 0 {
		return nil
	}
	return unix.Close(fd)
}

// openDir opens dir, a folder below the store's root, and returns its
// descriptor, which the caller closes.
func (s *FileStore) openDir(dir string) (int, error) {
	if s.rootFD >= 0 && !s.noOpenat2.Load() {
		fd, err := unix.Openat2(s.rootFD, dir, &beneath)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOENT):
			return -1, &os.PathError{Op: "openat2", Path: dir, Err: err}
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
			// No openat2 here (an old kernel, a seccomp filter): stop asking.
			s.noOpenat2.Store(true)
		}
	}
	f, err := s.root.Open(dir)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return -1, &os.PathError{Op: "dup", Path: dir, Err: err}
	}
	return fd, nil
}

// mkdir makes the folder name below the store's root: in the folder
// openDir resolves, where it can, else through the os.Root.
func (s *FileStore) mkdir(name string) error {
	parent, base := path.Split(name)
	if parent == "" {
		return s.root.Mkdir(name, dirPerm)
	}
	fd, err := s.openDir(path.Clean(parent))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Mkdirat(fd, base, dirPerm); err != nil {
		return &os.PathError{Op: "mkdirat", Path: name, Err: err}
	}
	return nil
}

func (s *FileStore) syncDir(dir string) error {
	fd, err := s.openDir(dir)
	if err != nil {
		return err
	}
	err = unix.Fsync(fd)
	if closeErr := unix.Close(fd); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("sync directory %q: %w", dir, err)
	}
	return nil
}

// writeUnnamed writes data to an unnamed file in dir (O_TMPFILE), syncs
// it and links it as key, so that a Put changes its folder once instead
// of three times (a temporary name made, linked, removed). done is false,
// with nothing done, when the file system or the kernel has no unnamed
// files, or no /proc to link one through; the caller then writes a
// temporary file. The link is made relative to the folder openDir
// resolved, with key's last element, which ValidKey keeps free of
// slashes: nothing outside the root can be reached. It works on raw
// descriptors: an os.File would register each with the runtime's poller,
// which a regular file never uses.
func (s *FileStore) writeUnnamed(dir, key string, data []byte, beforeLink func() error) (done bool, linkErr, err error) {
	dirFD, err := s.openDir(dir)
	if err != nil {
		return true, nil, err
	}
	defer unix.Close(dirFD)
	fd, err := unix.Openat(dirFD, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, filePerm)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		return false, nil, nil
	}
	if err != nil {
		return true, nil, fmt.Errorf("open an unnamed file in %q: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := writeAllSync(fd, data); err != nil {
		return true, nil, fmt.Errorf("write an unnamed file in %q: %w", dir, err)
	}
	if err := beforeLink(); err != nil {
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

// writeAllSync writes data to fd, whole, and syncs it.
func writeAllSync(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("short write")
		}
		data = data[n:]
	}
	for {
		err := unix.Fsync(fd)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
