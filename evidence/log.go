package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
)

// The transparency log's keys. Each gateway instance keeps its own log
// under LogPrefix(instance); see DESIGN.md and docs/auditors/evidence.md for the layout.
const (
	logRoot       = "log/"
	bucketIDKey   = logRoot + "bucket-id"
	leaseDir      = "lease/"
	batchDir      = "batch/"
	checkpointDir = "checkpoint/"
	closedSuffix  = ".closed"
	cosignedDir   = "cosigned/"
)

// ErrLogFenced is returned (wrapped) once another process has taken over
// this instance's log: a newer gateway started with the same instance name.
var ErrLogFenced = errors.New("evidence: log taken over by a newer process with the same instance name")

// errBadBatch marks a stored batch that is not one this log could have
// written: a fork, or an object planted in the bucket.
var errBadBatch = errors.New("evidence: log: malformed or foreign batch")

// ErrLogTampered is returned (wrapped, beside trust.ErrTampered) once the
// writer has found a log record in the store that it cannot authenticate:
// a batch, checkpoint or closed lease not sealed or signed by a trusted
// key. The writer then signs nothing more and Ready refuses new calls, so
// no checkpoint covers what the gateway did not write.
var ErrLogTampered = errors.New("evidence: log: a stored log record failed authentication; this gateway signs no more checkpoints and refuses new calls")

// ErrLogBacklog is returned (wrapped) by Ready while more entries wait to
// be sequenced than LogConfig.MaxPending allows, which happens only when
// the store keeps refusing the log's writes.
var ErrLogBacklog = errors.New("evidence: log backlog full")

// LogPrefix returns the prefix under which an instance's log is stored.
func LogPrefix(instance string) string { return logRoot + instance + "/" }

// seqKey formats a size or an epoch so that keys sort in numeric order.
func seqKey(dir string, n uint64) string { return fmt.Sprintf("%s%020d", dir, n) }

// LogConfig configures a LogWriter.
type LogConfig struct {
	// Instance names the gateway; its log lives under LogPrefix(Instance).
	Instance string
	// Origin is the log's name in its checkpoints.
	Origin string
	// Gateway names this gateway in the completions it logs:
	// "toolgate/<version>@<instance>".
	Gateway string
	// SignCheckpoint returns the signed checkpoint of a tree size and root.
	SignCheckpoint func(size uint64, root tlog.Hash) ([]byte, error)
	// Interval is how often queued entries are sequenced and a checkpoint
	// published: the most a checkpoint trails an entry.
	Interval time.Duration
	// OpTimeout bounds the store operations; catch-up uses it to bound how
	// long an entry can wait between its artifact's write and its batch.
	OpTimeout time.Duration
	// MaxPending is how many entries may wait to be sequenced before Ready
	// refuses new calls.
	MaxPending int
	// Sealer seals the batches, leases and closed-lease records this
	// writer stores (Ed25519: a batch is sealed once, however many entries
	// it carries).
	Sealer *trust.Sealer
	// Trusted opens what the writer reads back: batches, closed leases and
	// checkpoints not sealed or signed by one of its keys are tampering,
	// never integrated and never covered by a checkpoint. Catch-up also
	// logs only the artifacts it can authenticate with it.
	Trusted *trust.Keyring
	// StateFile, when set, is where the newest checkpoint this writer
	// signed is kept outside the store (see OpenLog): a store behind it or
	// forked from it is refused. Empty keeps no state.
	StateFile string
	// Tampered, when set, is called for every record the writer refused
	// because it failed authentication, after the writer has logged it.
	Tampered func(err error)
	// Logger receives the log's own problems.
	Logger *slog.Logger
}

// lease is one process's claim on an instance's log.
type lease struct {
	Epoch     uint64    `json:"epoch"`
	Origin    string    `json:"origin"`
	StartedAt time.Time `json:"started_at"`
}

