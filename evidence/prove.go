package evidence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/api/layout"
)

// Errors of Prove a caller can tell apart with errors.Is.
var (
	// ErrUnknownRequest: the store holds neither evidence of the request
	// nor a log entry for it.
	ErrUnknownRequest = errors.New("evidence: unknown request")
	// ErrNotLogged: the request's completion is not in any published
	// checkpoint yet: it is in flight, or sequenced at the next interval.
	ErrNotLogged = errors.New("evidence: completion not logged yet")
	// ErrLoggedManifestGone: the log committed to the request's manifest,
	// but the store no longer holds that manifest. This is evidence of
	// deletion or replacement, not a state an honest gateway leaves.
	ErrLoggedManifestGone = errors.New("evidence: the logged manifest is gone from the store")
)

// ProveOptions configures Prove.
type ProveOptions struct {
	// Cosigned proves inclusion in the newest witness-cosigned checkpoint
	// (log/<instance>/cosigned/) instead of the newest checkpoint, so the
	// proof carries the witnesses' cosignatures.
	Cosigned bool
}

// proofExtra is the extra data of Toolgate's proof files: the log entry
// and the manifest it commits to. Its encoding is canonical: compact
// JSON, these fields in this order, standard padded base64.
type proofExtra struct {
	V        int    `json:"v"`
	Entry    []byte `json:"entry"`
	Manifest []byte `json:"manifest"`
}

// logHead is the newest checkpoint of one instance's log.
type logHead struct {
	instance string
	key      string // the checkpoint's key
	size     uint64
	cosigned string // the newest cosigned checkpoint's key, if any
}

func (h logHead) read(r Reader) tlog.ReadFunc {
	return func(ctx context.Context, path string) ([]byte, error) {
		return r.Get(ctx, LogPrefix(h.instance)+path)
	}
}

// logged is one completion entry found in a log.
type logged struct {
	head  logHead
	index uint64
	entry []byte
}

// Prove returns a C2SP tlog-proof file that proves, offline, that the
// request's manifest is in its gateway instance's log: the completion
// entry, the manifest.json bytes it commits to (both in the proof's
// extra data), the inclusion proof and the signed checkpoint. VerifyProof
// checks it with nothing but the gateway's public key.
//
// Finding the entry reads every entry bundle of every instance's log up
// to its newest checkpoint: O(log size) reads, about one per 256 entries.
// The proof leads to the newest checkpoint (or, with opts.Cosigned, the
// newest cosigned one).
func Prove(ctx context.Context, r Reader, requestID string, opts ProveOptions) ([]byte, error) {
	if err := validRequestID(requestID); err != nil {
		return nil, err
	}
	heads, err := logHeads(ctx, r)
	if err != nil {
		return nil, err
	}
	var found []logged
	for _, h := range heads {
		f, err := findCompletions(ctx, r, h, requestID)
		if err != nil {
			return nil, err
		}
		found = append(found, f...)
	}
	if len(found) == 0 {
		return nil, notLogged(ctx, r, requestID)
	}
	manifest, err := r.Get(ctx, Key(requestID, ArtifactManifest))
	if errors.Is(err, ErrNotExist) {
		return nil, fmt.Errorf("%w: the log of %s holds the completion of request %q at index %d, but its manifest.json is not in the store: evidence was deleted",
			ErrLoggedManifestGone, found[0].head.instance, requestID, found[0].index)
	}
	if err != nil {
		return nil, err
	}
	for _, f := range found {
		if e, err := tlog.ParseEntry(f.entry); err == nil && e.ManifestSHA256 == sha256Hex(manifest) {
			return f.prove(ctx, r, manifest, opts)
		}
	}
	return nil, fmt.Errorf("%w: the stored manifest.json of request %q (sha256 %s) is not the one the log of %s committed to at index %d: it was replaced",
		ErrLoggedManifestGone, requestID, sha256Hex(manifest), found[0].head.instance, found[0].index)
}

// notLogged explains why a request has no completion in any log.
func notLogged(ctx context.Context, r Reader, requestID string) error {
	keys, err := r.List(ctx, RequestPrefix(requestID))
	if err != nil {
		return err
	}
	switch {
	case len(keys) == 0:
		return fmt.Errorf("%w: no evidence and no log entry for request %q", ErrUnknownRequest, requestID)
	case !containsKey(keys, Key(requestID, ArtifactManifest)):
		return fmt.Errorf("%w: request %q has no manifest yet (in flight, or spooled and not yet uploaded); retry once it completes and log.checkpoint_interval has passed",
			ErrNotLogged, requestID)
	}
	return fmt.Errorf("%w: the manifest of request %q is stored but its completion is in no published checkpoint; retry after log.checkpoint_interval (a request stored before the log existed is never logged)",
		ErrNotLogged, requestID)
}

func containsKey(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}

