// Package storage is the lowest layer of evidence: what a store is, and
// the rules every backend shares. It holds the create-only Store and
// read-only Reader interfaces with their optional extensions (InfoWalker,
// SegmentLister), the key rules (ValidKey), the size limit and the body
// encoding (EncodeBody, DecodeBody).
//
// It imports no backend and no record format, so a backend package such
// as evidence/s3store depends on this package alone, and a program that
// reads or verifies evidence links no backend it does not open.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrExist is returned (wrapped) by Put when the key is already stored.
var ErrExist = errors.New("evidence: artifact already exists")

// ErrNotExist is returned (wrapped) by Get when the key is not stored.
var ErrNotExist = errors.New("evidence: artifact does not exist")

// ErrTooLarge is returned (wrapped) by Get when the stored object is
// larger than MaxArtifactSize.
var ErrTooLarge = fmt.Errorf("stored object is larger than the %d-byte limit", MaxArtifactSize)

// Reader reads a store without changing it: everything verification
// needs, so that an auditor can be handed a store it cannot write to. Keys
// are slash-separated relative paths such as "requests/r1/request.json";
// Get rejects a key that ValidKey rejects with an error wrapping
// ErrInvalidKey. Implementations are safe for concurrent use.
type Reader interface {
	// Get returns the data stored under key, or an error wrapping
	// ErrNotExist.
	Get(ctx context.Context, key string) ([]byte, error)
	// List returns the keys that start with prefix, sorted. The prefix is
	// matched as a string, not as a directory: "requests/r" matches both
	// "requests/r1/x" and "requests/r2/x".
	List(ctx context.Context, prefix string) ([]string, error)
	// Walk calls fn with each key that starts with prefix, in ascending
	// byte order, without holding all keys in memory, so that a bucket of
	// millions of artifacts can be audited. It stops at and returns the
	// first error fn returns.
	Walk(ctx context.Context, prefix string, fn func(key string) error) error
}

// Store is a create-only key/value store for evidence artifacts: a Reader
// that can also add keys. Put rejects a key that ValidKey rejects with an
// error wrapping ErrInvalidKey. Implementations are safe for concurrent use.
type Store interface {
	Reader
	// Put stores data under key if and only if key is not yet stored. When
	// Put returns nil the data is durable. When the key exists it returns an
	// error wrapping ErrExist and leaves the stored data unchanged.
	Put(ctx context.Context, key string, data []byte) error
}

// StoreCloser is a Store that holds resources, such as an open directory,
// which Close releases.
type StoreCloser interface {
	Store
	io.Closer
}

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

// CheckPut makes the checks every backend makes before a write: the call
// is still wanted, the key is valid and the artifact not too large.
func CheckPut(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("evidence: put %q: %w", key, err)
	}
	if err := ValidKey(key); err != nil {
		return err
	}
	if len(data) > MaxArtifactSize {
		return fmt.Errorf("evidence: put %q: artifact is %d bytes, larger than the %d-byte limit", key, len(data), MaxArtifactSize)
	}
	return nil
}
