package evidence

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// ListSegments returns the folders directly under prefix ("" or ending in
// "/"): from the store's own listing when r is a SegmentLister, else by
// walking every key below prefix.
func ListSegments(ctx context.Context, r Reader, prefix string) ([]string, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("evidence: list segments: prefix %q does not end in /", prefix)
	}
	if l, ok := r.(SegmentLister); ok {
		return l.ListSegments(ctx, prefix)
	}
	var out []string
	err := r.Walk(ctx, prefix, func(key string) error {
		seg, _, ok := strings.Cut(strings.TrimPrefix(key, prefix), "/")
		if ok && (len(out) == 0 || out[len(out)-1] != seg) {
			out = append(out, seg)
		}
		return nil
	})
	// The keys of one folder are contiguous, but "a.b/" sorts before "a/".
	slices.Sort(out)
	return out, err
}

var (
	_ SegmentLister = (*FileStore)(nil)
	_ SegmentLister = (*MemoryStore)(nil)
	_ SegmentLister = (*opTimeoutStore)(nil)
	_ SegmentLister = (*loggedStore)(nil)
)

// ListSegments reads the directory prefix names: its subdirectories are
// the segments. A directory left empty by deletions is listed too; a
// caller finds nothing in it.
func (s *FileStore) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: list segments %q: %w", prefix, err)
	}
	dir := strings.TrimSuffix(prefix, "/")
	if dir == "" {
		dir = "."
	} else if ValidKey(dir) != nil {
		return nil, nil
	}
	entries, err := fs.ReadDir(s.root.FS(), dir)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("evidence: list segments %q: %w", prefix, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && ValidKey(prefix+e.Name()+"/x") == nil {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// ListSegments scans the keys held.
func (s *MemoryStore) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if seg, _, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/"); ok {
			out = append(out, seg)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ListSegments forwards to the wrapped store, bounded by the operation
// timeout like List.
func (s *opTimeoutStore) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.d)
	defer cancel()
	segs, err := ListSegments(ctx, s.StoreCloser, prefix)
	if err != nil {
		return nil, s.explain(ctx, "list segments", prefix, err)
	}
	return segs, nil
}

// ListSegments forwards to the wrapped store.
func (s *loggedStore) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	return ListSegments(ctx, s.StoreCloser, prefix)
}
