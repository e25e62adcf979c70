package workspace

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"unicode/utf8"
)

func (d *Driver) createFile(ctx context.Context, a args, r *report) {
	c, err := parseCreate(a)
	if err != nil {
		r.invalid(err)
		return
	}
	r.data["path"] = c.path

	unlock, err := d.lockWrites(ctx)
	if err != nil {
		r.timedOut(err)
		return
	}
	defer unlock()
	pl, err := d.locate(c.path, true)
	if err != nil {
		r.failed(fmt.Errorf("create parent directories of %s: %w", c.path, err))
		return
	}
	defer pl.close()
	mode := fileMode
	fm, _, err := pl.lstat()
	switch {
	case err == nil && !c.overwrite:
		r.failed(fmt.Errorf("file already exists: %s (set overwrite to true to replace it)", c.path))
		return
	case err == nil:
		if err := replaceable(c.path, fm); err != nil {
			r.failed(err)
			return
		}
		mode = fm.Perm()
	case !errors.Is(err, fs.ErrNotExist):
		r.failed(err)
		return
	}
	if err := writeAtomic(pl, c.content, mode, c.overwrite); err != nil {
		r.failed(err)
		return
	}
	r.data["success"] = true
	r.data["bytesWritten"] = len(c.content)
}

func (d *Driver) readFile(_ context.Context, a args, r *report) {
	ra, err := parseRead(a)
	if err != nil {
		r.invalid(err)
		return
	}
	r.data["path"] = ra.path
	pl, err := d.locate(ra.path, false)
	if err != nil {
		r.failed(notFound(ra.path, err))
		return
	}
	defer pl.close()
	content, err := readRegular(pl)
	if err != nil {
		r.failed(err)
		return
	}
	if ra.encoding == encodingUTF8 {
		if !utf8.Valid(content) {
			r.failed(fmt.Errorf("file %s is not valid UTF-8; read it with encoding %q", ra.path, encodingBase64))
			return
		}
		r.stdout = string(content)
	} else {
		r.stdout = base64.StdEncoding.EncodeToString(content)
	}
	r.data["success"] = true
	r.data["encoding"] = ra.encoding
	r.data["size"] = len(content)
}

func (d *Driver) editFile(ctx context.Context, a args, r *report) {
	e, err := parseEdit(a)
	if err != nil {
		r.invalid(err)
		return
	}
	r.data["path"] = e.path
	// The edit holds the write lock; its deadline bounds how long, whatever
	// the caller's own deadline.
	ctx, cancel := context.WithTimeout(ctx, editTimeout)
	defer cancel()

	// Refuse an edit over budget before waiting for the lock. The check is
	// repeated on what is read under the lock, and the work is counted
	// again while the edits apply, so a file that grows in between or is
	// grown by the edits themselves gains nothing.
	if err := d.checkEditBudgetEarly(e); err != nil {
		r.invalid(err)
		return
	}
	unlock, err := d.lockWrites(ctx)
	if err != nil {
		r.timedOut(err)
		return
	}
	defer unlock()
	pl, err := d.locate(e.path, false)
	if err != nil {
		r.failed(notFound(e.path, err))
		return
	}
	defer pl.close()
	fm, _, err := pl.lstat()
	if err != nil {
		r.failed(notFound(e.path, err))
		return
	}
	if err := replaceable(e.path, fm); err != nil {
		r.failed(err)
		return
	}
	content, err := readRegular(pl)
	if err != nil {
		r.failed(err)
		return
	}
	if err := checkEditBudget(len(e.edits), int64(len(content))); err != nil {
		r.invalid(err)
		return
	}
	edited, err := applyEdits(ctx, e.path, content, e.edits)
	if err == nil {
		// Writing is not interruptible; it does not start past the deadline.
		err = ctx.Err()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		r.timedOut(fmt.Errorf("editFile on %s stopped at its deadline (at most %v); nothing was written: %w", e.path, editTimeout, err))
		return
	case errors.Is(err, errEditBudget):
		r.invalid(err)
		return
	case err != nil:
		r.failed(err)
		return
	}
	if err := writeAtomic(pl, edited, fm.Perm(), true); err != nil {
		r.failed(err)
		return
	}
	r.data["success"] = true
	r.data["editsApplied"] = len(e.edits)
}

