package evidence

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

// A live bucket changes while VerifyAll reads it: a gateway claims,
// finishes and logs requests all along. Judging each request from
// whatever the store holds at the moment it is read mixes two moments
// (a request listed without its manifest, then read with it) and turns
// honest progress into findings. So VerifyAll first takes a view: the
// spool's keys, the logs' heads, one listing of every request's keys with
// their storage times, then the logs' heads again. Every later decision is
// made from that view: a key the listing lacks is not read, a log entry
// sequenced after the listing began cannot make an artifact the listing
// lacks "missing", and how recently an artifact was stored is judged
// against the view's time.

// view is what one VerifyAll judges.
type view struct {
	// spool holds each request's keys in the spool, listed before the
	// store: an artifact that leaves the spool for the store meanwhile is
	// then in one listing or the other. spoolIDs are its requests, in
	// ascending order of their prefix.
	spool    map[string][]string
	spoolIDs []string
	// listing holds every key under "requests/" with its storage time,
	// on disk past spillRecords keys, so memory stays flat.
	listing *spillSorter
	// logs are the logs listed before the requests, each with its newest
	// checkpoint listed after them (see refreshHeads).
	logs  []*logObjects
	clock viewClock
}

// takeView lists the spool, the logs, the requests and the logs' heads
// again, in that order (see view).
//
// listed, when not nil, is called with the logs as soon as they are
// listed, before the requests are: the logs may be read meanwhile (see
// earlyLogs). It must not change them.
func (v *verifier) takeView(ctx context.Context, opts VerifyOptions, listed func([]*logObjects)) (*view, error) {
	vw := &view{spool: map[string][]string{}}
	if opts.Spool != nil {
		err := WalkRequests(ctx, opts.Spool, func(id string, keys []string) error {
			vw.spool[id] = append([]string(nil), keys...)
			vw.spoolIDs = append(vw.spoolIDs, id)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("evidence: verify: spool: %w", err)
		}
	}
	var err error
	if vw.logs, err = listLogs(ctx, v.store); err != nil {
		return nil, fmt.Errorf("evidence: verify: logs: %w", err)
	}
	for _, lo := range vw.logs {
		lo.sizeBefore, _ = parseSeqKey(lo.newest.Key, checkpointDir)
	}
	if listed != nil {
		listed(vw.logs)
	}
	tempDir := opts.TempDir
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	if vw.listing, err = newSpillSorter(tempDir, spillRecords); err != nil {
		return nil, err
	}
	newest, err := vw.list(ctx, v.store)
	if err != nil {
		vw.close()
		return nil, err
	}
	if err := refreshHeads(ctx, v.store, vw.logs); err != nil {
		vw.close()
		return nil, fmt.Errorf("evidence: verify: logs: %w", err)
	}
	for _, lo := range vw.logs {
		newest = later(newest, lo.newest.ModTime)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	vw.clock = newViewClock(newest, now(), logGrace(opts))
	return vw, nil
}

// list takes the listing of every request's keys and returns the latest
// storage time in it.
func (vw *view) list(ctx context.Context, s Reader) (time.Time, error) {
	var newest time.Time
	var buf []byte // add copies it
	err := WalkInfo(ctx, s, requestsRoot, func(ki KeyInfo) error {
		newest = later(newest, ki.ModTime)
		buf = appendInfo(buf[:0], ki)
		return vw.listing.add(ki.Key, buf)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("evidence: verify: %w", err)
	}
	return newest, nil
}

// refreshHeads finds each log's newest checkpoint again, once the
// requests are listed, so that the logs are read as they stand after the
// listing: a request listed has had until then to be sequenced. Only the
// checkpoints are listed again, not the tiles. A log first stored after
// the first listing of the logs is not part of the view.
func refreshHeads(ctx context.Context, r Reader, logs []*logObjects) error {
	for _, lo := range logs {
		err := WalkInfo(ctx, r, LogPrefix(lo.instance)+checkpointDir, func(ki KeyInfo) error {
			lo.newest = ki // the walk is in key order: sizes ascend
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// walkRequests replays the listing as walkRequestInfos walks a store.
func (vw *view) walkRequests(ctx context.Context, fn func(id string, infos []KeyInfo) error, stray func(key string) error) error {
	return groupRequests(func(visit func(KeyInfo) error) error {
		return vw.listing.sorted(ctx, func(key string, value []byte) error {
			ki, err := decodeInfo(key, value)
			if err != nil {
				return err
			}
			return visit(ki)
		})
	}, fn, stray)
}

func (vw *view) close() {
	if vw.listing != nil {
		// Only temporary files are left behind if this fails.
		_ = vw.listing.close()
	}
}

// appendInfo appends to b a listed key's size and storage time: the size,
// then, when the store told it, the time in Unix nanoseconds, as varints.
func appendInfo(b []byte, ki KeyInfo) []byte {
	b = binary.AppendVarint(b, ki.Size)
	if !ki.ModTime.IsZero() {
		b = binary.AppendVarint(b, ki.ModTime.UnixNano())
	}
	return b
}

func decodeInfo(key string, b []byte) (KeyInfo, error) {
	ki := KeyInfo{Key: key}
	size, n := binary.Varint(b)
	if n <= 0 {
		return ki, fmt.Errorf("evidence: verify: damaged listing record of %q", key)
	}
	ki.Size, b = size, b[n:]
	if len(b) == 0 {
		return ki, nil
	}
	nanos, n := binary.Varint(b)
	if n != len(b) {
		return ki, fmt.Errorf("evidence: verify: damaged listing record of %q", key)
	}
	ki.ModTime = time.Unix(0, nanos)
	return ki, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// logGrace is the grace VerifyAll judges by.
func logGrace(opts VerifyOptions) time.Duration {
	if opts.LogGrace > 0 {
		return opts.LogGrace
	}
	return DefaultLogGrace
}

// LogGraceFor returns how long after its artifact is stored a log entry
// may still be on its way into the log of a gateway that sequences every
// interval and bounds each store operation by opTimeout: up to an interval
// before its batch is formed, one more if that batch's write fails once,
// and an operation each for the batch, the tiles it completes and the
// checkpoint. It is never less than DefaultLogGrace.
func LogGraceFor(interval, opTimeout time.Duration) time.Duration {
	return max(DefaultLogGrace, 2*interval+3*opTimeout)
}

// viewClock judges how recently an artifact was stored, by the store's
// clock, against the time the view was taken.
//
// Why the store's clock: every storage time in a listing is the store's
// (S3's LastModified, a file's mtime), and so is the newest checkpoint's,
// which a gateway under load stores every checkpoint interval. Comparing
// them with one another is immune to any skew between the store and the
// auditor, where comparing them with the auditor's clock alone would call
// every fresh request of a live bucket stale as soon as the auditor's
// clock ran a grace ahead of the store's. So the view's time is the latest
// storage time in the view (the requests' listing and the logs' heads,
// read after it), which on a live bucket is the store's "now".
//
// Why the auditor's clock still bounds it: on a quiet bucket the latest
// storage time is old, and an object put behind the gateway's back would
// be the newest in the view and look fresh for ever. The view's time is
// therefore kept within one grace of the auditor's clock: an artifact no
// log records counts as on its way for at most two graces (by the
// auditor's clock) after it was stored, and the stores' and the auditor's
// clocks may disagree by up to a grace without changing any verdict.
//
// Storage times are whatever the store says: whoever can write the
// bucket can also store an object again, or set a file's mtime, to make
// it look fresh. That makes it pending, never ok, and only while it keeps
// doing so.
type viewClock struct {
	at    time.Time // the view's time, on the store's clock
	grace time.Duration
}

// newViewClock returns the clock of a view whose latest storage time is
// newest, taken when the auditor's clock read now.
func newViewClock(newest, now time.Time, grace time.Duration) viewClock {
	at := newest
	if lo := now.Add(-grace); at.Before(lo) {
		at = lo // a quiet bucket, or a store whose clock lags
	}
	if hi := now.Add(grace); at.After(hi) {
		at = hi // a store whose clock runs ahead, or a forged time
	}
	return viewClock{at: at, grace: grace}
}

// recent reports whether t, a storage time, is within the grace of the
// view's time: its log entries, or its manifest, may still be on their
// way. A time the store did not tell (zero) is never recent.
func (c viewClock) recent(t time.Time) bool {
	return !t.IsZero() && t.After(c.at.Add(-c.grace)) && !t.After(c.at.Add(c.grace))
}