// logHeads returns the newest checkpoint of every instance's log in the
// store, in instance order. Keys sort in numeric order, so the last
// checkpoint key of an instance is its newest.
func logHeads(ctx context.Context, r Reader) ([]logHead, error) {
	var heads []logHead
	err := r.Walk(ctx, logRoot, func(key string) error {
		instance, rest, ok := strings.Cut(strings.TrimPrefix(key, logRoot), "/")
		if !ok {
			return nil
		}
		if len(heads) == 0 || heads[len(heads)-1].instance != instance {
			heads = append(heads, logHead{instance: instance})
		}
		h := &heads[len(heads)-1]
		if n, ok := parseSeqKey(rest, checkpointDir); ok && strings.HasPrefix(rest, checkpointDir) {
			h.key, h.size = key, n
		} else if _, ok := parseSeqKey(rest, cosignedDir); ok && strings.HasPrefix(rest, cosignedDir) {
			h.cosigned = key
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("evidence: list the logs: %w", err)
	}
	out := heads[:0]
	for _, h := range heads {
		if h.key != "" {
			out = append(out, h)
		}
	}
	return out, nil
}

// findCompletions returns the completion entries of requestID among the
// entries of h's log up to its newest checkpoint.
func findCompletions(ctx context.Context, r Reader, h logHead, requestID string) ([]logged, error) {
	// Entries are canonical (tlog.Entry.Marshal: no HTML escaping), so a
	// completion of this request starts so.
	var id bytes.Buffer
	enc := json.NewEncoder(&id)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(requestID); err != nil {
		return nil, err
	}
	prefix := []byte(`{"v":1,"kind":"completion","request_id":` + strings.TrimSuffix(id.String(), "\n") + `,`)
	read := h.read(r)
	var out []logged
	for start := uint64(0); start < h.size; start += layout.EntryBundleWidth {
		width := min(layout.EntryBundleWidth, h.size-start)
		path := layout.EntriesPath(start/layout.EntryBundleWidth, layout.PartialTileSize(0, start/layout.EntryBundleWidth, h.size))
		data, err := read(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("evidence: log %s: %w", h.instance, err)
		}
		entries, err := tlog.ParseBundle(data, int(width))
		if err != nil {
			return nil, fmt.Errorf("evidence: log %s: %s: %w", h.instance, path, err)
		}
		for i, e := range entries {
			if bytes.HasPrefix(e, prefix) {
				out = append(out, logged{head: h, index: start + uint64(i), entry: e})
			}
		}
	}
	return out, nil
}

// prove builds the proof file of f under the newest checkpoint, or the
// newest cosigned one.
func (f logged) prove(ctx context.Context, r Reader, manifest []byte, opts ProveOptions) ([]byte, error) {
	key := f.head.key
	if opts.Cosigned {
		if f.head.cosigned == "" {
			return nil, fmt.Errorf("evidence: the log of %s has no cosigned checkpoint yet; run toolgate evidence cosign", f.head.instance)
		}
		key = f.head.cosigned
	}
	cp, err := r.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	_, size, root, err := checkpointBody(cp)
	if err != nil {
		return nil, fmt.Errorf("evidence: %s: %w", key, err)
	}
	if f.index >= size {
		return nil, fmt.Errorf("evidence: the newest cosigned checkpoint of %s (size %d) does not yet include entry %d; run toolgate evidence cosign again",
			f.head.instance, size, f.index)
	}
	hashes, err := tlog.InclusionProof(ctx, f.index, size, f.head.read(r))
	if err != nil {
		return nil, fmt.Errorf("evidence: log %s: %w", f.head.instance, err)
	}
	// Check before handing the proof out: tiles that do not lead to the
	// checkpoint are a tampered log, not a bad proof.
	path := make([][]byte, len(hashes))
	for i := range hashes {
		path[i] = hashes[i][:]
	}
	leaf := tlog.LeafHash(f.entry)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, f.index, size, leaf[:], path, root[:]); err != nil {
		return nil, fmt.Errorf("evidence: log %s: the stored tiles do not lead to the checkpoint of size %d (tampered log): %w", f.head.instance, size, err)
	}
	extra, err := marshalExtra(proofExtra{V: 1, Entry: f.entry, Manifest: manifest})
	if err != nil {
		return nil, err
	}
	return tlog.Proof{Extra: extra, Index: f.index, Hashes: hashes, Checkpoint: cp}.Marshal(), nil
}

// marshalExtra encodes a proof's extra data canonically.
func marshalExtra(x proofExtra) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, fmt.Errorf("evidence: proof extra: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// parseExtra decodes a proof's extra data and accepts only the bytes
// marshalExtra writes, so that no bit of it goes unchecked.
func parseExtra(data []byte) (proofExtra, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var x proofExtra
	if err := dec.Decode(&x); err != nil {
		return proofExtra{}, fmt.Errorf("proof extra: %w", err)
	}
	if x.V != 1 {
		return proofExtra{}, fmt.Errorf("proof extra: version %d, want 1", x.V)
	}
	again, err := marshalExtra(x)
	if err != nil || !bytes.Equal(again, data) {
		return proofExtra{}, errors.New("proof extra is not in canonical form")
	}
	return x, nil
}

// sha256Hex is the lowercase hex SHA-256 of data, as entries write it.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
