package evidence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// ErrLogBehind is returned (wrapped) by OpenLog when the store's log does
// not extend a checkpoint this gateway signed before: it is smaller
// (rolled back: an older copy restored, or its newest objects deleted)
// or has another tree at that size (forked). The gateway then signs
// nothing: a checkpoint of that log would contradict its own earlier
// ones.
var ErrLogBehind = errors.New("evidence: log: the store's log does not extend what this gateway signed before")

// maxStateFileBytes bounds what is read of a state file: it holds one
// checkpoint, a few hundred bytes.
const maxStateFileBytes = 64 << 10

// signedHead is a tree size and root this gateway signed, and where it
// was recorded.
type signedHead struct {
	source string // "the state file PATH" or "the closed lease KEY"
	remove string // what an operator removes to accept a smaller log
	origin string
	size   uint64
	root   tlog.Hash
}

// readState reads the state file: the newest checkpoint this gateway
// published, or none yet. A missing state file (the first start of a
// version that keeps one) makes the writer pass over unsealed records of
// the earlier version without calling them tampering.
func (l *LogWriter) readState() ([]signedHead, error) {
	path := l.cfg.StateFile
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		l.legacy = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("evidence: log state file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateFileBytes+1))
	if err == nil && len(data) > maxStateFileBytes {
		err = fmt.Errorf("larger than %d bytes", maxStateFileBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("evidence: log state file %s: %w", path, err)
	}
	origin, size, root, err := checkpointBody(data)
	if err != nil {
		return nil, fmt.Errorf("evidence: log state file %s does not hold a checkpoint (%v); "+
			"remove it to accept the store's log as it is", path, err)
	}
	return []signedHead{{source: "the state file " + path, remove: path, origin: origin, size: size, root: root}}, nil
}

// writeState replaces the state file with note (see WriteFileAtomic). It
// is written after the checkpoint is stored, so the state never runs
// ahead of the store.
func writeState(path string, note []byte) error { return WriteFileAtomic(path, note) }

// WriteFileAtomic replaces the file at path with data: written to a
// temporary file beside it, synced, renamed into place and the folder
// synced, so that a crash leaves the old file or the new one, never a mix.
// The state files kept outside the store are written so.
func WriteFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// keepState records the newest published checkpoint in the state file.
// A failed write does not stop the log (calls must still be recorded);
// the file then lags behind the store, which weakens the check at the
// next start but never makes it refuse an honest store. It is retried at
// the next checkpoint.
func (l *LogWriter) keepState() {
	if l.cfg.StateFile == "" || l.state == l.published && !l.stateErr {
		return
	}
	if err := writeState(l.cfg.StateFile, l.newest); err != nil {
		if !l.stateErr {
			l.cfg.Logger.Error("transparency log: the state file was not written; retrying at the next checkpoint",
				"origin", l.cfg.Origin, "file", l.cfg.StateFile, "err", err)
		}
		l.stateErr = true
		return
	}
	if l.stateErr {
		l.cfg.Logger.Info("transparency log: the state file is written again", "origin", l.cfg.Origin, "file", l.cfg.StateFile)
	}
	l.state, l.stateErr = l.published, false
}

// checkHistory compares the tree restored from the store's newest
// checkpoint (size, root) with the trees this gateway signed before (the
// state file's and the newest authenticated closed lease's): the store
// must reach each and hold the same tree there, checked with a
// consistency proof from the stored tiles. A missing state file beside an
// existing log is accepted (the first start after an upgrade), and said
// so.
func (l *LogWriter) checkHistory(ctx context.Context, size uint64, root tlog.Hash, signed []signedHead) error {
	if l.legacy && size > 0 {
		l.cfg.Logger.Warn("transparency log: no state file; accepting the store's log as it is, once "+
			"(the first start of a version that keeps one); from now on a store behind it is refused",
			"origin", l.cfg.Origin, "size", size, "file", l.cfg.StateFile)
	}
	for _, h := range signed {
		if err := l.extends(ctx, h, size, root); err != nil {
			return fmt.Errorf("%w: %w", ErrLogBehind, err)
		}
	}
	return nil
}

// extends checks that the store's tree of size and root extends h.
func (l *LogWriter) extends(ctx context.Context, h signedHead, size uint64, root tlog.Hash) error {
	fix := "To accept a store restored from a backup on purpose, remove " + h.remove + " and start again " +
		"(auditors holding the newer checkpoints will see this log as rolled back or forked); " +
		"otherwise put back the log objects that are missing or replaced."
	switch {
	case h.origin != l.cfg.Origin:
		return fmt.Errorf("%s records the log %s, but the store's log is %s: the store's log/bucket-id differs "+
			"(another bucket, or the id was replaced). %s", h.source, h.origin, l.cfg.Origin, fix)
	case h.size > size:
		return fmt.Errorf("log %s rolled back: %s records size %d signed by this gateway, but the store's newest checkpoint "+
			"has size %d. %s", l.cfg.Origin, h.source, h.size, size, fix)
	case h.size == 0:
		return nil
	case h.size == size:
		if h.root != root {
			return fmt.Errorf("log %s forked: at size %d the store's root differs from the one %s records. %s",
				l.cfg.Origin, size, h.source, fix)
		}
		return nil
	}
	hashes, err := tlog.ConsistencyProof(ctx, h.size, size, l.read)
	if err != nil {
		return fmt.Errorf("log %s: the store's tiles give no consistency proof from size %d (%s) to %d: %v. %s",
			l.cfg.Origin, h.size, h.source, size, err, fix)
	}
	raw := make([][]byte, len(hashes))
	for i := range hashes {
		raw[i] = hashes[i][:]
	}
	if proof.VerifyConsistency(rfc6962.DefaultHasher, h.size, size, raw, h.root[:], root[:]) != nil {
		return fmt.Errorf("log %s forked: the store's tree of size %d does not extend the one of size %d that %s records. %s",
			l.cfg.Origin, size, h.size, h.source, fix)
	}
	return nil
}

// read reads one of the log's resources, by its path under the log.
func (l *LogWriter) read(ctx context.Context, path string) ([]byte, error) {
	return l.store.Get(ctx, l.prefix+path)
}

// initState writes the state file at the end of OpenLog, so that it
// exists from the first start on (a checkpoint of size 0 for a new log)
// and holds the store's newest checkpoint, now checked. A state file that
// cannot be written stops the start here, where the operator sees why,
// rather than leave the gateway unprotected.
func (l *LogWriter) initState() error {
	if l.cfg.StateFile == "" {
		return nil
	}
	note := l.newest
	if note == nil {
		var err error
		if note, err = l.cfg.SignCheckpoint(0, tlog.NewTree().Root()); err != nil {
			return fmt.Errorf("evidence: log checkpoint: %w", err)
		}
	}
	if err := writeState(l.cfg.StateFile, note); err != nil {
		return fmt.Errorf("evidence: log state file: %w (log.state_file must name a file the gateway can write, "+
			"kept as safely as the signing key)", err)
	}
	l.state = l.published
	return nil
}
