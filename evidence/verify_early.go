package evidence

import "context"

// Listing a store's requests and deriving its logs each take a pass over
// the store, and for a store at rest (an archive being audited or
// replayed) neither changes what the other finds. VerifyAll therefore
// derives the logs, as their heads stood before the requests were listed,
// while it lists them, on a copy of the verifier and of the logs' listing.
// The view still reads the logs as they stand after the listing: when any
// log's newest checkpoint has moved by then, the early derivation is
// thrown away and the logs are derived again, exactly as without it. So
// the result is the same either way; only the wall time differs.

// earlyLogs is a derivation of the logs running beside the listing of the
// requests.
type earlyLogs struct {
	heads  []string  // each log's newest checkpoint key, as derived
	sv     *verifier // the copy it derives with, whose verdicts take adopts
	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed.
	j    *logJoin
	reps []LogReport
	err  error
}

// deriveEarly starts deriving logs, as listed so far, on a copy of v. It
// returns nil when there is nothing to derive.
func (v *verifier) deriveEarly(ctx context.Context, tempDir string, logs []*logObjects) *earlyLogs {
	if len(logs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	sv := *v
	sv.views, sv.attested = nil, nil
	e := &earlyLogs{sv: &sv, cancel: cancel, done: make(chan struct{})}
	// refreshHeads moves each log's head once the requests are listed, so
	// the derivation works on copies; what else they hold is only read.
	copies := make([]*logObjects, len(logs))
	for i, lo := range logs {
		c := *lo
		copies[i] = &c
		e.heads = append(e.heads, lo.newest.Key)
	}
	go func() {
		defer close(e.done)
		j, err := newLogJoin(tempDir)
		if err != nil {
			e.err = err
			return
		}
		if e.reps, e.err = e.sv.deriveLogs(ctx, copies, j); e.err != nil {
			j.close()
			return
		}
		e.j = j
	}()
	return e
}

// take waits for the early derivation and, when it succeeded and every
// log's head is still the one it derived, adopts its verdicts into v and
// returns its join and reports. Otherwise it releases what the derivation
// holds and reports false: the caller derives the logs again.
func (e *earlyLogs) take(v *verifier, logs []*logObjects) (*logJoin, []LogReport, bool) {
	if e == nil {
		return nil, nil, false
	}
	<-e.done
	e.cancel()
	if e.err != nil || !e.sameHeads(logs) {
		e.discard()
		return nil, nil, false
	}
	v.views, v.attested = e.sv.views, e.sv.attested
	return e.j, e.reps, true
}

// sameHeads reports whether logs are the logs the derivation read, each
// with the newest checkpoint it derived.
func (e *earlyLogs) sameHeads(logs []*logObjects) bool {
	if len(logs) != len(e.heads) {
		return false
	}
	for i, lo := range logs {
		if lo.newest.Key != e.heads[i] {
			return false
		}
	}
	return true
}

// discard stops the derivation, waits for it, and releases its join. It
// may be called on nil and more than once.
func (e *earlyLogs) discard() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
	if e.j != nil {
		e.j.close()
		e.j = nil
	}
}