// LogWriter appends entries to one gateway instance's transparency log in
// a create-only Store. Append only queues; Run sequences the queue in
// batches every Interval and publishes tiles and a signed checkpoint, so
// no store round trip is added to a call.
type LogWriter struct {
	store  Store
	cfg    LogConfig
	prefix string
	epoch  uint64
	// seal seals a record stored under key: cfg.Sealer.Sign.
	seal func(key string, body []byte) ([]byte, error)
	// encode encodes a batch stored under key: encodeBatch (a benchmark
	// swaps it to measure what sealing costs).
	encode func(l *LogWriter, key string, b batch) ([]byte, error)
	// legacy: the state file is missing (the first start after an
	// upgrade, see checkHistory), so unsealed records of the older
	// version are expected and not reported as tampering.
	legacy bool
	// previousOpen: the previous process did not close its lease, so it
	// may have died with entries queued, or may still be running.
	previousOpen bool
	// recheckAt, when set, is when to look once more for the previous
	// process's lost entries (see recheck); caught holds what that found
	// until adoptCaught queues it, and seen, meanwhile, every entry
	// sequenced.
	recheckAt time.Time
	caught    [][]byte
	caughtAt  time.Time
	seen      map[string]bool

	mu      sync.Mutex
	queue   [][]byte
	stored  []storedArtifact // artifacts whose entries Flush builds
	pending int              // entries taken by the sequencer but not yet in a stored batch
	unsure  []uncertainPut
	fenced  error // set once, never cleared

	// Owned by the sequencer (OpenLog, then Run's goroutine).
	tree      *tlog.Tree
	unwritten []tlog.Object // derived resources not yet stored
	published uint64        // size of the newest stored checkpoint
	newest    []byte        // the newest stored checkpoint, as signed
	state     uint64        // size of the checkpoint in cfg.StateFile
	stateErr  bool          // the last write of cfg.StateFile failed
	next      [][]byte      // entries of the batch being retried
}

// Origin is the log's name in its checkpoints.
func (l *LogWriter) Origin() string { return l.cfg.Origin }

// Epoch is this process's lease on the instance's log.
func (l *LogWriter) Epoch() uint64 { return l.epoch }

// Size is the number of entries sequenced so far. Call it only from the
// goroutine that runs the log, or after Close.
func (l *LogWriter) Size() uint64 { return l.tree.Size() }

// Ready reports why new calls must not start: the log was fenced or its
// backlog is full. A call whose entries the log cannot take must not run,
// or it would run unlogged.
func (l *LogWriter) Ready() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced != nil {
		return l.fenced
	}
	if n := len(l.queue) + len(l.stored) + l.pending + len(l.unsure); n >= l.cfg.MaxPending {
		return fmt.Errorf("%w: %d entries wait to be sequenced", ErrLogBacklog, n)
	}
	return nil
}

// Append queues an entry for the next batch. It never blocks on the store;
// Ready says whether a caller should start work that will need entries.
func (l *LogWriter) Append(entry []byte) {
	l.mu.Lock()
	l.queue = append(l.queue, entry)
	l.mu.Unlock()
}

// storedArtifact is a logged artifact, stored, whose entry is yet to be
// built.
type storedArtifact struct {
	kind string
	data []byte
}

// appendArtifact queues the entry of a stored artifact. Building it is
// left to Flush, so that a call pays no more than this append.
func (l *LogWriter) appendArtifact(kind string, data []byte) {
	l.mu.Lock()
	l.stored = append(l.stored, storedArtifact{kind, data})
	l.mu.Unlock()
}

// buildEntries turns the stored artifacts queued so far into entries at
// the end of the queue. The gateway writes every artifact it logs, so one
// without an entry is a bug to shout about, not to stop the log for.
func (l *LogWriter) buildEntries() {
	l.mu.Lock()
	stored := l.stored
	l.stored = nil
	l.mu.Unlock()
	for _, a := range stored {
		e, err := logEntry(a.kind, a.data, l.cfg.Gateway)
		if err != nil {
			l.cfg.Logger.Error("transparency log: stored artifact without an entry", "kind", a.kind, "err", err)
			continue
		}
		l.Append(e)
	}
}

