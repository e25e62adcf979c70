package storage

import (
	"context"
	"time"
)

// KeyInfo describes one stored key as a listing sees it.
type KeyInfo struct {
	Key string
	// Size is the number of bytes the store holds for the key. For an
	// artifact the store keeps compressed it is smaller than what Get
	// returns.
	Size int64
	// ModTime is when the object was stored, by the store's own clock:
	// the object's LastModified for S3, the file's modification time for a
	// FileStore, the time of Put for a MemoryStore. It is zero when the
	// store cannot tell (see WalkInfo). Clocks of different stores, and of
	// different S3 servers behind one endpoint, need not agree.
	ModTime time.Time
}

// InfoWalker is implemented by a Reader that can list keys together with
// their size and storage time, as S3 and a directory listing do, at the
// cost of a plain Walk.
type InfoWalker interface {
	// WalkInfo calls fn with each key that starts with prefix and what the
	// store knows of it, in ascending byte order of the keys, under the
	// same contract as Walk: it holds no more than Walk does and stops at
	// and returns the first error fn returns.
	WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error
}

// WalkInfo calls fn with each key of r that starts with prefix, in
// ascending byte order, with its size and storage time when r is an
// InfoWalker. A Reader that is not one is walked with Walk, and every
// KeyInfo it yields has only Key set: Size 0 and a zero ModTime, which a
// caller must read as "unknown", never as "stored at the epoch".
func WalkInfo(ctx context.Context, r Reader, prefix string, fn func(KeyInfo) error) error {
	if w, ok := r.(InfoWalker); ok {
		return w.WalkInfo(ctx, prefix, fn)
	}
	return r.Walk(ctx, prefix, func(key string) error {
		return fn(KeyInfo{Key: key})
	})
}
