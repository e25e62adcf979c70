// Package evidence stores the artifacts that record each tool call and the
// manifests that make them verifiable.
//
// Every write is create-only: an artifact, once stored, is never replaced.
// That property is what lets the gateway use the store itself to make sure a
// request_id runs at most once.
//
// What a store is (the Store and Reader interfaces, the key rules, the
// size limit and the body encoding) lives one layer down in
// evidence/storage and is named here too, so that a caller of the record
// formats needs one import. The S3 backend is evidence/s3store, and
// evidence/storeurl opens a store of any backend by URL: this package
// imports neither, so a program that only verifies links no S3 client.
package evidence

import (
	"context"

	"github.com/toolgate/toolgate/evidence/storage"
)

// ErrExist is returned (wrapped) by Put when the key is already stored.
var ErrExist = storage.ErrExist

// ErrNotExist is returned (wrapped) by Get when the key is not stored.
var ErrNotExist = storage.ErrNotExist

// errTooLarge reports a stored object longer than MaxArtifactSize.
var errTooLarge = storage.ErrTooLarge

// Reader reads a store without changing it: see storage.Reader.
type Reader = storage.Reader

// Store is a create-only key/value store for evidence artifacts: see
// storage.Store.
type Store = storage.Store

// StoreCloser is a Store that holds resources, such as an open directory,
// which Close releases.
type StoreCloser = storage.StoreCloser

// KeyInfo describes one stored key as a listing sees it: see
// storage.KeyInfo.
type KeyInfo = storage.KeyInfo

// InfoWalker is implemented by a Reader that can list keys together with
// their size and storage time: see storage.InfoWalker.
type InfoWalker = storage.InfoWalker

// SegmentLister is implemented by a Reader that can name the folders
// directly under a prefix: see storage.SegmentLister.
type SegmentLister = storage.SegmentLister

// WalkInfo calls fn with each key of r that starts with prefix, in
// ascending byte order, with its size and storage time when r is an
// InfoWalker: see storage.WalkInfo.
func WalkInfo(ctx context.Context, r Reader, prefix string, fn func(KeyInfo) error) error {
	return storage.WalkInfo(ctx, r, prefix, fn)
}

// checkPut makes the checks every backend makes before a write.
func checkPut(ctx context.Context, key string, data []byte) error {
	return storage.CheckPut(ctx, key, data)
}

// The body encoding is the storage layer's; this package's backends and
// spool use it under these names.
const (
	// DefaultCompressThreshold is the size, in bytes, above which a store
	// keeps an artifact gzip-compressed unless configured otherwise.
	DefaultCompressThreshold = storage.DefaultCompressThreshold
	// MaxArtifactSize is the largest artifact, in bytes, that a store
	// reads back, before or after decompression.
	MaxArtifactSize = storage.MaxArtifactSize
)

func isGzip(body []byte) bool                      { return storage.IsGzip(body) }
func encodeBody(data []byte, threshold int) []byte { return storage.EncodeBody(data, threshold) }
func decodeBody(body []byte) ([]byte, error)       { return storage.DecodeBody(body) }
