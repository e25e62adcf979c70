package evidence

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/api/layout"
	"golang.org/x/mod/sumdb/note"
)

// peerCosignedDir holds, under a log's prefix, the checkpoints of the
// other instances' logs its gateway witnessed, each with the gateway's
// cosignature appended: log/<witness>/witnessed/<peer>/<size>. They live
// under the witness's prefix, not the peer's, so that replacing the
// peer's folder with an older copy leaves them in place.
const peerCosignedDir = "witnessed/"

// DefaultPeerWitnessInterval is how often a gateway witnesses the logs of
// the replicas it shares its store with, unless configured otherwise.
const DefaultPeerWitnessInterval = 10 * time.Second

// maxPeerReplay is the growth up to which a peer's new entries are read
// and re-hashed (which also shows whether they are all witness entries);
// beyond it a consistency proof from the stored tiles is checked.
const maxPeerReplay = layout.EntryBundleWidth

// ErrPeerRefused is wrapped by the error of a PeerReport whose peer log
// went backwards, forked, or shows a checkpoint no trusted key signed
// after one that was: what a bucket owner rolling the log back leaves.
var ErrPeerRefused = errors.New("evidence: peer log refused")

// The outcomes of witnessing one peer, in PeerReport.Action.
const (
	// PeerCosigned: the peer's newest checkpoint extends the last one
	// witnessed (or is the first); it was cosigned and logged.
	PeerCosigned = "cosigned"
	// PeerUnchanged: the newest checkpoint is the one witnessed last.
	PeerUnchanged = "unchanged"
	// PeerWitnessEntriesOnly: the peer grew by witness entries alone (its
	// own witnessing of others); cosigning them would make two idle
	// replicas log each other's witness entries forever.
	PeerWitnessEntriesOnly = "witness-entries-only"
	// PeerNoCheckpoint: the peer's log has no checkpoint yet.
	PeerNoCheckpoint = "no-checkpoint"
	// PeerUntrusted: no trusted key signs the peer's log; it is not
	// witnessed (configure its key to have it witnessed).
	PeerUntrusted = "untrusted"
	// PeerRefused: the peer's log went backwards or forked, or its
	// checkpoint or tiles were tampered with; Err wraps ErrPeerRefused.
	PeerRefused = "refused"
	// PeerUnreachable: the store did not answer; retried next round.
	PeerUnreachable = "unreachable"
)

// PeerWitnessConfig configures a PeerWitness.
type PeerWitnessConfig struct {
	// Store is the store the replicas share.
	Store Store
	// Instance and Origin name this gateway's log, which is not
	// witnessed; Origin is also the name the cosignatures are made under.
	Instance, Origin string
	// Signer makes the cosignatures, with the key that signs this log.
	Signer *Signer
	// TrustedKeys are the keys whose logs are witnessed; a peer log
	// signed by another key is left alone.
	TrustedKeys []ed25519.PublicKey
	// Log is this gateway's log, where the witness entries go.
	Log interface{ Append(entry []byte) }
	// Gateway names this gateway in the entries ("toolgate/<v>@<inst>").
	Gateway string
	// StateFile keeps the last checkpoint witnessed of each peer outside
	// the store, so a peer rolled back while this gateway was down is
	// still caught; "" keeps it in memory.
	StateFile string
	// Interval is how often Run witnesses; 0 means
	// DefaultPeerWitnessInterval.
	Interval time.Duration
	// Logger receives the witness's findings.
	Logger *slog.Logger
	// OnRefused, if set, is called once for each new refusal: the gateway
	// counts it as tampering with a log.
	OnRefused func(instance string, err error)
	// Now timestamps the cosignatures; time.Now when nil.
	Now func() time.Time
}

// PeerReport says what one round of witnessing did with one peer log.
type PeerReport struct {
	Instance string
	Origin   string
	// Size is the size of the peer's newest checkpoint, Witnessed that of
	// the last one witnessed before this round (0: none).
	Size, Witnessed uint64
	Action          string
	Err             error
}