// Run sequences queued entries every Interval until ctx ends. A batch the
// store refuses is retried, with whatever queued meanwhile, at the next
// tick; only a fence stops the log.
func (l *LogWriter) Run(ctx context.Context) {
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	var failingSince, warned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			err := l.Flush(ctx)
			switch {
			case err == nil && !failingSince.IsZero():
				l.cfg.Logger.Info("transparency log: batches stored again", "origin", l.cfg.Origin, "after", time.Since(failingSince).Round(time.Second))
				failingSince = time.Time{}
			case err != nil:
				if failingSince.IsZero() {
					failingSince = time.Now()
				}
				// Once, then every logWarnEvery: an outage of the store
				// must not flood the log with a line a second.
				if time.Since(warned) >= logWarnEvery {
					warned = time.Now()
					l.cfg.Logger.Warn("transparency log: batch not stored; retrying", "origin", l.cfg.Origin, "err", err)
				}
			}
			l.recheck(ctx)
		}
	}
}

// logWarnEvery is how often Run repeats its warning while the store keeps
// refusing the log's batches.
const logWarnEvery = 30 * time.Second

// recheck runs the catch-up once more when its time has come. A previous
// process that did not close its lease may still be running, with the
// same instance name: it keeps logging into free slots until it finds
// this process's first batch in its way, and the calls it ran in between
// lose their entries when it is fenced. By one Interval and two
// OpTimeouts after that first batch it has been fenced, and its
// artifacts are in the catch-up's window.
func (l *LogWriter) recheck(ctx context.Context) {
	l.adoptCaught()
	if l.recheckAt.IsZero() || time.Now().Before(l.recheckAt) {
		return
	}
	l.seen = map[string]bool{}
	found, err := l.catchUp(ctx)
	if err != nil {
		l.seen = nil
		l.cfg.Logger.Warn("transparency log: second catch-up failed; retrying", "origin", l.cfg.Origin, "err", err)
		return
	}
	l.recheckAt = time.Time{}
	l.caught, l.caughtAt = found, time.Now()
	if len(found) > 0 {
		l.cfg.Logger.Warn("transparency log: found entries of a process that ran with the same instance name",
			"origin", l.cfg.Origin, "entries", len(found))
	}
}