func (d *Driver) deleteFile(ctx context.Context, a args, r *report) {
	da, err := parseDelete(a)
	if err != nil {
		r.invalid(err)
		return
	}
	r.data["path"] = da.path

	unlock, err := d.lockWrites(ctx)
	if err != nil {
		r.timedOut(err)
		return
	}
	defer unlock()
	pl, err := d.locate(da.path, false)
	if err != nil {
		r.failed(notFound(da.path, err))
		return
	}
	defer pl.close()
	fm, _, err := pl.lstat()
	if err != nil {
		r.failed(notFound(da.path, err))
		return
	}
	switch {
	case fm.IsDir():
		r.failed(fmt.Errorf("%s is a directory; deleteFile removes files only", da.path))
		return
	case fm&fs.ModeSymlink != 0:
		r.failed(fmt.Errorf("%s is a symbolic link; deleteFile does not operate on links", da.path))
		return
	}
	if err := pl.remove(pl.base); err != nil {
		r.failed(notFound(da.path, err))
		return
	}
	r.data["success"] = true
}

// notFound turns a missing-file error into a message that says so plainly.
func notFound(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file not found: %s", p)
	}
	return err
}

// replaceable reports whether the existing entry of mode m at p may be
// replaced by a regular file. Symbolic links are refused so that a link can
// never serve as a handle on what it points to.
func replaceable(p string, m fs.FileMode) error {
	switch {
	case m.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case m&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link; file operations do not write through links", p)
	case !m.IsRegular():
		return fmt.Errorf("%s is not a regular file", p)
	}
	return nil
}

// readRegular returns the content of the regular file at pl, refusing a
// link and anything larger than the content limit.
func readRegular(pl *place) ([]byte, error) {
	p := pl.path
	// O_NONBLOCK keeps the open from hanging on a named pipe; the type check
	// on the open file then refuses it. It does not affect regular files.
	f, err := pl.open(pl.base, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, notFound(p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", p)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file", p)
	case fi.Size() > maxContentBytes:
		return nil, fmt.Errorf("%s is %d bytes, more than the %d bytes a file operation handles", p, fi.Size(), maxContentBytes)
	}
	// The limit also covers a file that grows while it is read.
	content, err := io.ReadAll(io.LimitReader(f, maxContentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(content) > maxContentBytes {
		return nil, fmt.Errorf("%s is more than the %d bytes a file operation handles", p, maxContentBytes)
	}
	return content, nil
}

// writeAtomic stores content at pl through a temporary file in the same
// directory, so that readers see the old file or the new one, never a
// partial write. With replace, an existing file is replaced; without it the
// temporary file is hard-linked into place, which fails if the file exists
// even when another process created it a moment ago.
func writeAtomic(pl *place, content []byte, mode fs.FileMode, replace bool) (err error) {
	p := pl.path
	tmp, f, err := createTemp(pl)
	if err != nil {
		return err
	}
	defer func() {
		// The temporary name is never left behind: after a rename it no
		// longer exists, after a link it is a second name for p.
		if rmErr := pl.remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("remove temporary file: %w", rmErr)
		}
	}()
	if err := writeAndSync(f, content, mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if replace {
		if err := pl.rename(tmp); err != nil {
			return fmt.Errorf("replace %s: %w", p, err)
		}
		return nil
	}
	if err := pl.link(tmp); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("file already exists: %s (set overwrite to true to replace it)", p)
		}
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

// writeAndSync writes content to f, sets its mode (umask would otherwise
// narrow a preserved mode) and flushes it to disk so that the rename or link
// that follows never exposes an empty file after a crash. f is closed.
func writeAndSync(f *os.File, content []byte, mode fs.FileMode) error {
	_, err := f.Write(content)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// createTemp creates a new, uniquely named file in the folder of pl and
// returns its name in that folder.
func createTemp(pl *place) (string, *os.File, error) {
	dir := path.Dir(pl.path)
	var rnd [8]byte
	for range 10 {
		rand.Read(rnd[:])
		name := ".workspace-" + hex.EncodeToString(rnd[:]) + ".tmp"
		f, err := pl.open(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create temporary file in %s: %w", dir, err)
		}
		return name, f, nil
	}
	return "", nil, fmt.Errorf("create temporary file in %s: no free name", dir)
}
