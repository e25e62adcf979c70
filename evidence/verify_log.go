package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/transparency-dev/tessera/api/layout"
)

// States of a transparency log, in LogReport.Status.
const (
	// LogOK: the log re-derives from its entries to the signed root of
	// its newest checkpoint, and extends every checkpoint kept or
	// cosigned.
	LogOK = "ok"
	// LogInconsistent: the log does not: an entry bundle or tile is gone
	// or altered, the newest checkpoint is not signed by a trusted key,
	// or the log does not reach or does not extend a checkpoint the
	// auditor kept (a rollback, a truncation, a fork), or the log is gone
	// altogether.
	LogInconsistent = "log-inconsistent"
	// LogUnwitnessed: the log is consistent but no checkpoint of it
	// carries the cosignatures of VerifyOptions.WitnessThreshold trusted
	// witnesses.
	LogUnwitnessed = "unwitnessed"
)

// LogReport is the result of verifying one instance's transparency log.
type LogReport struct {
	Instance string `json:"instance"`
	Origin   string `json:"origin"`
	// Size is the size of the newest checkpoint.
	Size   uint64 `json:"size"`
	Status string `json:"status"`
	// Signature is the newest checkpoint's signature state: one of the
	// Signature* states (SignatureUnsigned never).
	Signature string `json:"signature"`
	KeyID     string `json:"key_id,omitempty"`
	// Witnesses names the trusted witnesses whose cosignature verified
	// on the newest cosigned checkpoint, WitnessedSize its size.
	Witnesses     []string `json:"witnesses,omitempty"`
	WitnessedSize uint64   `json:"witnessed_size,omitempty"`
	Problems      []string `json:"problems,omitempty"`
	// PeerWitnessed lists the other logs of the store whose gateways
	// witnessed this log (by a witness entry in their log or a cosigned
	// checkpoint under their folder), each with the largest size it
	// witnessed; see VerifyAll.
	PeerWitnessed []PeerWitnessed `json:"peer_witnessed,omitempty"`
	// Checkpoint is the newest checkpoint, verified: what an auditor
	// keeps (see FormatCheckpoints) to catch a later rollback or fork.
	Checkpoint []byte `json:"-"`
}

func (r *LogReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	r.Status = LogInconsistent
}

// logObjects are the keys of one instance's log that verification reads
// by name: its newest checkpoint and its cosigned checkpoints. A log has a
// checkpoint a second while busy, too many to hold; the cosigned ones are
// as many as its witnessing runs.
type logObjects struct {
	instance string
	newest   KeyInfo // Key "" when the log has no checkpoint
	cosigned []KeyInfo
	// sizeBefore is the size of the newest checkpoint listed before
	// VerifyAll listed the requests (see logJoin.sizeBefore); newest may
	// be a later one, listed after.
	sizeBefore uint64
	// peerCosigned is the newest checkpoint of each other instance's log
	// this log's gateway witnessed, by instance.
	peerCosigned map[string]KeyInfo
}

// listLogs walks the "log/" prefix once and returns each instance's
// newest checkpoint and cosigned checkpoints.
func listLogs(ctx context.Context, r Reader) ([]*logObjects, error) {
	var logs []*logObjects
	err := WalkInfo(ctx, r, logRoot, func(ki KeyInfo) error {
		inst, rest, ok := strings.Cut(strings.TrimPrefix(ki.Key, logRoot), "/")
		if !ok {
			return nil
		}
		if len(logs) == 0 || logs[len(logs)-1].instance != inst {
			logs = append(logs, &logObjects{instance: inst})
		}
		lo := logs[len(logs)-1]
		switch {
		case strings.HasPrefix(rest, checkpointDir):
			lo.newest = ki // the walk is in key order: sizes ascend
		case strings.HasPrefix(rest, cosignedDir):
			lo.cosigned = append(lo.cosigned, ki)
		case strings.HasPrefix(rest, peerCosignedDir):
			lo.addPeerCosigned(strings.TrimPrefix(rest, peerCosignedDir), ki)
		}
		return nil
	})
	return logs, err
}

// logVerifier re-derives one log from its entry bundles.
type logVerifier struct {
	v      *verifier
	r      Reader
	lo     *logObjects
	rep    LogReport
	root   tlog.Hash
	prefix string
	// rootsAt asks for the tree's root at these sizes (kept and cosigned
	// checkpoints); derive fills in the answers.
	rootsAt map[uint64]*tlog.Hash
	// derived: the entries hash to the root of the newest checkpoint,
	// whose signature is trusted. witnessed is what the log's witness
	// entries say of the other logs: the largest size of each.
	derived   bool
	witnessed map[string]witnessClaim
}

