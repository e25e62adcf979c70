package evidence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// PeerWitnessed is what one other log says of a log: the gateway of By
// (an instance sharing the store) witnessed its checkpoint of Size.
type PeerWitnessed struct {
	By   string `json:"by"`
	Size uint64 `json:"size"`
	// Where is the witness entry ("log/<by>/ entry N") or the cosigned
	// checkpoint's key that says so.
	Where string `json:"where"`
}

// witnessClaim is one statement that a log's checkpoint was witnessed:
// a witness entry of another log, or a checkpoint that other log's
// gateway cosigned.
type witnessClaim struct {
	by, where string
	size      uint64
	root      tlog.Hash
}

// peerView is what the cross-check needs of one verified log.
type peerView struct {
	instance, origin string
	size             uint64
	root             tlog.Hash
	// derived: the log's entries hash to its newest checkpoint, signed by
	// a trusted key: its witness entries, and its stored tiles, can be
	// believed.
	derived      bool
	claims       map[string]witnessClaim // by the witnessed log's origin
	peerCosigned map[string]KeyInfo      // by the witnessed log's instance
}

// addPeerCosigned notes a key under the log's witnessed/ folder; keys
// ascend, so the last one of a peer is its newest.
func (lo *logObjects) addPeerCosigned(rest string, ki KeyInfo) {
	peer, _, ok := strings.Cut(rest, "/")
	if !ok || validInstance(peer) != nil {
		return
	}
	if lo.peerCosigned == nil {
		lo.peerCosigned = map[string]KeyInfo{}
	}
	lo.peerCosigned[peer] = ki
}

// witness notes what a witness entry of this log says of another log,
// keeping the largest size of each.
func (lv *logVerifier) witness(e tlog.Entry, index uint64) {
	if lv.witnessed == nil {
		lv.witnessed = map[string]witnessClaim{}
	}
	if c, ok := lv.witnessed[e.PeerOrigin]; ok && c.size >= e.PeerSize {
		return
	}
	lv.witnessed[e.PeerOrigin] = witnessClaim{by: lv.lo.instance, where: fmt.Sprintf("%s entry %d", lv.prefix, index),
		size: e.PeerSize, root: e.PeerRoot}
}

// keepView records what the cross-check needs of a log just verified.
func (v *verifier) keepView(lv *logVerifier) {
	v.views = append(v.views, &peerView{instance: lv.lo.instance, origin: lv.rep.Origin, size: lv.rep.Size,
		root: lv.root, derived: lv.derived, claims: lv.witnessed, peerCosigned: lv.lo.peerCosigned})
}

// crossWitness checks every log against what the other logs say of it.
// A replica's gateway witnesses the logs of the others (PeerWitness): it
// logs a witness entry for each checkpoint of a peer it checked, and
// stores the checkpoint with its cosignature under its own folder. So a
// log rolled back, truncated or rewritten, with the requests it held
// deleted, still has its larger size recorded under another key, in
// another log: a log must reach the largest size any other log witnessed
// of it, and have the witnessed root there. It reports which log caught
// it, and names a log that is gone altogether though a peer witnessed
// it. Claims are believed only with trusted keys: a witness entry when
// its log derives to a checkpoint a trusted key signed, a cosigned
// checkpoint when the cosignature verifies under a trusted key.
func (v *verifier) crossWitness(ctx context.Context, reps []LogReport, bucketID string) ([]LogReport, error) {
	if len(v.trusted) == 0 {
		return reps, nil
	}
	index := map[string]int{} // of reps, by origin
	for i := range reps {
		index[reps[i].Origin] = i
	}
	claims := map[string][]witnessClaim{} // by the witnessed origin
	views := map[string]*peerView{}       // by origin
	for _, w := range v.views {
		views[w.origin] = w
		if w.derived {
			for _, origin := range slices.Sorted(maps.Keys(w.claims)) {
				claims[origin] = append(claims[origin], w.claims[origin])
			}
		}
		if err := v.readPeerCosigned(ctx, w, &reps[index[w.origin]], bucketID, claims); err != nil {
			return nil, err
		}
	}
	for _, origin := range slices.Sorted(maps.Keys(claims)) {
		inst, ok := strings.CutPrefix(origin, "toolgate.log/"+bucketID+"/")
		if !ok || validInstance(inst) != nil {
			continue
		}
		i, ok := index[origin]
		if !ok {
			reps = append(reps, LogReport{Instance: inst, Origin: origin, Status: LogOK, Signature: SignatureUnchecked})
			i = len(reps) - 1
			index[origin] = i
		}
		for _, c := range claims[origin] {
			if err := v.checkClaim(ctx, &reps[i], views[origin], c); err != nil {
				return nil, err
			}
		}
	}
	return reps, nil
}