// PeerWitness witnesses the logs of the other instances sharing a store:
// the C2SP tlog-witness checks, done by a replica for its peers, so that
// a two-replica deployment needs no third party to make a rollback of
// one log show. See Round.
type PeerWitness struct {
	cfg      PeerWitnessConfig
	cosigner note.Signer
	self     note.Verifier // this gateway's cosignatures
	originAt string        // the origin of a log is originAt + instance
	state    *peerState
	looked   map[string]bool // peers whose cosigned checkpoints were looked up
	skipped  map[string]tlog.Hash
	refused  map[string]string // the last refusal told, by peer origin
	told     map[string]bool   // untrusted peers and store failures told
}

// NewPeerWitness reads the state file and prepares the cosigner.
func NewPeerWitness(cfg PeerWitnessConfig) (*PeerWitness, error) {
	switch {
	case cfg.Store == nil || cfg.Signer == nil || cfg.Log == nil:
		return nil, errors.New("evidence: peer witness: store, signer and log are required")
	case !strings.HasSuffix(cfg.Origin, "/"+cfg.Instance):
		return nil, fmt.Errorf("evidence: peer witness: origin %q does not end in the instance %q", cfg.Origin, cfg.Instance)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPeerWitnessInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cosigner, err := tlog.NewCosigner(cfg.Origin, cfg.Signer.key, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("evidence: peer witness: %w", err)
	}
	self, err := tlog.CosignerVerifier(cfg.Origin, cfg.Signer.PublicKey())
	if err != nil {
		return nil, fmt.Errorf("evidence: peer witness: %w", err)
	}
	state, err := loadPeerState(cfg.StateFile)
	if err != nil {
		return nil, err
	}
	return &PeerWitness{cfg: cfg, cosigner: cosigner, self: self, state: state,
		originAt: strings.TrimSuffix(cfg.Origin, cfg.Instance),
		looked:   map[string]bool{}, skipped: map[string]tlog.Hash{}, refused: map[string]string{}, told: map[string]bool{}}, nil
}

// Run witnesses the peers at once and then every Interval until ctx ends.
func (w *PeerWitness) Run(ctx context.Context) {
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := w.Round(ctx); err != nil && ctx.Err() == nil && !w.told["round"] {
			w.told["round"] = true
			w.cfg.Logger.Warn("peer witness: cannot list the other instances' logs; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Round witnesses each peer log once. For each instance under "log/"
// other than this one, it finds the newest checkpoint and opens it with
// the trusted keys; checks that it extends the last checkpoint this
// gateway witnessed of that log (kept in the state file, else read back
// from this gateway's cosigned checkpoints in the store): never smaller,
// the same root at the same size, and, for a larger one, the new entries
// re-hashed or a consistency proof from the stored tiles. Then it stores
// the checkpoint with this gateway's cosignature appended at
// log/<this instance>/witnessed/<peer>/<size>, records it in the state
// file, and appends a witness entry to this gateway's own log. A peer
// that fails a check is refused: nothing is cosigned, and the refusal is
// logged and passed to OnRefused once. Round must not run concurrently
// with itself.
func (w *PeerWitness) Round(ctx context.Context) ([]PeerReport, error) {
	instances, err := ListSegments(ctx, w.cfg.Store, logRoot)
	if err != nil {
		return nil, fmt.Errorf("evidence: peer witness: %w", err)
	}
	delete(w.told, "round")
	var reports []PeerReport
	for _, inst := range instances {
		if inst == w.cfg.Instance || validInstance(inst) != nil {
			continue
		}
		rep := w.witness(ctx, inst)
		w.tell(rep)
		reports = append(reports, rep)
	}
	return reports, nil
}

// witness runs the checks of Round on one peer.
func (w *PeerWitness) witness(ctx context.Context, inst string) PeerReport {
	rep := PeerReport{Instance: inst, Origin: w.originAt + inst}
	last, known, err := w.last(ctx, inst, rep.Origin)
	if err != nil {
		return rep.failed(err)
	}
	rep.Witnessed = last.Size
	cp, action, err := w.newest(ctx, inst, rep.Origin, last, known)
	if err != nil {
		return rep.failed(err)
	}
	if rep.Action = action; action != "" {
		return rep
	}
	rep.Size = cp.Size
	only, err := w.extends(ctx, inst, last, cp)
	switch {
	case err != nil:
		return rep.failed(err)
	case cp.Size == last.Size:
		rep.Action = PeerUnchanged
	case only:
		rep.Action = PeerWitnessEntriesOnly
	default:
		if err := w.cosign(ctx, inst, cp); err != nil {
			return rep.failed(err)
		}
		rep.Action = PeerCosigned
	}
	return rep
}

// newest reads and opens a peer's newest checkpoint, or returns the
// action that ends the round for that peer: no checkpoint yet, or a log
// no trusted key signs. Errors wrap ErrPeerRefused for a log that lost
// its checkpoints or shows one that does not verify.
func (w *PeerWitness) newest(ctx context.Context, inst, origin string, last peerCheckpoint, known bool) (tlog.Checkpoint, string, error) {
	data, err := newestCheckpointOf(ctx, w.cfg.Store, inst, last.Size)
	switch {
	case err != nil:
		return tlog.Checkpoint{}, "", err
	case data == nil && known:
		return tlog.Checkpoint{}, "", refuse("%s: rolled back: the log has no checkpoint, and this gateway witnessed size %d", LogPrefix(inst), last.Size)
	case data == nil:
		return tlog.Checkpoint{}, PeerNoCheckpoint, nil
	}
	cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: w.cfg.TrustedKeys})
	switch {
	case errors.Is(err, tlog.ErrUnknownKey) && !known:
		return tlog.Checkpoint{}, PeerUntrusted, nil
	case err != nil:
		return tlog.Checkpoint{}, "", refuse("%s: newest checkpoint: %v", LogPrefix(inst), err)
	case cp.Origin != origin:
		return tlog.Checkpoint{}, "", refuse("%s: newest checkpoint is of the log %s", LogPrefix(inst), cp.Origin)
	case cp.Size == 0 && !known:
		return tlog.Checkpoint{}, PeerNoCheckpoint, nil
	}
	return cp, "", nil
}

// failed sets the report's outcome from err: a refusal, or a store that
// did not answer.
func (r PeerReport) failed(err error) PeerReport {
	r.Err, r.Action = err, PeerUnreachable
	if errors.Is(err, ErrPeerRefused) {
		r.Action = PeerRefused
	}
	return r
}

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPeerRefused, fmt.Sprintf(format, args...))
}

