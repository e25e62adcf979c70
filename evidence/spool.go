package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Spool keeps artifacts on local disk that could not be written to the
// primary store, until Flush moves them there. A gateway spools the
// artifacts of a request whose tool has already run (losing them would lose
// the record of something that happened, while failing the call would not
// undo it), and the close of an attempt it told its caller ran nothing
// after its dispatch marker may have been stored (without the close, a
// restart would take that attempt for one that ran).
//
// A Spool is a FileStore with the same layout as the store it stands in for,
// so it is also a Store (for replays and for verification of pending
// requests), plus removal of what has been flushed.
type Spool struct {
	files *FileStore
}

var (
	_ Store      = (*Spool)(nil)
	_ InfoWalker = (*Spool)(nil)
)

// OpenSpool opens the spool kept in dir, creating dir if needed.
func OpenSpool(dir string) (*Spool, error) {
	fs, err := NewFileStore(dir)
	if err != nil {
		return nil, fmt.Errorf("evidence: spool: %w", err)
	}
	// The spool removes what it has flushed, folders too, so none of its
	// folders is taken as durable from memory.
	fs.remembers = false
	return &Spool{files: fs}, nil
}

// Close releases the spool's directory.
func (s *Spool) Close() error { return s.files.Close() }

// Put stores data durably (fsync'd) in the spool, create-only.
func (s *Spool) Put(ctx context.Context, key string, data []byte) error {
	return s.files.Put(ctx, key, data)
}

// Get returns a spooled artifact.
func (s *Spool) Get(ctx context.Context, key string) ([]byte, error) {
	return s.files.Get(ctx, key)
}

// List returns the spooled keys with the prefix, sorted.
func (s *Spool) List(ctx context.Context, prefix string) ([]string, error) {
	return s.files.List(ctx, prefix)
}

// Walk visits the spooled keys with the prefix in ascending order.
func (s *Spool) Walk(ctx context.Context, prefix string, fn func(key string) error) error {
	return s.files.Walk(ctx, prefix, fn)
}

// WalkInfo visits the spooled keys with the prefix in ascending order, with
// each file's size and the time it was spooled.
func (s *Spool) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return s.files.WalkInfo(ctx, prefix, fn)
}

// Flush copies every spooled artifact to dst and removes it from the spool
// once dst holds it. Within a request, the manifest goes last, so a
// verifier never sees a manifest whose artifacts are still on their way. An
// artifact dst already holds with the same bytes counts as flushed (a
// previous Flush may have stopped between the copy and the removal); with
// other bytes it is a conflict, reported and left in the spool for a human.
// Flush stops at the first failure of dst and returns how many artifacts it
// moved.
func (s *Spool) Flush(ctx context.Context, dst Store) (int, error) {
	flushed := 0
	var conflicts []error
	var manifests []string
	move := func(key string) error {
		switch err := s.moveOne(ctx, dst, key); {
		case err == nil:
			flushed++
			return nil
		case errors.Is(err, errConflict):
			conflicts = append(conflicts, err)
			return nil
		default:
			return err
		}
	}
	err := s.files.Walk(ctx, "", func(key string) error {
		if path.Base(key) == ArtifactManifest {
			manifests = append(manifests, key)
			return nil
		}
		return move(key)
	})
	if err != nil {
		return flushed, err
	}
	for _, key := range manifests {
		// A manifest waits while other artifacts of its request remain.
		rest, err := s.files.List(ctx, strings.TrimSuffix(key, ArtifactManifest))
		if err != nil {
			return flushed, err
		}
		if len(rest) > 1 {
			continue
		}
		if err := move(key); err != nil {
			return flushed, err
		}
	}
	return flushed, errors.Join(conflicts...)
}

// FlushOne moves one spooled artifact, key, to dst as Flush does, for a
// reader that must see it in dst before it acts. It returns an error
// wrapping ErrNotExist when key is not spooled.
func (s *Spool) FlushOne(ctx context.Context, dst Store, key string) error {
	return s.moveOne(ctx, dst, key)
}

var errConflict = errors.New("evidence: spooled artifact conflicts with the stored one")

func (s *Spool) moveOne(ctx context.Context, dst Store, key string) error {
	data, err := s.files.Get(ctx, key)
	if err != nil {
		return err
	}
	err = dst.Put(ctx, key, data)
	if errors.Is(err, ErrExist) {
		stored, getErr := dst.Get(ctx, key)
		if getErr != nil {
			return fmt.Errorf("evidence: flush %q: %w", key, getErr)
		}
		if !bytes.Equal(stored, data) {
			return fmt.Errorf("%w: %q", errConflict, key)
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("evidence: flush %q: %w", key, err)
	}
	return s.remove(key)
}

// remove deletes a flushed artifact and syncs its directory, so a restart
// does not upload it again.
func (s *Spool) remove(key string) error {
	// A concurrent Flush may have removed it first.
	if err := s.files.root.Remove(key); err != nil && !isNotExist(err) {
		return fmt.Errorf("evidence: spool: remove %q: %w", key, err)
	}
	dir := path.Dir(key)
	// A request folder left empty goes too; while other artifacts remain
	// in it, Remove fails and the folder stays.
	if s.files.root.Remove(dir) == nil {
		dir = path.Dir(dir)
	}
	return s.files.syncDir(dir)
}