// readPeerCosigned opens the newest checkpoint of each peer that w's
// gateway cosigned, and adds it to claims. One that does not verify is a
// problem of w's log: only its gateway writes there.
func (v *verifier) readPeerCosigned(ctx context.Context, w *peerView, rep *LogReport, bucketID string, claims map[string][]witnessClaim) error {
	var cosigners []note.Verifier
	for _, k := range v.trustedList() {
		cv, err := tlog.CosignerVerifier(w.origin, k)
		if err != nil {
			return err
		}
		cosigners = append(cosigners, cv)
	}
	for _, peer := range slices.Sorted(maps.Keys(w.peerCosigned)) {
		ki := w.peerCosigned[peer]
		data, err := v.store.Get(ctx, ki.Key)
		if errors.Is(err, ErrNotExist) {
			continue // deleted since the listing: it says nothing now
		}
		if err != nil {
			return err
		}
		cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: v.trustedList(), Witnesses: cosigners, Threshold: 1})
		if err == nil && cp.Origin != "toolgate.log/"+bucketID+"/"+peer {
			err = fmt.Errorf("it is a checkpoint of %s", cp.Origin)
		}
		if n, ok := parseSeqKey(ki.Key, "/"); err == nil && (!ok || n != cp.Size) {
			err = fmt.Errorf("it holds the checkpoint of size %d", cp.Size)
		}
		if err != nil {
			rep.problem("%s: not a checkpoint of %s cosigned by this log's gateway: %v", ki.Key, peer, err)
			continue
		}
		claims[cp.Origin] = append(claims[cp.Origin], witnessClaim{by: w.instance, where: ki.Key, size: cp.Size, root: cp.Root})
	}
	return nil
}

// checkClaim checks one log against one claim of another: it must reach
// the size witnessed and have the witnessed root there.
func (v *verifier) checkClaim(ctx context.Context, rep *LogReport, view *peerView, c witnessClaim) error {
	if c.by == rep.Instance {
		return nil
	}
	addWitnessed(rep, c)
	prefix := LogPrefix(rep.Instance)
	switch {
	case view == nil:
		rep.problem("%s: the log is gone from the store, though the gateway of %s witnessed it at size %d (%s)", prefix, c.by, c.size, c.where)
		return nil
	case c.size > view.size:
		rep.problem("%s: rolled back or truncated: the gateway of %s witnessed size %d (%s), the log's newest checkpoint is %d",
			prefix, c.by, c.size, c.where, view.size)
		return nil
	case !view.derived:
		return nil // its entries are not the checkpoint's: already reported
	}
	ok, err := extendsClaim(ctx, v.store, view, c)
	if err != nil {
		return fmt.Errorf("log %s: %w", rep.Instance, err)
	}
	if !ok {
		rep.problem("%s: forked: the gateway of %s witnessed another root at size %d (%s)", prefix, c.by, c.size, c.where)
	}
	return nil
}

// extendsClaim reports whether the log of view, whose stored tiles were
// checked against its entries, has the claim's root at the claim's size.
func extendsClaim(ctx context.Context, r Reader, view *peerView, c witnessClaim) (bool, error) {
	if c.size == view.size {
		return c.root == view.root, nil
	}
	read := peerReader(r, view.instance)
	hashes, err := tlog.ConsistencyProof(ctx, c.size, view.size, read)
	var se *peerStoreError
	if errors.As(err, &se) {
		return false, err
	}
	if err != nil {
		return false, nil
	}
	return proof.VerifyConsistency(rfc6962.DefaultHasher, c.size, view.size, hashSlices(hashes), c.root[:], view.root[:]) == nil, nil
}

// addWitnessed keeps, in the report, the largest size each peer
// witnessed.
func addWitnessed(rep *LogReport, c witnessClaim) {
	for i, p := range rep.PeerWitnessed {
		if p.By == c.by {
			if c.size > p.Size {
				rep.PeerWitnessed[i] = PeerWitnessed{By: c.by, Size: c.size, Where: c.where}
			}
			return
		}
	}
	rep.PeerWitnessed = append(rep.PeerWitnessed, PeerWitnessed{By: c.by, Size: c.size, Where: c.where})
	slices.SortFunc(rep.PeerWitnessed, func(a, b PeerWitnessed) int { return cmp.Compare(a.By, b.By) })
}
