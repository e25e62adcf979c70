// Package recovery keeps what a gateway process knows of the requests it
// runs and those it left without a manifest (Notes), and when a request
// another process left counts as abandoned (Limits). The store is the
// truth about a request; the notes only tell the gateway's recovery which
// requests it may finalise without waiting, and which approvals its expiry
// sweep ends. It never imports the gateway.
package recovery

import (
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
)

// DefaultSweepInterval is how often recovery revisits the requests this
// gateway left unfinished, unless Options.Interval says otherwise.
const DefaultSweepInterval = time.Minute

// unboundedRunTime stands in for the run time of a driver that states no
// bound (see drivers.Bounded).
const unboundedRunTime = time.Hour

// Options tune how a gateway finalises the requests left without a
// manifest (see the gateway's Recover).
type Options struct {
	// Interval between two visits of the requests this gateway left
	// unfinished; 0 means DefaultSweepInterval.
	Interval time.Duration
	// InterruptedAfter is how long after its dispatch a request of this
	// gateway's instance without a response is recorded as interrupted.
	// 0: the longest run time of the gateway's drivers, plus six store
	// operations.
	InterruptedAfter time.Duration
	// OpTimeout is the store's deadline for one operation, which bounds
	// how long an attempt can stay open before dispatch (four of them)
	// and a response can wait for its manifest (two); 0 means
	// evidence.DefaultOpTimeout.
	OpTimeout time.Duration
}

// Limits are Options with every default applied.
type Limits struct {
	// Interval is the time between two visits of the requests left
	// unfinished.
	Interval time.Duration
	// InterruptedAfter: a dispatched request without a response is
	// recorded as interrupted this long after its last activity.
	InterruptedAfter time.Duration
	// OpenAfter: an attempt still open (or a claim whose write was
	// unsure) counts as abandoned this long after its last activity.
	OpenAfter time.Duration
	// RespondedAfter: a stored response waits this long for the manifest
	// its call writes before recovery writes it.
	RespondedAfter time.Duration
}

// Limits applies o's defaults; ds are the gateway's drivers, whose
// longest run time bounds InterruptedAfter by default.
func (o Options) Limits(ds map[string]drivers.Driver) Limits {
	op := o.OpTimeout
	if op <= 0 {
		op = evidence.DefaultOpTimeout
	}
	l := Limits{Interval: o.Interval, InterruptedAfter: o.InterruptedAfter, OpenAfter: 4 * op, RespondedAfter: 2 * op}
	if l.Interval <= 0 {
		l.Interval = DefaultSweepInterval
	}
	if l.InterruptedAfter <= 0 {
		longest := time.Duration(0)
		for _, d := range ds {
			run := unboundedRunTime
			if b, ok := d.(drivers.Bounded); ok {
				run = b.MaxRunTime()
			}
			longest = max(longest, run)
		}
		l.InterruptedAfter = longest + 6*op
	}
	return l
}

// Unfinished is what this process knows of a request it left without a
// manifest.
type Unfinished struct {
	// Told, when set, is what the caller of a dispatched request was told
	// when neither its response nor its failure could be stored: the
	// failed manifest recovery writes says it.
	Told string
	// NotDispatched, when set, numbers an attempt this process proved not
	// dispatched after writing its marker, but could not close: recovery
	// closes it, so that a retry can run the call.
	NotDispatched int
	Reason        string
	// Aged is set for a request found unfinished by a sweep rather than
	// left so by this process: it is revisited, but judged by its age.
	Aged bool
	// ClaimUnsure, when set, is when this process's write of the claim
	// failed with an outcome it could not tell: the claim may still land
	// after a sweep's listing missed it (a store that took the write and
	// answered too late), so its absence is not final until OpenAfter.
	ClaimUnsure time.Time
}

// Notes keep the request ids this process is running and those it left
// unfinished. Neither is the truth about a request (the store is);
// they only tell recovery which requests it may finalise without waiting.
type Notes struct {
	mu       sync.Mutex
	inFlight map[string]int
	left     map[string]Unfinished
	// approvals maps the requests held for approval that this process
	// asked for or found at start-up to when their approval was asked
	// for and when it expires: the sweep ends them denied once it has,
	// without walking the store.
	approvals map[string]watchedApproval
	// decided are the watched approvals a person has answered: no longer
	// pending, though still watched until their request ends.
	decided map[string]struct{}
}

