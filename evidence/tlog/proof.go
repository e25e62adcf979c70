package tlog

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// proofHeader is the first line of a C2SP tlog-proof@v1 file.
const proofHeader = "c2sp.org/tlog-proof@v1"

// maxProofHashes bounds the hash lines of a proof: an inclusion path in a
// tree of up to 2^64 entries has at most 64 hashes.
const maxProofHashes = 64

// Proof is a C2SP tlog-proof@v1 file: an inclusion proof of one entry and
// the signed checkpoint it leads to, checkable offline.
//
//	c2sp.org/tlog-proof@v1
//	extra <base64>      (only when Extra is not empty)
//	index <decimal>
//	<base64 hash>       (one line per element of Hashes)
//
//	<checkpoint, verbatim>
type Proof struct {
	// Extra is application data the proof carries, unauthenticated by
	// the format itself.
	Extra []byte
	// Index is the entry's index in the log.
	Index uint64
	// Hashes is the RFC 6962 inclusion path, the leaf's sibling first.
	Hashes [][32]byte
	// Checkpoint is the signed checkpoint, with every signature line.
	Checkpoint []byte
}

// Marshal returns the proof file's bytes.
func (p Proof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(proofHeader + "\n")
	if len(p.Extra) > 0 {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Extra) + "\n")
	}
	b.WriteString("index " + strconv.FormatUint(p.Index, 10) + "\n")
	for _, h := range p.Hashes {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteByte('\n')
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// ParseProof parses a tlog-proof@v1 file strictly: the header line exact,
// extra (optional, not empty) and every hash in canonical base64, the
// index without leading zeros, a blank line, then a non-empty checkpoint
// taken verbatim to the end. Whatever it accepts, Marshal reproduces byte
// for byte; anything else is an error wrapping ErrMalformed. The
// checkpoint itself is checked by OpenCheckpoint.
func ParseProof(data []byte) (Proof, error) {
	var p Proof
	line, rest, ok := cutLine(data)
	if !ok || line != proofHeader {
		return Proof{}, fmt.Errorf("%w: proof does not start with the line %q", ErrMalformed, proofHeader)
	}
	if line, rest, ok = cutLine(rest); ok && strings.HasPrefix(line, "extra ") {
		extra, err := decodeCanonical(strings.TrimPrefix(line, "extra "))
		if err != nil || len(extra) == 0 {
			return Proof{}, fmt.Errorf("%w: proof extra is empty or not canonical base64", ErrMalformed)
		}
		p.Extra = extra
		line, rest, ok = cutLine(rest)
	}
	index, found := strings.CutPrefix(line, "index ")
	n, err := strconv.ParseUint(index, 10, 64)
	if !ok || !found || err != nil || strconv.FormatUint(n, 10) != index {
		return Proof{}, fmt.Errorf("%w: proof has no line \"index <decimal without leading zeros>\"", ErrMalformed)
	}
	p.Index = n
	if p.Hashes, rest, err = parseHashes(rest); err != nil {
		return Proof{}, err
	}
	if len(rest) == 0 {
		return Proof{}, fmt.Errorf("%w: proof has no checkpoint", ErrMalformed)
	}
	p.Checkpoint = bytes.Clone(rest)
	if !bytes.Equal(p.Marshal(), data) {
		return Proof{}, fmt.Errorf("%w: proof is not in canonical form", ErrMalformed)
	}
	return p, nil
}

// parseHashes reads hash lines up to and including the blank line, and
// returns what follows it.
func parseHashes(data []byte) ([][32]byte, []byte, error) {
	var hashes [][32]byte
	for {
		line, rest, ok := cutLine(data)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("%w: proof has no blank line before its checkpoint", ErrMalformed)
		case line == "":
			return hashes, rest, nil
		case len(hashes) == maxProofHashes:
			return nil, nil, fmt.Errorf("%w: proof has more than %d hashes", ErrMalformed, maxProofHashes)
		}
		h, err := decodeHash(line)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: proof hash %d: %w", ErrMalformed, len(hashes), err)
		}
		hashes = append(hashes, h)
		data = rest
	}
}

// cutLine splits data after its first newline; ok is false when there is
// none.
func cutLine(data []byte) (line string, rest []byte, ok bool) {
	l, rest, ok := bytes.Cut(data, []byte("\n"))
	return string(l), rest, ok
}

// VerifyInclusion checks that p proves entry (the entry's bytes) to be in
// the log at p.Index under cp, the checkpoint OpenCheckpoint returned for
// p.Checkpoint. Errors wrap ErrNotIncluded, or ErrMalformed when cp is not
// p's checkpoint.
func VerifyInclusion(p Proof, cp Checkpoint, entry []byte) error {
	if !bytes.Equal(p.Checkpoint, cp.Note) {
		return fmt.Errorf("%w: the checkpoint verified is not the proof's checkpoint", ErrMalformed)
	}
	if p.Index >= cp.Size {
		return fmt.Errorf("%w: index %d is not below the checkpoint's size %d", ErrNotIncluded, p.Index, cp.Size)
	}
	path := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		path[i] = p.Hashes[i][:]
	}
	leaf := LeafHash(entry)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, cp.Size, leaf[:], path, cp.Root[:]); err != nil {
		return fmt.Errorf("%w: entry %d of %s: %w", ErrNotIncluded, p.Index, cp.Origin, err)
	}
	return nil
}
