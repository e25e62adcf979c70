// Package storeurl opens an evidence store of any backend from its URL
// (file://, mem://, s3://). It sits above the backends, so that it alone
// (and whoever calls it: the gateway and the command line) links every
// one of them, while evidence and its verifier link none but their own.
package storeurl

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/s3store"
)

// Open returns the store that rawURL names:
//
//	file://DIR   an evidence.FileStore in DIR, created if missing.
//	             Everything after "file://" is the directory, taken
//	             literally: "file://./ev" and "file://ev" are relative to
//	             the working directory, "file:///var/lib/ev" is absolute.
//	mem://       an empty evidence.MemoryStore.
//	s3://BUCKET/PREFIX?endpoint=URL&region=REGION&path_style=true
//	             an s3store.Store in BUCKET, with keys under PREFIX
//	             (optional). The other parameters, all optional, are
//	             object_lock_mode (GOVERNANCE or COMPLIANCE) with
//	             object_lock_days, and compress_threshold; see
//	             s3store.Options. Credentials come from the standard AWS
//	             environment, never from the URL.
//
// The caller must Close the store when done with it.
func Open(ctx context.Context, rawURL string) (evidence.StoreCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: open store: %w", err)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("evidence: store URL %q has no scheme (want file://DIR, mem:// or s3://BUCKET/PREFIX)", rawURL)
	}
	switch strings.ToLower(scheme) {
	case "file":
		if rest == "" {
			return nil, fmt.Errorf("evidence: store URL %q names no directory (want file://DIR)", rawURL)
		}
		store, err := evidence.NewFileStore(rest)
		if err != nil {
			// Not returned directly: a nil *FileStore is a non-nil StoreCloser.
			return nil, err
		}
		return store, nil
	case "mem":
		if rest != "" {
			return nil, fmt.Errorf("evidence: store URL %q: mem:// takes no path", rawURL)
		}
		return evidence.NewMemoryStore(), nil
	case "s3":
		opts, err := s3store.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		store, err := s3store.New(ctx, opts)
		if err != nil {
			return nil, err
		}
		return store, nil
	default:
		return nil, fmt.Errorf("evidence: unsupported store URL scheme %q (supported: file, mem, s3)", scheme)
	}
}