// verifyLog checks one instance's log and adds its entries to the join.
func (v *verifier) verifyLog(ctx context.Context, lo *logObjects, bucketID string, j *logJoin) (LogReport, error) {
	lv := &logVerifier{v: v, r: v.store, lo: lo, prefix: LogPrefix(lo.instance), rootsAt: map[uint64]*tlog.Hash{},
		rep: LogReport{Instance: lo.instance, Origin: "toolgate.log/" + bucketID + "/" + lo.instance, Status: LogOK}}
	defer v.keepView(lv)
	if lo.newest.Key == "" {
		// A log whose first batch is not yet published is empty. So is one
		// whose every checkpoint was deleted: the kept checkpoint, if any,
		// tells the two apart, and its requests show as unlogged.
		lv.rep.Signature = SignatureUnchecked
		if kept := v.kept[lv.rep.Origin]; kept != nil && kept.Size > 0 {
			lv.checkKept(*kept)
		}
		return lv.rep, nil
	}
	if err := lv.openNewest(ctx); err != nil {
		return lv.rep, err
	}
	if lv.rep.Status != LogOK {
		return lv.rep, nil
	}
	kept := v.kept[lv.rep.Origin]
	if kept != nil {
		lv.rootsAt[kept.Size] = new(tlog.Hash)
	}
	cosigned, err := lv.readCosigned(ctx)
	if err != nil {
		return lv.rep, err
	}
	if err := lv.derive(ctx, j); err != nil {
		return lv.rep, err
	}
	if kept != nil {
		lv.checkKept(*kept)
	}
	lv.checkCosigned(cosigned)
	return lv.rep, nil
}

// openNewest verifies the newest checkpoint's signature and reads its
// size and root.
func (lv *logVerifier) openNewest(ctx context.Context) error {
	newest := lv.lo.newest.Key
	data, err := lv.r.Get(ctx, newest)
	if err != nil {
		return err
	}
	cp, sig, keyID, err := lv.v.openCheckpoint(data)
	lv.rep.Signature, lv.rep.KeyID = sig, keyID
	if err != nil {
		lv.rep.problem("%s: %v", newest, err)
		return nil
	}
	if n, ok := parseSeqKey(newest, checkpointDir); !ok || n != cp.Size || cp.Origin != lv.rep.Origin {
		lv.rep.problem("%s: holds the checkpoint of %s at size %d", newest, cp.Origin, cp.Size)
		return nil
	}
	lv.rep.Size, lv.root, lv.rep.Checkpoint = cp.Size, cp.Root, data
	return nil
}

// openCheckpoint opens a checkpoint with the trusted keys, or, with none,
// reads it unchecked. It returns the signature state and key id.
func (v *verifier) openCheckpoint(data []byte) (tlog.Checkpoint, string, string, error) {
	if len(v.trusted) == 0 {
		origin, size, root, err := checkpointBody(data)
		return tlog.Checkpoint{Origin: origin, Size: size, Root: root, Note: data}, SignatureUnchecked, "", err
	}
	cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: v.trustedList()})
	switch {
	case errors.Is(err, tlog.ErrUnknownKey):
		return cp, SignatureUnknownKey, "", err
	case errors.Is(err, tlog.ErrBadSignature):
		return cp, SignatureBad, "", err
	case err != nil:
		return cp, SignatureBad, "", err
	}
	return cp, SignatureValid, KeyID(cp.LogKey), nil
}

// derive streams the log's entry bundles into a fresh tree, compares every
// tile it completes and the partials at the checkpoint's size with the
// stored ones, and its root with the checkpoint's. Each entry goes to the
// join. Memory stays O(log n) plus one bundle.
func (lv *logVerifier) derive(ctx context.Context, j *logJoin) error {
	tree := tlog.NewTree()
	size := lv.rep.Size
	for start := uint64(0); start < size; start += layout.EntryBundleWidth {
		width := min(layout.EntryBundleWidth, size-start)
		path := layout.EntriesPath(start/layout.EntryBundleWidth, layout.PartialTileSize(0, start/layout.EntryBundleWidth, size))
		data, err := lv.r.Get(ctx, lv.prefix+path)
		if errors.Is(err, ErrNotExist) {
			lv.rep.problem("%s%s: missing: the log is truncated", lv.prefix, path)
			return nil
		}
		if err != nil {
			return err
		}
		entries, err := tlog.ParseBundle(data, int(width))
		if err != nil {
			lv.rep.problem("%s%s: %v", lv.prefix, path, err)
			return nil
		}
		for _, e := range entries {
			if err := lv.add(ctx, tree, e, j); err != nil {
				return err
			}
		}
		if err := lv.compare(ctx, tree.TakeFull()); err != nil {
			return err
		}
	}
	if err := lv.compare(ctx, tree.Partials()); err != nil {
		return err
	}
	if tree.Root() != lv.root {
		lv.rep.problem("%s: the entries do not hash to the root of the checkpoint of size %d", lv.prefix, size)
		return nil
	}
	lv.derived = lv.rep.Status == LogOK && lv.rep.Signature == SignatureValid
	return nil
}