// NewNotes returns empty notes.
func NewNotes() *Notes {
	return &Notes{inFlight: map[string]int{}, left: map[string]Unfinished{}, approvals: map[string]watchedApproval{},
		decided: map[string]struct{}{}}
}

// ApprovalDecided notes that a person answered a watched approval.
func (r *Notes) ApprovalDecided(requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.approvals[requestID]; ok {
		r.decided[requestID] = struct{}{}
	}
}

// watchedApproval is when a watched approval was asked for and when it
// expires (zero: due now).
type watchedApproval struct{ requested, expires time.Time }

// PendingApprovals counts the watched approvals still waiting for a
// person at now (not answered, not expired), and how long the one asked
// for first has waited.
func (r *Notes) PendingApprovals(now time.Time) (n int, oldestAge time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, a := range r.approvals {
		if _, done := r.decided[id]; done || !now.Before(a.expires) {
			continue
		}
		n++
		oldestAge = max(oldestAge, now.Sub(a.requested))
	}
	return n, oldestAge
}

// WatchApproval notes a request whose approval was asked for at
// requested, held until expires.
func (r *Notes) WatchApproval(requestID string, requested, expires time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.approvals[requestID] = watchedApproval{requested: requested, expires: expires}
}

// UnwatchApproval forgets a request whose approval has ended.
func (r *Notes) UnwatchApproval(requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.approvals, requestID)
	delete(r.decided, requestID)
}

// ExpiredApprovals returns the watched requests whose approval expired by
// now, sorted.
func (r *Notes) ExpiredApprovals(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, a := range r.approvals {
		if !now.Before(a.expires) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Enter notes a call of requestID in flight, until leave.
func (r *Notes) Enter(requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight[requestID]++
}

// Leave ends what enter began.
func (r *Notes) Leave(requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[requestID]--; r.inFlight[requestID] <= 0 {
		delete(r.inFlight, requestID)
	}
}

// OthersRunning reports whether more than self calls of requestID are in
// flight in this process.
func (r *Notes) OthersRunning(requestID string, self int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight[requestID] > self
}

// LeftUnfinished notes a request whose call ended without its manifest,
// and what recovery must know of it. A note adds to an earlier one, never
// erases it: two calls of one id (a retry beside the owner) may both leave
// it, and what the owner proved must not be lost.
func (r *Notes) LeftUnfinished(requestID string, u Unfinished) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.left[requestID]; ok {
		u.Aged = u.Aged && prev.Aged
		if u.Told == "" {
			u.Told = prev.Told
		}
		if u.NotDispatched == 0 {
			u.NotDispatched, u.Reason = prev.NotDispatched, prev.Reason
		}
		if u.ClaimUnsure.IsZero() {
			u.ClaimUnsure = prev.ClaimUnsure
		}
	}
	r.left[requestID] = u
}

// Lookup returns the note of requestID, if any.
func (r *Notes) Lookup(requestID string) (Unfinished, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.left[requestID]
	return u, ok
}

// Settled forgets the note of a request recovery finalised.
func (r *Notes) Settled(requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.left, requestID)
}

// Pending returns the noted requests, sorted.
func (r *Notes) Pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.left))
	for id := range r.left {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Stats counts what one pass of recovery did.
type Stats struct {
	// Examined counts the requests without a manifest it looked at.
	Examined int
	// RolledForward: a stored response got its manifest.
	RolledForward int
	// Closed: an abandoned attempt was closed as not dispatched.
	Closed int
	// Interrupted: a dispatched request got an interrupted (or failed)
	// manifest.
	Interrupted int
	// Waiting: requests left for a later pass (too young, in flight, or
	// with artifacts still in the spool).
	Waiting int
	// Expired: requests whose approval expired were ended denied.
	Expired int
}