// last returns the last checkpoint of a peer this gateway witnessed: from
// the state file, or, for a peer it has no record of, from the newest of
// its own cosigned checkpoints of that peer in the store, which carry its
// cosignature and so cannot be forged (they can be deleted; then the
// peer's current checkpoint is trusted on first sight).
func (w *PeerWitness) last(ctx context.Context, inst, origin string) (peerCheckpoint, bool, error) {
	if c, ok := w.state.Peers[origin]; ok {
		return c, true, nil
	}
	if w.looked[origin] {
		return peerCheckpoint{}, false, nil
	}
	var newest string
	dir := LogPrefix(w.cfg.Instance) + peerCosignedDir + inst + "/"
	if err := w.cfg.Store.Walk(ctx, dir, func(key string) error { newest = key; return nil }); err != nil {
		return peerCheckpoint{}, false, storeFailed(err)
	}
	w.looked[origin] = true
	if newest == "" {
		return peerCheckpoint{}, false, nil
	}
	data, err := w.cfg.Store.Get(ctx, newest)
	if err != nil {
		return peerCheckpoint{}, false, storeFailed(err)
	}
	cp, err := tlog.OpenCheckpoint(data, tlog.CheckpointPolicy{LogKeys: w.cfg.TrustedKeys,
		Witnesses: []note.Verifier{w.self}, Threshold: 1})
	if err != nil || cp.Origin != origin {
		w.cfg.Logger.Warn("peer witness: a stored cosigned checkpoint does not verify; ignored", "key", newest, "err", err)
		return peerCheckpoint{}, false, nil
	}
	c := peerCheckpoint{Size: cp.Size, Root: cp.Root}
	w.state.Peers[origin] = c
	return c, true, nil
}