// add appends one entry to the tree and the join, noting the root at the
// sizes asked for.
func (lv *logVerifier) add(ctx context.Context, tree *tlog.Tree, entry []byte, j *logJoin) error {
	index := tree.Size()
	if err := tree.Append(entry); err != nil {
		lv.rep.problem("%s: entry %d: %v", lv.prefix, index, err)
		return nil
	}
	if h, ok := lv.rootsAt[tree.Size()]; ok {
		*h = tree.Root()
	}
	e, err := tlog.ParseEntry(entry)
	if err != nil {
		lv.rep.problem("%s: entry %d: %v", lv.prefix, index, err)
		return nil
	}
	if e.Kind == tlog.KindWitness {
		lv.witness(e, index)
		return nil
	}
	return j.add(e, lv.rep.Origin, index)
}

// compare checks derived tiles and bundles against the stored ones.
func (lv *logVerifier) compare(ctx context.Context, objs []tlog.Object) error {
	for _, o := range objs {
		stored, err := lv.r.Get(ctx, lv.prefix+o.Path)
		switch {
		case errors.Is(err, ErrNotExist):
			lv.rep.problem("%s%s: missing", lv.prefix, o.Path)
		case err != nil:
			return err
		case !bytes.Equal(stored, o.Data):
			lv.rep.problem("%s%s: differs from the tile its entries derive", lv.prefix, o.Path)
		}
	}
	return nil
}

// checkKept compares the checkpoint the auditor kept with the log: the log
// must still reach its size and have the same root there.
func (lv *logVerifier) checkKept(kept tlog.Checkpoint) {
	switch {
	case kept.Size > lv.rep.Size:
		lv.rep.problem("%s: rolled back or truncated: the kept checkpoint has size %d, the log's newest only %d", lv.prefix, kept.Size, lv.rep.Size)
	case kept.Size > 0 && *lv.rootsAt[kept.Size] != kept.Root:
		lv.rep.problem("%s: forked: at size %d the log's root differs from the kept checkpoint's", lv.prefix, kept.Size)
	}
}

// cosignedCheckpoint is a checkpoint with witness cosignatures.
type cosignedCheckpoint struct {
	key string
	cp  tlog.Checkpoint
}

// readCosigned opens the log's cosigned checkpoints and asks derive for
// the roots at their sizes.
func (lv *logVerifier) readCosigned(ctx context.Context) ([]cosignedCheckpoint, error) {
	var out []cosignedCheckpoint
	for _, ki := range lv.lo.cosigned {
		data, err := lv.r.Get(ctx, ki.Key)
		if err != nil {
			return nil, err
		}
		cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: lv.v.trustedList(), Witnesses: lv.v.witnesses})
		if len(lv.v.trusted) == 0 {
			var origin string
			origin, cp.Size, cp.Root, err = checkpointBody(data)
			cp.Origin = origin
		}
		if err != nil || cp.Origin != lv.rep.Origin {
			lv.rep.problem("%s: %v", ki.Key, err)
			continue
		}
		lv.rootsAt[cp.Size] = new(tlog.Hash)
		out = append(out, cosignedCheckpoint{ki.Key, cp})
	}
	return out, nil
}

// checkCosigned checks that the log extends every cosigned checkpoint and
// that the newest one the witnesses vouch for meets the threshold.
func (lv *logVerifier) checkCosigned(cosigned []cosignedCheckpoint) {
	for _, c := range cosigned {
		switch {
		case c.cp.Size > lv.rep.Size:
			lv.rep.problem("%s: rolled back or truncated: witnesses cosigned size %d, the log's newest is %d", c.key, c.cp.Size, lv.rep.Size)
		case c.cp.Size > 0 && *lv.rootsAt[c.cp.Size] != c.cp.Root:
			lv.rep.problem("%s: forked: the witnesses cosigned another root at size %d", c.key, c.cp.Size)
		case len(c.cp.Witnesses) >= lv.v.threshold && c.cp.Size >= lv.rep.WitnessedSize:
			lv.rep.Witnesses, lv.rep.WitnessedSize = c.cp.Witnesses, c.cp.Size
		}
	}
	if lv.v.threshold > 0 && lv.rep.Witnesses == nil && lv.rep.Status == LogOK {
		lv.rep.Status = LogUnwitnessed
		lv.rep.Problems = append(lv.rep.Problems, fmt.Sprintf("%s: no checkpoint cosigned by %d trusted witnesses", lv.prefix, lv.v.threshold))
	}
}

// keptCheckpoints parses the checkpoints an auditor kept, by origin.
func (v *verifier) keptCheckpoints(notes [][]byte) error {
	v.kept = map[string]*tlog.Checkpoint{}
	for i, data := range notes {
		cp, _, _, err := v.openCheckpoint(data)
		if err != nil {
			return fmt.Errorf("evidence: verify: kept checkpoint %d: %w", i+1, err)
		}
		if prev, ok := v.kept[cp.Origin]; ok && prev.Size >= cp.Size {
			continue
		}
		v.kept[cp.Origin] = &cp
	}
	return nil
}
