package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

// holder is an epoch whose process may still be alive.
type holder struct {
	epoch     uint64
	rec       Record // only Instance and Epoch unless authentic
	authentic bool
}

func (h holder) describe() string {
	if h.authentic {
		return h.rec.describe()
	}
	return fmt.Sprintf("epoch %d, whose lease record failed authentication", h.epoch)
}

// view is what Acquire finds of the name's epochs.
type view struct {
	// highest is the newest epoch stored, sealed or not: the next one is
	// the first free.
	highest uint64
	// open are the epochs whose holder may be alive, newest first: down
	// to the newest one whose record opens, less those it closed.
	open []holder
}

// look lists the name's epochs.
func (l *Lease) look(ctx context.Context) (view, error) {
	keys, err := l.store.List(ctx, leaseDir(l.opts.Instance))
	if err != nil {
		return view{}, fmt.Errorf("lease: list epochs: %w", err)
	}
	var v view
	var epochs []uint64
	closedAt := map[uint64]bool{}
	for _, k := range keys {
		n, isClosed, ok := parseLeaseKey(l.opts.Instance, k)
		if !ok {
			continue
		}
		v.highest = max(v.highest, n)
		if isClosed {
			closedAt[n] = true
		} else {
			epochs = append(epochs, n)
		}
	}
	slices.Sort(epochs)
	slices.Reverse(epochs)
	for _, e := range epochs {
		h, err := l.holderOf(ctx, e)
		if err != nil {
			return view{}, err
		}
		if h.authentic && closedAt[e] && l.closedBy(ctx, h) {
			break // given up; every older holder was fenced by it
		}
		v.open = append(v.open, h)
		if h.authentic {
			break
		}
	}
	return v, nil
}

// holderOf reads epoch's lease record. One whose seal fails (reported) is
// kept as a holder that may be alive, without its details.
func (l *Lease) holderOf(ctx context.Context, epoch uint64) (holder, error) {
	r, err := l.readRecord(ctx, epoch)
	switch {
	case err == nil:
		return holder{epoch: epoch, rec: r, authentic: true}, nil
	case errors.Is(err, trust.ErrTampered) || errors.Is(err, evidence.ErrNotExist):
		return holder{epoch: epoch, rec: Record{Instance: l.opts.Instance, Epoch: epoch}}, nil
	}
	return holder{}, fmt.Errorf("lease: read epoch %d: %w", epoch, err)
}

// closedBy reports whether h's closed marker is stored and opens.
func (l *Lease) closedBy(ctx context.Context, h holder) bool {
	key := closedKey(l.opts.Instance, h.epoch)
	data, err := l.store.Get(ctx, key)
	if err != nil {
		return false
	}
	if err := parseClosed(l.opts.Keyring, l.opts.Instance, h.epoch, h.rec.Holder, data); err != nil {
		l.tampered(key, err)
		return false
	}
	return true
}

// watched is what watch saw of the open holders: their newest heartbeat
// when it began, and how long it waited without a newer one.
type watched struct {
	holders []holder
	last    []uint64
	waited  time.Duration
}

// watch waits until one of the open holders stores a heartbeat newer than
// its newest one at the start (it is alive: an InUseError), or until
// StaleBeats periods of the longer of its and this process's heartbeat
// pass without one (they are dead or paused).
func (l *Lease) watch(ctx context.Context, open []holder) (*watched, error) {
	if len(open) == 0 {
		return nil, nil
	}
	w := &watched{holders: open, last: make([]uint64, len(open))}
	stale := StaleBeats * l.opts.Heartbeat
	for i, h := range open {
		n, err := l.lastBeat(ctx, h.epoch)
		if err != nil {
			return nil, err
		}
		w.last[i] = n
		if h.authentic {
			stale = max(stale, StaleBeats*time.Duration(h.rec.HeartbeatMS)*time.Millisecond)
		}
	}
	l.opts.Logger.Info("instance lease: the lease on this instance name was not given up; watching its holder's heartbeat to tell whether it is alive",
		"instance", l.opts.Instance, "holder", open[0].describe(), "for", stale)
	start := time.Now()
	poll := min(max(l.opts.Heartbeat/4, 10*time.Millisecond), time.Second)
	for {
		for i, h := range open {
			alive, err := l.exists(ctx, beatKey(l.opts.Instance, h.epoch, w.last[i]+1))
			if err != nil {
				return nil, err
			}
			if alive {
				return nil, &InUseError{Instance: l.opts.Instance, Holder: h.rec, Authentic: h.authentic, Watched: time.Since(start)}
			}
		}
		left := stale - time.Since(start)
		if left <= 0 {
			w.waited = time.Since(start)
			return w, nil
		}
		if err := sleep(ctx, min(poll, left)); err != nil {
			return nil, err
		}
	}
}

