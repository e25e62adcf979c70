package evidence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/transparency-dev/tessera/api/layout"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/internal/canonb64"
)

// newestCheckpointOf returns the newest checkpoint of an instance's log,
// or nil when it has none, without listing its checkpoint folder, which
// gains a key a second while the log is busy. The entry bundles tell the
// log's size: from the bundle of hint (the size last witnessed) on, an
// exponential then binary search finds the first bundle not yet full,
// whose partial versions name the sizes that have checkpoints. Only when
// none of those has one (the log was cut back below its bundles, or
// published its tiles a moment before its checkpoint) is the folder
// listed. The caller checks the signature and the size.
func newestCheckpointOf(ctx context.Context, s Reader, inst string, hint uint64) ([]byte, error) {
	prefix := LogPrefix(inst)
	b, widths, err := firstOpenBundle(ctx, s, prefix, hint/layout.EntryBundleWidth)
	if err != nil {
		return nil, err
	}
	data, err := checkpointAt(ctx, s, prefix, b, widths, true)
	if data != nil || err != nil {
		return data, err
	}
	if b > 0 {
		if _, widths, err = probeBundle(ctx, s, prefix, b-1); err != nil {
			return nil, err
		}
		if data, err = checkpointAt(ctx, s, prefix, b-1, widths, false); data != nil || err != nil {
			return data, err
		}
	}
	var newest string
	if err := s.Walk(ctx, prefix+checkpointDir, func(key string) error { newest = key; return nil }); err != nil {
		return nil, storeFailed(err)
	}
	if newest == "" {
		return nil, nil
	}
	return getCheckpoint(ctx, s, newest)
}

// firstOpenBundle returns the index of the first entry bundle at or after
// from that is not full, and the widths of its partial versions.
func firstOpenBundle(ctx context.Context, s Reader, prefix string, from uint64) (uint64, []uint64, error) {
	full, widths, err := probeBundle(ctx, s, prefix, from)
	if err != nil || !full {
		return from, widths, err
	}
	lo, hi := from, from+1 // lo is full; hi is to be probed
	for step := uint64(1); ; step *= 2 {
		if full, widths, err = probeBundle(ctx, s, prefix, hi); err != nil || !full {
			break
		}
		lo, hi = hi, hi+step
	}
	if err != nil {
		return 0, nil, err
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		f, ws, err := probeBundle(ctx, s, prefix, mid)
		if err != nil {
			return 0, nil, err
		}
		if f {
			lo = mid
		} else {
			hi, widths = mid, ws
		}
	}
	return hi, widths, nil
}

// probeBundle lists the entry bundle b of a log: whether it is full, and
// the widths of its partial versions, largest first. One listing: the
// full bundle's key is a prefix of its partials' ("…/067", "…/067.p/8").
func probeBundle(ctx context.Context, s Reader, prefix string, b uint64) (bool, []uint64, error) {
	path := prefix + layout.EntriesPath(b, 0)
	var full bool
	var widths []uint64
	err := s.Walk(ctx, path, func(key string) error {
		rest := strings.TrimPrefix(key, path)
		if rest == "" {
			full = true
		} else if w, err := strconv.ParseUint(strings.TrimPrefix(rest, ".p/"), 10, 8); err == nil &&
			strings.HasPrefix(rest, ".p/") && w > 0 && w < layout.EntryBundleWidth {
			widths = append(widths, w)
		}
		return nil
	})
	if err != nil {
		return false, nil, storeFailed(err)
	}
	slices.Sort(widths)
	slices.Reverse(widths)
	return full, widths, nil
}

// checkpointAt returns the checkpoint at the largest size bundle b's
// partial widths name, trying each, and, when edge is set, at the size
// where the bundle starts; nil when none is stored.
func checkpointAt(ctx context.Context, s Reader, prefix string, b uint64, widths []uint64, edge bool) ([]byte, error) {
	sizes := make([]uint64, 0, len(widths)+1)
	for _, w := range widths {
		sizes = append(sizes, b*layout.EntryBundleWidth+w)
	}
	if edge && b > 0 {
		sizes = append(sizes, b*layout.EntryBundleWidth)
	}
	for _, size := range sizes {
		data, err := getCheckpoint(ctx, s, seqKey(prefix+checkpointDir, size))
		if data != nil || err != nil {
			return data, err
		}
	}
	return nil, nil
}

// getCheckpoint reads a checkpoint; nil when it is not stored.
func getCheckpoint(ctx context.Context, s Reader, key string) ([]byte, error) {
	data, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, storeFailed(err)
	}
	return data, nil
}

// peerState is what a peer witness remembers of each peer log outside the
// store: the last checkpoint it witnessed, by origin.
type peerState struct {
	V     int                       `json:"v"`
	Peers map[string]peerCheckpoint `json:"peers"`
}

// peerCheckpoint is a checkpoint witnessed: its size and root.
type peerCheckpoint struct {
	Size uint64    `json:"size"`
	Root tlog.Hash `json:"-"`
	// RootBase64 is Root as the file holds it.
	RootBase64 string `json:"root"`
}

// loadPeerState reads a state file; a missing file (or none configured)
// is an empty state.
func loadPeerState(file string) (*peerState, error) {
	st := &peerState{V: 1, Peers: map[string]peerCheckpoint{}}
	if file == "" {
		return st, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("evidence: peer witness state: %w", err)
	}
	if err := json.Unmarshal(data, st); err != nil || st.V != 1 {
		return nil, fmt.Errorf("evidence: peer witness state %s: not a state file of version 1 (%v); move it away to start witnessing afresh", file, err)
	}
	if st.Peers == nil {
		st.Peers = map[string]peerCheckpoint{}
	}
	for origin, c := range st.Peers {
		root, err := canonb64.Std(c.RootBase64)
		if err != nil || len(root) != len(c.Root) || c.Size == 0 {
			return nil, fmt.Errorf("evidence: peer witness state %s: the entry of %s is damaged", file, origin)
		}
		c.Root = tlog.Hash(root)
		st.Peers[origin] = c
	}
	return st, nil
}

// save replaces the state file atomically: a crash leaves the old state
// or the new one.
func (st *peerState) save(file string) error {
	if file == "" {
		return nil
	}
	out := peerState{V: 1, Peers: make(map[string]peerCheckpoint, len(st.Peers))}
	for origin, c := range st.Peers {
		c.RootBase64 = base64.StdEncoding.EncodeToString(c.Root[:])
		out.Peers[origin] = c
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("evidence: peer witness state: %w", err)
	}
	if err := WriteFileAtomic(file, append(data, '\n')); err != nil {
		return fmt.Errorf("evidence: peer witness state: %w", err)
	}
	return nil
}
