package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

// DefaultHeartbeat is how often a holder renews its lease unless
// Options.Heartbeat says otherwise.
const DefaultHeartbeat = 5 * time.Second

// StaleBeats is how many heartbeat periods without one make a holder dead
// to a newcomer.
const StaleBeats = 3

// maxTries bounds how many epochs Acquire tries when other processes take
// the same name's lease at the same moment.
const maxTries = 8

// maxSkips bounds how many heartbeat slots a renewal skips that someone
// else filled.
const maxSkips = 4

// ErrInUse is wrapped by the error Acquire returns when a live process
// holds the instance name (see InUseError).
var ErrInUse = errors.New("lease: the instance name is in use")

// ErrFenced is wrapped by the errors of a Lease once a newer process holds
// its instance name, and after Close.
var ErrFenced = errors.New("lease: fenced")

// ErrLapsed is wrapped by Held's error when the lease was not renewed in
// time and cannot be now: whether a newer process holds the name is
// unknown.
var ErrLapsed = errors.New("lease: not renewed in time")

// Options configure Acquire.
type Options struct {
	// Instance is the instance name the lease is on.
	Instance string
	// Heartbeat is the renewal period; 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// Sealer signs the lease's records, and Keyring checks those of other
	// processes; both nil for a gateway that does not sign.
	Sealer  *trust.Sealer
	Keyring *trust.Keyring
	// Host and PID name this process in its lease record.
	Host string
	PID  int
	// Logger receives the lease's news; slog.Default when nil.
	Logger *slog.Logger
	// Tampered, if set, is told of every lease record whose seal fails.
	Tampered func(key string, err error)
}

// Lease is this process's hold on an instance name. It is safe for
// concurrent use.
type Lease struct {
	store evidence.Store
	opts  Options
	rec   Record
	// base anchors validUntil to the monotonic clock.
	base       time.Time
	validUntil atomic.Int64 // ns since base
	fenced     atomic.Pointer[error]
	fencedCh   chan struct{} // closed when a newer process fences this one
	// failedAt and failure are the last failed renewal's time (ns since
	// base) and error: Held does not retry sooner than a period after it,
	// so that calls during a store outage do not queue behind renewals.
	failedAt atomic.Int64
	failure  atomic.Pointer[error]

	// renew serialises renewals; next and pending are its.
	renew   sync.Mutex
	next    uint64
	pending []byte

	reportMu sync.Mutex
	reported map[string]bool
}

// InUseError is Acquire's error when a live process holds the name.
type InUseError struct {
	Instance string
	// Holder is the live holder's lease record; Authentic is false when
	// its seal failed (another gateway with this name and a key this one
	// does not trust, or a forged record).
	Holder    Record
	Authentic bool
	// Watched is how long this process watched before the holder's
	// heartbeat advanced.
	Watched time.Duration
}

func (e *InUseError) Error() string {
	who := "a live gateway process (" + e.Holder.describe() + ")"
	if !e.Authentic {
		who = fmt.Sprintf("a live process whose lease (epoch %d) failed authentication: another gateway with this name and a key this one does not trust, or a forged record", e.Holder.Epoch)
	}
	return fmt.Sprintf("instance name %q is in use by %s: its heartbeat advanced while this process watched for %v. "+
		"Two processes with one instance name would corrupt each other's evidence; stop that process, "+
		"or give this one another name (instance: in the configuration)",
		e.Instance, who, e.Watched.Round(time.Millisecond))
}

func (e *InUseError) Unwrap() error { return ErrInUse }