// lastBeat finds the newest heartbeat of epoch: heartbeats are stored one
// after another from 1, so a galloping search over their existence finds
// it in twice the logarithm of their number of reads. 0 means none.
// Without the first (a lifecycle rule expired the oldest), it lists them.
func (l *Lease) lastBeat(ctx context.Context, epoch uint64) (uint64, error) {
	exists := func(n uint64) (bool, error) { return l.exists(ctx, beatKey(l.opts.Instance, epoch, n)) }
	if first, err := exists(1); err != nil || !first {
		return l.listLastBeat(ctx, epoch, err)
	}
	lo, hi := uint64(1), uint64(2)
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// listLastBeat is lastBeat by listing epoch's heartbeats.
func (l *Lease) listLastBeat(ctx context.Context, epoch uint64, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	dir := strings.TrimSuffix(beatKey(l.opts.Instance, epoch, 0), fmt.Sprintf("%0*d", epochDigits, 0))
	keys, err := l.store.List(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("lease: list heartbeats: %w", err)
	}
	var last uint64
	for _, k := range keys {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, dir), 10, 64); err == nil {
			last = max(last, n)
		}
	}
	return last, nil
}

func (l *Lease) exists(ctx context.Context, key string) (bool, error) {
	_, err := l.store.Get(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, evidence.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("lease: %w", err)
}

// take stores epoch's lease record create-only; an error wrapping
// evidence.ErrExist means another process took it first.
func (l *Lease) take(ctx context.Context, epoch uint64, open []holder) error {
	id, err := newHolderID()
	if err != nil {
		return err
	}
	rec := Record{Version: recordVersion, Instance: l.opts.Instance, Epoch: epoch, Holder: id, Host: l.opts.Host,
		PID: l.opts.PID, StartedAt: time.Now().UTC(), HeartbeatMS: l.opts.Heartbeat.Milliseconds()}
	if rec.HeartbeatMS == 0 {
		rec.HeartbeatMS = 1
	}
	if len(open) > 0 {
		rec.Previous = open[0].epoch
	}
	key := leaseKey(l.opts.Instance, epoch)
	data, err := seal(l.opts.Sealer, key, rec)
	if err != nil {
		return err
	}
	start := l.elapsed()
	if err := l.store.Put(ctx, key, data); err != nil {
		return fmt.Errorf("lease: take epoch %d: %w", epoch, err)
	}
	l.rec, l.next = rec, 1
	l.extend(start)
	l.opts.Logger.Info("instance lease taken: this process is the only writer of this instance name; "+
		"another process started with it refuses to start while this one lives",
		"instance", l.opts.Instance, "epoch", epoch, "heartbeat", l.opts.Heartbeat)
	return nil
}

// afterTakeover tells of a takeover and, if a holder stored a heartbeat
// while this process was taking its epoch, waits until that heartbeat's
// validity has passed: by then the holder has found the newer epoch and
// fenced itself, or it has stopped renewing.
func (l *Lease) afterTakeover(ctx context.Context, w *watched) error {
	if w == nil {
		return nil
	}
	l.opts.Logger.Warn("instance lease: took over instance name from a process whose heartbeat stopped; "+
		"if that process wakes up, it finds this newer epoch and fences itself",
		"instance", l.opts.Instance, "epoch", l.rec.Epoch, "from", w.holders[0].describe(), "heartbeat_stopped_for", w.waited.Round(time.Millisecond))
	for i, h := range w.holders {
		renewed, err := l.exists(ctx, beatKey(l.opts.Instance, h.epoch, w.last[i]+1))
		if err != nil {
			return err
		}
		if renewed {
			wait := StaleBeats * max(l.opts.Heartbeat, time.Duration(h.rec.HeartbeatMS)*time.Millisecond)
			l.opts.Logger.Warn("instance lease: the previous holder renewed as this process took over; waiting for it to fence itself",
				"instance", l.opts.Instance, "from", h.describe(), "wait", wait)
			return sleep(ctx, wait)
		}
	}
	return nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