// extends checks that cp extends last, and reports whether the entries
// between them are all witness entries. Errors wrap ErrPeerRefused when
// it does not, and peerStoreError when the store did not answer.
func (w *PeerWitness) extends(ctx context.Context, inst string, last peerCheckpoint, cp tlog.Checkpoint) (bool, error) {
	at := LogPrefix(inst)
	switch {
	case cp.Size < last.Size:
		return false, refuse("%s: rolled back: its newest checkpoint has size %d, and this gateway witnessed size %d", at, cp.Size, last.Size)
	case cp.Size == last.Size && cp.Root != last.Root:
		return false, refuse("%s: forked: at size %d its root is not the one this gateway witnessed", at, cp.Size)
	case cp.Size == last.Size || last.Size == 0:
		return false, nil
	case w.skipped[cp.Origin] == cp.Root:
		return true, nil
	}
	read := peerReader(w.cfg.Store, inst)
	if cp.Size-last.Size > maxPeerReplay {
		hashes, err := tlog.ConsistencyProof(ctx, last.Size, cp.Size, read)
		if err == nil {
			err = proof.VerifyConsistency(rfc6962.DefaultHasher, last.Size, cp.Size, hashSlices(hashes), last.Root[:], cp.Root[:])
		}
		return false, notExtending(at, last.Size, cp.Size, err)
	}
	only, err := replay(ctx, read, last, cp)
	if err == nil && only {
		w.skipped[cp.Origin] = cp.Root
	}
	return only, notExtending(at, last.Size, cp.Size, err)
}

// notExtending turns a failed check into a refusal, unless the store
// failed to answer.
func notExtending(at string, from, to uint64, err error) error {
	var se *peerStoreError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return refuse("%s: forked or rewritten: its checkpoint of size %d does not extend the one of size %d this gateway witnessed: %v", at, to, from, err)
}

// replay rebuilds the peer's tree at the size witnessed from its stored
// tiles, checks it against the witnessed root, appends the entries up to
// cp and checks cp's root: the entries are then known to be the peer's.
func replay(ctx context.Context, read tlog.ReadFunc, last peerCheckpoint, cp tlog.Checkpoint) (bool, error) {
	tree, err := tlog.RestoreTree(ctx, last.Size, read)
	if err != nil {
		return false, err
	}
	if tree.Root() != last.Root {
		return false, fmt.Errorf("its tiles at size %d do not hash to the root witnessed", last.Size)
	}
	entries, err := readEntries(ctx, read, last.Size, cp.Size)
	if err != nil {
		return false, err
	}
	only := true
	for _, e := range entries {
		if err := tree.Append(e); err != nil {
			return false, err
		}
		parsed, err := tlog.ParseEntry(e)
		only = only && err == nil && parsed.Kind == tlog.KindWitness
	}
	if tree.Root() != cp.Root {
		return false, fmt.Errorf("its entries %d to %d do not hash to the root of its checkpoint", last.Size, cp.Size)
	}
	return only, nil
}

// readEntries reads the entries from index from up to size to out of the
// entry bundles of a log of size to.
func readEntries(ctx context.Context, read tlog.ReadFunc, from, to uint64) ([][]byte, error) {
	var out [][]byte
	for b := from / layout.EntryBundleWidth; b*layout.EntryBundleWidth < to; b++ {
		width := layout.PartialTileSize(0, b, to)
		data, err := read(ctx, layout.EntriesPath(b, width))
		if err != nil {
			return nil, err
		}
		n := int(width)
		if n == 0 {
			n = layout.EntryBundleWidth
		}
		entries, err := tlog.ParseBundle(data, n)
		if err != nil {
			return nil, err
		}
		start := b * layout.EntryBundleWidth
		out = append(out, entries[max(from, start)-start:]...)
	}
	return out, nil
}

