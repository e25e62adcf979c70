package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// File operations never traverse a symbolic link. Policy decides on the
// canonical path as written; if a folder on that path were a link, the
// operation would act on whatever the link names instead, a path policy
// never saw. So every folder on the way is opened relative to its parent
// with O_NOFOLLOW, and the operation then acts on the last element through
// the folder it holds open (openat, renameat, linkat, unlinkat, fstatat
// with AT_SYMLINK_NOFOLLOW). A link on the path, including one swapped in
// after the decision, makes the call fail; it can never redirect it. The
// walk starts at the workspace folder, and canonical paths have no ".."
// elements, so it never leaves the workspace either.

// errSymlink is wrapped by the failure of an operation whose path goes
// through, or ends in, a symbolic link.
var errSymlink = errors.New("is a symbolic link; file operations do not follow links")

// place is where a file operation acts: the folder that holds the file,
// opened without following links, and the file's name in it.
type place struct {
	dirFD int
	path  string // the canonical workspace path, for messages
	base  string
}

// locate opens the folder of the canonical file path p. With create,
// missing folders are made (mode dirMode) on the way.
func (d *Driver) locate(p string, create bool) (*place, error) {
	dir, base := path.Split(p)
	fd, err := d.openDir(strings.TrimSuffix(dir, "/"), create)
	if err != nil {
		return nil, err
	}
	return &place{dirFD: fd, path: p, base: base}, nil
}

// close releases the folder.
func (pl *place) close() { unix.Close(pl.dirFD) }

// openDir opens the workspace folder rel ("" for the root) one element at
// a time, refusing symbolic links, and returns its descriptor.
func (d *Driver) openDir(rel string, create bool) (int, error) {
	rc, err := d.rootDir.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("workspace root: %w", os.ErrClosed)
	}
	fd, walkErr := -1, error(nil)
	ctlErr := rc.Control(func(root uintptr) {
		fd, walkErr = walkDirs(int(root), rel, create)
	})
	if ctlErr != nil {
		return -1, fmt.Errorf("workspace root: %w", os.ErrClosed)
	}
	return fd, walkErr
}

func walkDirs(root int, rel string, create bool) (int, error) {
	cur, err := unix.Openat(root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: ".", Err: err}
	}
	if rel == "" {
		return cur, nil
	}
	walked := 0
	for elem := range strings.SplitSeq(rel, "/") {
		walked += len(elem) + 1
		next, err := openDirAt(cur, elem, create)
		if err != nil {
			err = describe(cur, elem, rel[:walked-1], "open", err)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// openDirAt opens the folder name in parent without following a link,
// making it first when create is set and it is missing.
func openDirAt(parent int, name string, create bool) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	for {
		fd, err := unix.Openat(parent, name, flags, 0)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.EINTR:
			continue
		case err == unix.ENOENT && create:
			if err := unix.Mkdirat(parent, name, uint32(dirMode)); err != nil && err != unix.EEXIST {
				return -1, err
			}
			create = false // one attempt; losing a race with a removal is an error
			continue
		}
		return -1, err
	}
}

// describe turns a failed system call on name in parent into an error that
// names the workspace path shown and says plainly when a link was in the
// way (O_NOFOLLOW reports ELOOP, or ENOTDIR when a folder was expected).
func describe(parent int, name, shown, op string, err error) error {
	if err == unix.ELOOP || err == unix.ENOTDIR || err == unix.EMLINK {
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s %w", shown, errSymlink)
		}
	}
	return &fs.PathError{Op: op, Path: shown, Err: err}
}

// lstat returns the mode and size of the file itself (a link is reported
// as a link).
func (pl *place) lstat() (fs.FileMode, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pl.dirFD, pl.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, 0, &fs.PathError{Op: "lstat", Path: pl.path, Err: err}
	}
	return statMode(uint32(st.Mode)), st.Size, nil
}

// statMode converts st_mode into an fs.FileMode.
func statMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

// open opens the entry name of the folder, never through a link.
func (pl *place) open(name string, flags int, perm fs.FileMode) (*os.File, error) {
	shown := path.Join(path.Dir(pl.path), name)
	for {
		fd, err := unix.Openat(pl.dirFD, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, describe(pl.dirFD, name, shown, "open", err)
		}
		return os.NewFile(uintptr(fd), shown), nil
	}
}

// remove unlinks the entry name of the folder (a link itself, never what
// it names).
func (pl *place) remove(name string) error {
	if err := unix.Unlinkat(pl.dirFD, name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: path.Join(path.Dir(pl.path), name), Err: err}
	}
	return nil
}

// rename moves the entry from onto the file, replacing it.
func (pl *place) rename(from string) error {
	if err := unix.Renameat(pl.dirFD, from, pl.dirFD, pl.base); err != nil {
		return &fs.PathError{Op: "rename", Path: pl.path, Err: err}
	}
	return nil
}

// link gives the entry from the file's name; it fails if the name exists.
func (pl *place) link(from string) error {
	if err := unix.Linkat(pl.dirFD, from, pl.dirFD, pl.base, 0); err != nil {
		return &fs.PathError{Op: "link", Path: pl.path, Err: err}
	}
	return nil
}
