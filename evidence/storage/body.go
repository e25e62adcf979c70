package storage

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
)

// DefaultCompressThreshold is the size, in bytes, above which a store keeps
// an artifact gzip-compressed unless configured otherwise.
const DefaultCompressThreshold = 64 << 10

// MaxArtifactSize is the largest artifact, in bytes, that a store reads
// back, before or after decompression. It keeps a hostile or corrupt object
// (a gzip bomb, say) from exhausting memory.
const MaxArtifactSize = 256 << 20

// gzipMagic starts every gzip stream. JSON never starts with it, which is
// what lets compressed and plain artifacts share one key space: a reader
// (or an auditor running "gzip -dcf") tells them apart by the first bytes.
var gzipMagic = []byte{0x1f, 0x8b}

// IsGzip reports whether body starts with the gzip magic number.
func IsGzip(body []byte) bool {
	return bytes.HasPrefix(body, gzipMagic)
}

// EncodeBody returns the bytes to store for data: data itself, or data
// gzip-compressed when it is longer than threshold bytes and compression
// makes it smaller. A threshold of 0 means DefaultCompressThreshold; a
// negative threshold turns compression off.
//
// Data that itself starts with the gzip magic is always wrapped, whatever
// the threshold: DecodeBody strips exactly one layer, so storing such data
// as is would make it come back decompressed.
func EncodeBody(data []byte, threshold int) []byte {
	if threshold == 0 {
		threshold = DefaultCompressThreshold
	}
	mustWrap := IsGzip(data)
	if !mustWrap && (threshold < 0 || len(data) <= threshold) {
		return data
	}
	var buf bytes.Buffer
	// The header carries no name and a zero time, so equal data always
	// compresses to equal bytes. Writing to a bytes.Buffer cannot fail, so
	// neither can the gzip writer.
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(data)
	_ = zw.Close()
	if !mustWrap && buf.Len() >= len(data) {
		return data
	}
	return buf.Bytes()
}

// DecodeBody returns the artifact that body, as read from a store, holds:
// body decompressed if it starts with the gzip magic, otherwise body
// itself. It fails if the stream is corrupt or would decompress to more
// than MaxArtifactSize bytes.
func DecodeBody(body []byte) ([]byte, error) {
	return decodeBodyLimit(body, MaxArtifactSize)
}

// decodeBodyLimit is DecodeBody with a configurable size limit.
//
// It decompresses twice: first only to count, which finds an oversized
// or corrupt stream without allocating for it and checks every member's
// CRC, then into a buffer of exactly the counted size. Growing a buffer
// as the data arrives would copy a large artifact several times over,
// which costs more than the second pass.
func decodeBodyLimit(body []byte, limit int) ([]byte, error) {
	if !IsGzip(body) {
		return body, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("evidence: decompress artifact: %w", err)
	}
	// One byte past the limit tells "exactly at the limit" from "over".
	n, err := io.Copy(io.Discard, io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("evidence: decompress artifact: %w", err)
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("evidence: decompress artifact: larger than the %d-byte limit", limit)
	}
	// The first pass read the whole stream without error, so the second,
	// over the same bytes, yields exactly n bytes.
	if err := zr.Reset(bytes.NewReader(body)); err != nil {
		return nil, fmt.Errorf("evidence: decompress artifact: %w", err)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(zr, data); err != nil {
		return nil, fmt.Errorf("evidence: decompress artifact: %w", err)
	}
	return data, nil
}
