// Package regularfile reads the files a configuration names (keys,
// secrets, rules, policies) the one safe way: only a regular file, never
// blocking on a named pipe, never reading a device without end, and never
// more than a bound. An operator's typo or a planted link then costs an
// error at start, not a gateway that hangs or fills its memory.
package regularfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Read returns the contents of the regular file at path, which must hold
// at most limit bytes. It opens without blocking, so a named pipe with no
// writer is refused rather than waited on.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit); err != nil {
		return nil, err
	}
	return readAtMost(path, f, limit)
}

// ReadFS is Read for the file name of fsys. The file is examined before it
// is opened (an fs.FS cannot open without blocking), so a named pipe or a
// device is refused without being opened.
func ReadFS(fsys fs.FS, name string, limit int64) ([]byte, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, err
	}
	if err := check(name, fi, limit); err != nil {
		return nil, err
	}
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAtMost(name, f, limit)
}

func check(name string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is %s, not a regular file", name, Kind(fi.Mode()))
	}
	if fi.Size() > limit {
		return fmt.Errorf("%s holds %d bytes, more than the %d allowed", name, fi.Size(), limit)
	}
	return nil
}

// readAtMost reads r to its end, refusing more than limit bytes (a file
// may grow after it was examined).
func readAtMost(name string, r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s holds more than the %d bytes allowed", name, limit)
	}
	return data, nil
}

// Kind names what a file that is not a regular file is, for messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "not a regular file"
	}
}