// Acquire takes the lease on o.Instance in s: at once when the name is
// free, after watching the holder's heartbeat for StaleBeats periods when
// it is not, or not at all (an error wrapping ErrInUse) when that holder
// is alive. The lease is renewed by Run.
func Acquire(ctx context.Context, s evidence.Store, o Options) (*Lease, error) {
	if err := evidenceKeyOK(o.Instance); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	l := &Lease{store: s, opts: o, base: time.Now(), fencedCh: make(chan struct{}), reported: map[string]bool{}}
	for range maxTries {
		v, err := l.look(ctx)
		if err != nil {
			return nil, err
		}
		w, err := l.watch(ctx, v.open)
		if err != nil {
			return nil, err
		}
		err = l.take(ctx, v.highest+1, v.open)
		if errors.Is(err, evidence.ErrExist) {
			continue // another process took that epoch: look again
		}
		if err != nil {
			return nil, err
		}
		if err := l.afterTakeover(ctx, w); err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("lease: instance %q: %d epochs taken by others at once", o.Instance, maxTries)
}

// Epoch is this process's epoch of the lease.
func (l *Lease) Epoch() uint64 { return l.rec.Epoch }

// Record is this process's lease record.
func (l *Lease) Record() Record { return l.rec }

// Heartbeat is the renewal period.
func (l *Lease) Heartbeat() time.Duration { return l.opts.Heartbeat }

// validity is how long a renewal keeps the lease: half a period less than
// a newcomer waits, so that clocks running at slightly different rates
// and a renewal's own scheduling do not let the two overlap.
func (l *Lease) validity() time.Duration { return StaleBeats*l.opts.Heartbeat - l.opts.Heartbeat/2 }

func (l *Lease) elapsed() int64 { return int64(time.Since(l.base)) }

// extend makes the lease valid for validity() from a renewal that started
// at start.
func (l *Lease) extend(start int64) {
	until := start + int64(l.validity())
	for {
		cur := l.validUntil.Load()
		if cur >= until || l.validUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// Err returns the error that fenced the lease, or nil. It does no I/O.
func (l *Lease) Err() error {
	if p := l.fenced.Load(); p != nil {
		return *p
	}
	return nil
}

// Fenced is closed when a newer process takes the name over (not when
// Close gives the lease up).
func (l *Lease) Fenced() <-chan struct{} { return l.fencedCh }

// Held returns nil while this process holds the lease. It costs an atomic
// load and a clock read while the lease is valid; once its validity has
// lapsed (a pause, or a store that refused renewals) it renews at once, so
// that a process waking up learns of a newer holder before it acts. The
// error wraps ErrFenced when a newer process holds the name, ErrLapsed
// when the renewal failed.
func (l *Lease) Held(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	if l.elapsed() < l.validUntil.Load() {
		return nil
	}
	l.renew.Lock()
	defer l.renew.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	if l.elapsed() < l.validUntil.Load() {
		return nil // renewed while this call waited
	}
	if p := l.failure.Load(); p != nil && l.elapsed()-l.failedAt.Load() < int64(l.opts.Heartbeat) {
		return *p
	}
	err := l.renewLocked(ctx)
	if err == nil || errors.Is(err, ErrFenced) {
		return err
	}
	err = fmt.Errorf("%w: instance %q: %w", ErrLapsed, l.opts.Instance, err)
	l.failedAt.Store(l.elapsed())
	l.failure.Store(&err)
	return err
}

// Confirm is Held, and then makes sure in the store that no newer process
// holds the name: the check before a write that only the holder may make
// (recovery's manifests).
func (l *Lease) Confirm(ctx context.Context) error {
	if err := l.Held(ctx); err != nil {
		return err
	}
	return l.checkNewer(ctx)
}

// Run renews the lease every heartbeat period until ctx ends or the lease
// is fenced.
func (l *Lease) Run(ctx context.Context) {
	t := time.NewTicker(l.opts.Heartbeat)
	defer t.Stop()
	var failing bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.tick(ctx)
		switch {
		case errors.Is(err, ErrFenced):
			return
		case err != nil && !failing && ctx.Err() == nil:
			failing = true
			l.opts.Logger.Warn("instance lease: renewal failed; retrying every heartbeat", "instance", l.opts.Instance,
				"epoch", l.rec.Epoch, "err", err)
		case err == nil && failing:
			failing = false
			l.opts.Logger.Info("instance lease: renewed again", "instance", l.opts.Instance, "epoch", l.rec.Epoch)
		}
	}
}

// tick is one renewal of Run, bounded by a heartbeat period.
func (l *Lease) tick(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.Heartbeat)
	defer cancel()
	l.renew.Lock()
	defer l.renew.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	return l.renewLocked(ctx)
}

// renewLocked stores the next heartbeat and then looks for a newer epoch;
// only when both succeed does the lease's validity extend, from the time
// the heartbeat's write began. The order matters: a newcomer that took
// over has stored its epoch before it last looked for this holder's
// heartbeat, so either this renewal finds the epoch, or the newcomer finds
// the heartbeat and waits out its validity.
func (l *Lease) renewLocked(ctx context.Context) error {
	start := l.elapsed()
	if err := l.beat(ctx); err != nil {
		return err
	}
	if err := l.checkNewer(ctx); err != nil {
		return err
	}
	l.extend(start)
	return nil
}

// beat stores the next heartbeat. A write whose outcome was unknown is
// retried with the same bytes, which then match; a slot someone else
// filled is reported and skipped.
func (l *Lease) beat(ctx context.Context) error {
	for range maxSkips {
		key := beatKey(l.opts.Instance, l.rec.Epoch, l.next)
		if l.pending == nil {
			data, err := seal(l.opts.Sealer, key, beat{Version: recordVersion, Instance: l.opts.Instance,
				Epoch: l.rec.Epoch, N: l.next, Holder: l.rec.Holder, At: time.Now().UTC()})
			if err != nil {
				return err
			}
			l.pending = data
		}
		err := l.store.Put(ctx, key, l.pending)
		if errors.Is(err, evidence.ErrExist) {
			if same, getErr := l.sameBytes(ctx, key, l.pending); getErr != nil {
				return getErr
			} else if !same {
				l.tampered(key, fmt.Errorf("%w: %s: a heartbeat of this process's epoch that it did not write", trust.ErrTampered, key))
				l.next, l.pending = l.next+1, nil
				continue
			}
			err = nil
		}
		if err != nil {
			return fmt.Errorf("lease: heartbeat: %w", err)
		}
		l.next, l.pending = l.next+1, nil
		return nil
	}
	return fmt.Errorf("lease: heartbeat: %d slots after %d filled by others", maxSkips, l.next)
}

func (l *Lease) sameBytes(ctx context.Context, key string, data []byte) (bool, error) {
	stored, err := l.store.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("lease: heartbeat: %w", err)
	}
	return string(stored) == string(data), nil
}

