package evidence

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// SegmentLister is implemented by a Reader that can name the folders
// directly under a prefix without listing every key below them: a
// directory read, an S3 listing with a delimiter. A peer witness finds
// the other instances' logs this way every round; walking "log/" would
// list every tile of every log.
type SegmentLister interface {
	// ListSegments returns, sorted, each name s such that some key starts
	// with prefix+s+"/". prefix is "" or ends in "/".
	ListSegments(ctx context.Context, prefix string) ([]string, error)
}

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
	_ SegmentLister = (*S3Store)(nil)
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

// ListSegments lists prefix with the delimiter "/": one request per
// thousand segments, whatever lies below them.
func (s *S3Store) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	if !canStartKey(prefix) {
		return nil, nil
	}
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix), Delimiter: aws.String("/")}
	var out []string
	for {
		page, err := s.listPage(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("evidence: list segments %q: %w", prefix, err)
		}
		for _, p := range page.CommonPrefixes {
			seg, ok := strings.CutPrefix(aws.ToString(p.Prefix), s.prefix+prefix)
			seg, slash := strings.CutSuffix(seg, "/")
			if ok && slash && seg != "" && ValidKey(prefix+seg+"/x") == nil {
				out = append(out, seg)
			}
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			break
		}
		in.ContinuationToken = page.NextContinuationToken
	}
	slices.Sort(out)
	return slices.Compact(out), nil
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