// cosign stores cp with this gateway's cosignature, remembers it, and
// logs it.
func (w *PeerWitness) cosign(ctx context.Context, inst string, cp tlog.Checkpoint) error {
	entry, err := tlog.Entry{Kind: tlog.KindWitness, PeerOrigin: cp.Origin, PeerSize: cp.Size, PeerRoot: cp.Root,
		Gateway: w.cfg.Gateway}.Marshal()
	if err != nil {
		return err
	}
	cosigned, err := tlog.AppendCosignature(cp.Note, w.cosigner)
	if err != nil {
		return err
	}
	key := seqKey(LogPrefix(w.cfg.Instance)+peerCosignedDir+inst+"/", cp.Size)
	if err := w.cfg.Store.Put(ctx, key, cosigned); err != nil && !errors.Is(err, ErrExist) {
		return storeFailed(err)
	}
	delete(w.skipped, cp.Origin)
	w.state.Peers[cp.Origin] = peerCheckpoint{Size: cp.Size, Root: cp.Root}
	if err := w.state.save(w.cfg.StateFile); err != nil && !w.told["state"] {
		// The memory and the store still hold it: witnessing goes on.
		w.told["state"] = true
		w.cfg.Logger.Warn("peer witness: cannot keep the state file; a restart will rely on the store's cosigned checkpoints", "err", err)
	}
	w.cfg.Log.Append(entry)
	return nil
}

// tell logs what a report calls for: each new refusal as an error (and
// OnRefused), a peer seen for the first time, an untrusted peer and an
// unreachable store once.
func (w *PeerWitness) tell(r PeerReport) {
	log := w.cfg.Logger.With("peer", r.Instance, "origin", r.Origin)
	switch r.Action {
	case PeerRefused:
		if w.refused[r.Origin] == r.Err.Error() {
			return
		}
		w.refused[r.Origin] = r.Err.Error()
		log.Error("evidence tampering: a peer's transparency log went backwards or forked; not cosigned",
			"size", r.Size, "witnessed", r.Witnessed, "err", r.Err)
		if w.cfg.OnRefused != nil {
			w.cfg.OnRefused(r.Instance, r.Err)
		}
	case PeerUntrusted, PeerUnreachable:
		if !w.told[r.Origin+" "+r.Action] {
			w.told[r.Origin+" "+r.Action] = true
			log.Warn("peer witness: "+r.Action+"; not witnessed (a peer's log is witnessed once its key is trusted)", "err", r.Err)
		}
	case PeerCosigned:
		delete(w.told, r.Origin+" "+PeerUnreachable)
		if r.Witnessed == 0 {
			log.Info("peer witness: witnessing a peer's transparency log", "size", r.Size)
		}
	}
}

// peerStoreError marks a failure of the store to answer, which is retried,
// from a finding about the peer's log, which is refused.
type peerStoreError struct{ err error }

func (e *peerStoreError) Error() string { return e.err.Error() }
func (e *peerStoreError) Unwrap() error { return e.err }

func storeFailed(err error) error { return &peerStoreError{err} }

// peerReader reads a peer's log resources; a resource that is gone is a
// finding (ErrNotExist), any other failure the store's.
func peerReader(s Reader, inst string) tlog.ReadFunc {
	return func(ctx context.Context, path string) ([]byte, error) {
		data, err := s.Get(ctx, LogPrefix(inst)+path)
		if err != nil && !errors.Is(err, ErrNotExist) {
			return nil, storeFailed(err)
		}
		return data, err
	}
}

func hashSlices(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}