// checkNewer lists the name's epochs and fences the lease if there is one
// newer than its own, sealed or not: a forged epoch can stop this
// process, never make two write.
func (l *Lease) checkNewer(ctx context.Context) error {
	keys, err := l.store.List(ctx, leaseDir(l.opts.Instance))
	if err != nil {
		return fmt.Errorf("lease: list epochs: %w", err)
	}
	var newer uint64
	for _, k := range keys {
		if n, isClosed, ok := parseLeaseKey(l.opts.Instance, k); ok && !isClosed && n > l.rec.Epoch {
			newer = max(newer, n)
		}
	}
	if newer == 0 {
		return nil
	}
	return l.fence(ctx, newer)
}

// fence records, once, that epoch newer holds the name now.
func (l *Lease) fence(ctx context.Context, newer uint64) error {
	who := fmt.Sprintf("epoch %d", newer)
	if r, err := l.readRecord(ctx, newer); err == nil {
		who = r.describe()
	}
	err := fmt.Errorf("%w: instance name %q was taken over by a newer gateway process (%s); "+
		"this process (epoch %d) takes no more calls and writes nothing for requests it did not start: send calls to the newer one",
		ErrFenced, l.opts.Instance, who, l.rec.Epoch)
	if l.fenced.CompareAndSwap(nil, &err) {
		close(l.fencedCh)
		l.opts.Logger.Error("instance lease: fenced: a newer process holds this instance name; calls are refused and recovery stops",
			"instance", l.opts.Instance, "epoch", l.rec.Epoch, "newer", who)
	}
	return l.Err()
}

// readRecord reads and opens epoch's lease record, reporting a seal that
// fails.
func (l *Lease) readRecord(ctx context.Context, epoch uint64) (Record, error) {
	key := leaseKey(l.opts.Instance, epoch)
	data, err := l.store.Get(ctx, key)
	if err != nil {
		return Record{}, err
	}
	r, err := ParseRecord(l.opts.Keyring, l.opts.Instance, epoch, data)
	if err != nil {
		l.tampered(key, err)
	}
	return r, err
}

// tampered reports a lease record whose seal failed, once per key.
func (l *Lease) tampered(key string, err error) {
	l.reportMu.Lock()
	seen := l.reported[key]
	l.reported[key] = true
	l.reportMu.Unlock()
	if seen {
		return
	}
	if l.opts.Tampered != nil {
		l.opts.Tampered(key, err)
		return
	}
	l.opts.Logger.Error("evidence tampering: an instance lease record failed authentication", "key", key, "err", err)
}

// Close gives the lease up: its closed marker lets the next process with
// this name start without waiting. Stop Run first. A fenced lease has
// nothing to give up.
func (l *Lease) Close(ctx context.Context) error {
	l.renew.Lock()
	defer l.renew.Unlock()
	if l.Err() != nil {
		return nil
	}
	key := closedKey(l.opts.Instance, l.rec.Epoch)
	data, err := seal(l.opts.Sealer, key, closed{Version: recordVersion, Instance: l.opts.Instance, Epoch: l.rec.Epoch,
		Holder: l.rec.Holder, ClosedAt: time.Now().UTC(), Beats: l.next - 1})
	if err != nil {
		return err
	}
	closedErr := fmt.Errorf("%w: the lease on instance %q was given up at shutdown", ErrFenced, l.opts.Instance)
	l.fenced.CompareAndSwap(nil, &closedErr)
	if err := l.store.Put(ctx, key, data); err != nil && !errors.Is(err, evidence.ErrExist) {
		return fmt.Errorf("lease: close: %w", err)
	}
	return nil
}

// newHolderID returns a random id for this process's lease.
func newHolderID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lease: holder id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
