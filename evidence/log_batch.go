package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// batchVersion is the batch format: a sealed header line, then the
// entries. Version 1, before seals, was one unsealed JSON object.
const batchVersion = 2

// batch is the commit point of sequencing: the entries it carries take
// the indexes from Start on, after a tree whose root was RootBefore. The
// tiles, bundles and checkpoints are all derived from the batches, so a
// writer that dies after a batch is stored loses nothing: the next one
// integrates the batch again, byte for byte.
//
// Stored, a batch is its header, a JSON object sealed by the writer's key
// (trust.Sealer.Sign) that commits to the SHA-256 of the entries, then a
// newline and the entries as a JSON array of base64 strings. The
// signature covers a few hundred bytes whatever the batch holds, and the
// entries are hashed once: sealing a batch of 1,000 entries costs a
// SHA-256 pass over them and one Ed25519 signature.
type batch struct {
	Version       int      `json:"v"`
	Origin        string   `json:"origin"`
	Epoch         uint64   `json:"epoch"`
	Start         uint64   `json:"start"`
	RootBefore    []byte   `json:"root_before"`
	EntriesSHA256 string   `json:"entries_sha256"`
	Entries       [][]byte `json:"-"`
}

// encodeBatch returns what the writer stores under key for b.
func encodeBatch(l *LogWriter, key string, b batch) ([]byte, error) {
	entries, err := json.Marshal(b.Entries)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(entries)
	b.EntriesSHA256 = hex.EncodeToString(sum[:])
	header, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	if header, err = l.seal(key, header); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(header)+1+len(entries))
	out = append(out, header...)
	out = append(out, '\n')
	return append(out, entries...), nil
}

// openBatch checks the seal of the batch stored under key and decodes it.
// Every error wraps errBadBatch, and trust.ErrTampered when the header's
// seal does not open or the entries are not the ones it commits to.
func (l *LogWriter) openBatch(key string, data []byte) (batch, error) {
	header, entries, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		header = data
	}
	body, _, err := l.cfg.Trusted.OpenSigned(key, header)
	if err != nil {
		return batch{}, fmt.Errorf("%w: %s: %w", errBadBatch, key, err)
	}
	var b batch
	if err := decodeStrict(body, &b); err != nil {
		return batch{}, fmt.Errorf("%w: %s: %v", errBadBatch, key, err)
	}
	if b.Version != batchVersion || b.Origin != l.cfg.Origin {
		return batch{}, fmt.Errorf("%w: %s: not a batch of %s", errBadBatch, key, l.cfg.Origin)
	}
	sum := sha256.Sum256(entries)
	if hex.EncodeToString(sum[:]) != b.EntriesSHA256 {
		return batch{}, fmt.Errorf("%w: %s: %w: the entries are not the ones its sealed header commits to", errBadBatch, key, trust.ErrTampered)
	}
	if err := json.Unmarshal(entries, &b.Entries); err != nil || len(b.Entries) == 0 {
		return batch{}, fmt.Errorf("%w: %s: the entries do not decode (%v)", errBadBatch, key, err)
	}
	for i, e := range b.Entries {
		if len(e) > tlog.MaxLeafSize {
			return batch{}, fmt.Errorf("%w: %s: entry %d is too large", errBadBatch, key, i)
		}
	}
	return b, nil
}