// Close sequences what is queued and, if everything is stored, marks this
// process's lease closed, which tells the next process that it need not
// look for entries this one lost. Call it after Run has returned.
func (l *LogWriter) Close(ctx context.Context) error {
	if err := l.Flush(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	left := len(l.queue) + len(l.stored) + l.pending + len(l.unsure)
	l.mu.Unlock()
	if left > 0 || len(l.unwritten) > 0 {
		return fmt.Errorf("evidence: log %s: %d entries not sequenced at close", l.cfg.Origin, left)
	}
	root := l.tree.Root()
	key := seqKey(l.prefix+leaseDir, l.epoch) + closedSuffix
	data, err := json.Marshal(closedLease{Size: l.tree.Size(), Root: root[:]})
	if err == nil {
		data, err = l.seal(key, data)
	}
	if err != nil {
		return fmt.Errorf("evidence: log %s: closed lease: %w", l.cfg.Origin, err)
	}
	return l.put(ctx, key, data)
}

// closedLease is the record of a lease closed cleanly: the tree this
// process left, which the next one must find extended (see checkHistory).
type closedLease struct {
	Size uint64 `json:"size"`
	Root []byte `json:"root"`
}

// Flush stores the queued entries as one batch, then the tiles, bundles
// and checkpoint they lead to. Run calls it every Interval.
func (l *LogWriter) Flush(ctx context.Context) error {
	l.resolveUncertain(ctx)
	l.buildEntries()
	if err := l.writeUnwritten(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	if l.fenced != nil {
		l.mu.Unlock()
		return l.fenced
	}
	l.next = append(l.next, l.queue...)
	l.queue = nil
	l.pending = len(l.next)
	l.mu.Unlock()
	if len(l.next) == 0 {
		return nil
	}
	if err := l.sequence(ctx); err != nil {
		return err
	}
	return l.writeUnwritten(ctx)
}

// sequence stores l.next as the batch at the tree's size and integrates
// it. When the slot is taken, what took it decides: an earlier attempt of
// this process whose outcome was unknown (its entries are a prefix of
// l.next, which has grown since) is integrated and the rest retried; a
// batch of an older lease, a process that has not yet noticed it was
// replaced, is integrated and l.next retried in the next slot; a batch of
// a newer lease fences this process.
func (l *LogWriter) sequence(ctx context.Context) error {
	for len(l.next) > 0 {
		start := l.tree.Size()
		root := l.tree.Root()
		b := batch{Version: batchVersion, Origin: l.cfg.Origin, Epoch: l.epoch, Start: start, RootBefore: root[:], Entries: l.next}
		key := seqKey(l.prefix+batchDir, start)
		data, err := l.encode(l, key, b)
		if err != nil {
			return fmt.Errorf("evidence: log batch: %w", err)
		}
		err = l.store.Put(ctx, key, data)
		if err == nil {
			l.integrate(b)
			l.sequenced(len(b.Entries))
			if l.previousOpen {
				l.previousOpen = false
				l.recheckAt = time.Now().Add(l.cfg.Interval + 2*l.cfg.OpTimeout)
			}
			continue
		}
		if !errors.Is(err, ErrExist) {
			return err
		}
		theirs, err := l.readBatch(ctx, start)
		if errors.Is(err, trust.ErrTampered) {
			return l.fence(l.tampered(err))
		}
		if errors.Is(err, errBadBatch) {
			return l.fence(fmt.Errorf("%w: %v", ErrLogFenced, err))
		}
		if err != nil {
			return err
		}
		switch {
		case theirs.Epoch > l.epoch:
			return l.fence(fmt.Errorf("%w: batch %d was stored by epoch %d", ErrLogFenced, start, theirs.Epoch))
		case theirs.Epoch == l.epoch && !isPrefix(theirs.Entries, l.next):
			return l.fence(fmt.Errorf("%w: batch %d of this epoch holds entries this process never sequenced", ErrLogFenced, start))
		}
		l.integrate(theirs)
		if theirs.Epoch == l.epoch {
			l.sequenced(len(theirs.Entries))
		}
	}
	return nil
}

// sequenced drops the first n entries of l.next, now in a stored batch.
func (l *LogWriter) sequenced(n int) {
	l.mu.Lock()
	l.next = l.next[n:]
	l.pending = len(l.next)
	l.mu.Unlock()
}

func isPrefix(short, long [][]byte) bool {
	if len(short) > len(long) {
		return false
	}
	for i := range short {
		if !bytes.Equal(short[i], long[i]) {
			return false
		}
	}
	return true
}

func (l *LogWriter) fence(err error) error {
	l.mu.Lock()
	if l.fenced == nil {
		l.fenced = err
	}
	l.mu.Unlock()
	l.cfg.Logger.Error("transparency log: fenced; this gateway refuses new calls", "origin", l.cfg.Origin, "err", err)
	return err
}

// integrate appends a stored batch's entries to the tree and queues the
// resources they complete, then the partials and checkpoint of the new
// size, in the order a reader must find them: a checkpoint never refers to
// a tile that is not stored yet.
func (l *LogWriter) integrate(b batch) {
	for _, e := range b.Entries {
		if l.seen != nil {
			l.seen[string(e)] = true
		}
		// Entries are built by the gateway and bounded far below
		// tlog.MaxLeafSize; a batch read back was checked by readBatch.
		if err := l.tree.Append(e); err != nil {
			l.cfg.Logger.Error("transparency log: entry not integrated", "origin", l.cfg.Origin, "err", err)
		}
	}
	l.unwritten = append(l.unwritten, l.tree.TakeFull()...)
	l.unwritten = append(l.unwritten, l.tree.Partials()...)
	l.unwritten = append(l.unwritten, checkpointStep)
}

// checkpointStep, in LogWriter.unwritten, stands for the signed checkpoint
// of the tree's size at the time its turn comes.
var checkpointStep = tlog.Object{}

// writeUnwritten stores the derived resources in order, signing each
// checkpoint when its turn comes.
func (l *LogWriter) writeUnwritten(ctx context.Context) error {
	for len(l.unwritten) > 0 {
		o := l.unwritten[0]
		if o.Path == checkpointStep.Path {
			if err := l.publishCheckpoint(ctx); err != nil {
				return err
			}
		} else if err := l.put(ctx, l.prefix+o.Path, o.Data); err != nil {
			return err
		}
		l.unwritten = l.unwritten[1:]
	}
	return nil
}

func (l *LogWriter) publishCheckpoint(ctx context.Context) error {
	size := l.tree.Size()
	if size == l.published {
		return nil
	}
	cp, err := l.cfg.SignCheckpoint(size, l.tree.Root())
	if err != nil {
		return fmt.Errorf("evidence: log checkpoint: %w", err)
	}
	if err := l.put(ctx, seqKey(l.prefix+checkpointDir, size), cp); err != nil {
		return err
	}
	l.published, l.newest = size, cp
	l.keepState()
	return nil
}

// put stores a derived resource. Every resource is a pure function of the
// batches, so finding it stored with the same bytes is success; with
// different bytes the log has forked.
func (l *LogWriter) put(ctx context.Context, key string, data []byte) error {
	err := l.store.Put(ctx, key, data)
	if !errors.Is(err, ErrExist) {
		return err
	}
	stored, gerr := l.store.Get(ctx, key)
	if gerr != nil {
		return gerr
	}
	if !bytes.Equal(stored, data) {
		return l.fence(fmt.Errorf("%w: %s is stored with different bytes", ErrLogFenced, key))
	}
	return nil
}

// readBatch reads the batch stored at start, which must extend the tree
// when start is its size. A batch not sealed by a trusted key is
// tampering (trust.ErrTampered): it is never integrated.
func (l *LogWriter) readBatch(ctx context.Context, start uint64) (batch, error) {
	key := seqKey(l.prefix+batchDir, start)
	data, err := l.store.Get(ctx, key)
	if err != nil {
		return batch{}, err
	}
	b, err := l.openBatch(key, data)
	if err != nil {
		return batch{}, err
	}
	root := l.tree.Root()
	switch {
	case b.Start != start:
		return batch{}, fmt.Errorf("%w: %s: not a batch of %s at %d", errBadBatch, key, l.cfg.Origin, start)
	case start == l.tree.Size() && !bytes.Equal(b.RootBefore, root[:]):
		return batch{}, fmt.Errorf("%w: %s: does not extend the log's tree", errBadBatch, key)
	}
	return b, nil
}

// tampered reports a log record that failed authentication: a log line,
// the Tampered callback, and the error Ready returns from now on.
func (l *LogWriter) tampered(err error) error {
	l.cfg.Logger.Error("evidence tampering: a stored log record failed authentication and was not acted on",
		"record", "log", "origin", l.cfg.Origin, "err", err)
	if l.cfg.Tampered != nil {
		l.cfg.Tampered(err)
	}
	return fmt.Errorf("%w: %w", ErrLogTampered, err)
}

// parseSeqKey returns the number at the end of a lease, batch or
// checkpoint key.
func parseSeqKey(key, dir string) (uint64, bool) {
	i := strings.LastIndex(key, dir)
	if i < 0 {
		return 0, false
	}
	s := key[i+len(dir):]
	if len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}
