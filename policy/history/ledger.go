package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy"
)

// Sealer seals a record stored under key so that every replica can check
// it; Opener checks such a seal and returns the record without it. Both
// are nil when the gateway seals nothing.
type (
	Sealer func(key string, data []byte) ([]byte, error)
	Opener func(key string, data []byte) ([]byte, error)
)

// Options configure a Ledger.
type Options struct {
	Store evidence.Store
	Seal  Sealer
	Open  Opener
	// Now is time.Now by default.
	Now func() time.Time
	// MaxCallers bounds the callers whose latest record is kept in
	// memory; 4096 by default. Past it, a caller's state is read again.
	MaxCallers int
}

// Ledger decides calls on their history and records the ones it lets
// through. It is safe for concurrent use.
type Ledger struct {
	store      evidence.Store
	seal       Sealer
	open       Opener
	now        func() time.Time
	maxCallers int

	mu      sync.Mutex
	callers map[string]*callerState
}

// callerState is what a replica knows of one caller. Its mutex orders the
// caller's decisions on this replica, so that they do not race each other
// for the same slot.
type callerState struct {
	mu sync.Mutex
	// known: latest is the newest record this replica has seen (nil with
	// known true: the caller has no record yet).
	known  bool
	latest *Record
	// fresh: no claim has failed since latest was read or written, so it
	// is decided on without reading the store (the next claim checks it).
	fresh bool
	// sessions caches session states read from older slots, by slot.
	sessions map[uint64]SessionState
}

// New returns a Ledger over o.Store.
func New(o Options) *Ledger {
	l := &Ledger{store: o.Store, seal: o.Seal, open: o.Open, now: o.Now, maxCallers: o.MaxCallers,
		callers: map[string]*callerState{}}
	if l.now == nil {
		l.now = time.Now
	}
	if l.maxCallers <= 0 {
		l.maxCallers = 4096
	}
	return l
}

// Facts are the history a decision saw: the facts Cedar was given and the
// caller's slot they were read at (0: the caller had no history).
type Facts struct {
	History policy.History
	Slot    uint64
	// At is the instant the rate facts were counted at.
	At time.Time
}

// Outcome is what a decision made of Facts: whether the call is to be
// dispatched (and so claims the next slot) and what it adds.
type Outcome struct {
	Dispatch bool
	Added    Added
	// Decision is the policy decision behind the outcome, handed back in
	// Result.Outcome. decide also runs on hypothetical later facts (to
	// find a retry hint), so a caller must take the decision that stood
	// from the Result, never from the last run of decide.
	Decision policy.Decision
}

// Result is the end of Decide: the facts of the decision that stood, and,
// when it claimed one, the slot the call holds (0 otherwise).
type Result struct {
	Facts   Facts
	Claimed uint64
	// RetryAfter, for a call not let through, is how long until the
	// passing of time alone (calls leaving the rate window) would let it
	// through; 0 when time alone never would.
	RetryAfter time.Duration
	// Outcome is what decide made of Facts: the outcome that stood.
	Outcome Outcome
}

// maxRounds bounds how often one call decides again after losing its slot
// to another replica.
const maxRounds = 1000

// ErrContended is returned when a call lost its slot maxRounds times.
var ErrContended = errors.New("history: too many concurrent calls of this caller on other replicas")

// Decide runs decide on the history of c until its outcome stands: a call
// not to be dispatched stands at once; one to be dispatched stands once it
// claims the slot after the one its facts were read at. When another
// replica took that slot first, the newer history is read and decide runs
// again, so every outcome that stands saw every call claimed before it.
// decide must be a pure function of the facts (it may run several times).
func (l *Ledger) Decide(ctx context.Context, c Call, decide func(Facts) Outcome) (Result, error) {
	st := l.caller(c.Caller)
	st.mu.Lock()
	defer st.mu.Unlock()
	for range maxRounds {
		if err := l.refresh(ctx, st, c.Caller); err != nil {
			return Result{}, err
		}
		facts, session, err := l.facts(ctx, st, c)
		if err != nil {
			return Result{}, err
		}
		out := decide(facts)
		if !out.Dispatch {
			return Result{Facts: facts, Outcome: out, RetryAfter: l.retryAfter(st.latest, session, c.Tool, decide)}, nil
		}
		rec := next(st.latest, session, c, out.Added, l.now())
		claimed, err := l.claim(ctx, rec)
		if err != nil {
			// The write may have landed: read the slot before trusting
			// the cache again.
			st.fresh = false
			return Result{}, err
		}
		if claimed {
			st.latest = &rec
			return Result{Facts: facts, Claimed: rec.Slot, Outcome: out}, nil
		}
		st.fresh = false
		// Another replica claimed the slot: its record is read by the
		// next refresh, which starts from the slot that was lost.
	}
	return Result{}, ErrContended
}

// caller returns the state of caller, creating it. Past maxCallers an
// arbitrary other caller's state is dropped: it is read again when needed.
func (l *Ledger) caller(name string) *callerState {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.callers[name]
	if ok {
		return st
	}
	if len(l.callers) >= l.maxCallers {
		for k := range l.callers {
			delete(l.callers, k)
			break
		}
	}
	st = &callerState{sessions: map[uint64]SessionState{}}
	l.callers[name] = st
	return st
}

// refresh brings st to the caller's latest record. On the fast path (st is
// fresh) it reads nothing. A replica that knows a record reads forward
// from it; one that knows nothing lists the caller's slots first.
func (l *Ledger) refresh(ctx context.Context, st *callerState, caller string) error {
	if st.fresh {
		return nil
	}
	if !st.known {
		keys, err := l.store.List(ctx, CallerKey(caller))
		if err != nil {
			return fmt.Errorf("history: list %s: %w", CallerKey(caller), err)
		}
		st.known = true
		for i := len(keys) - 1; i >= 0; i-- {
			n, ok := SlotOf(keys[i])
			if !ok || keys[i] != SlotKey(caller, n) {
				continue
			}
			r, err := l.read(ctx, caller, n)
			if err != nil {
				st.known = false
				return err
			}
			st.latest = r
			break
		}
	}
	if err := l.forward(ctx, st, caller); err != nil {
		return err
	}
	st.fresh = true
	return nil
}

// forward reads the slots after st's latest record until a free one: after
// a lost claim, and after a list, which may already be old.
func (l *Ledger) forward(ctx context.Context, st *callerState, caller string) error {
	for {
		n := uint64(1)
		if st.latest != nil {
			n = st.latest.Slot + 1
		}
		r, err := l.read(ctx, caller, n)
		if errors.Is(err, evidence.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st.latest = r
	}
}

// read returns caller's record at slot n, checked.
func (l *Ledger) read(ctx context.Context, caller string, n uint64) (*Record, error) {
	key := SlotKey(caller, n)
	data, err := l.store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("history: read %s: %w", key, err)
	}
	if l.open != nil {
		if data, err = l.open(key, data); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
	}
	return decode(data, caller, n)
}

// facts computes the history of c from st's latest record, and returns
// the state of c's session beside it.
func (l *Ledger) facts(ctx context.Context, st *callerState, c Call) (Facts, SessionState, error) {
	f := Facts{At: l.now()}
	var session SessionState
	if r := st.latest; r != nil {
		f.Slot = r.Slot
		var err error
		if session, err = l.session(ctx, st, c); err != nil {
			return Facts{}, SessionState{}, err
		}
	}
	f.History = historyOf(st.latest, session, c.Tool, f.At)
	return f, session, nil
}

// session returns the state of c's session as of st's latest record.
func (l *Ledger) session(ctx context.Context, st *callerState, c Call) (SessionState, error) {
	slot, ok := st.latest.Sessions[SessionID(c.RunID)]
	switch {
	case !ok:
		return SessionState{}, nil
	case slot == st.latest.Slot:
		return st.latest.Session, nil
	}
	if s, ok := st.sessions[slot]; ok {
		return s, nil
	}
	r, err := l.read(ctx, c.Caller, slot)
	if err != nil {
		return SessionState{}, err
	}
	if r.RunID != c.RunID {
		return SessionState{}, fmt.Errorf("history: slot %d of caller %q is not a call of run %q", slot, c.Caller, c.RunID)
	}
	if len(st.sessions) >= maxSessions {
		clear(st.sessions)
	}
	st.sessions[slot] = r.Session
	return r.Session, nil
}

// historyOf builds the Cedar facts of a call of tool at now, given the
// caller's latest record and the call's session state.
func historyOf(latest *Record, session SessionState, tool string, now time.Time) policy.History {
	h := policy.History{Calls: session.Calls, ToolCalls: session.Tools[tool], Labels: slices.Clone(session.Labels)}
	if latest == nil {
		return h
	}
	h.Labels = sortedUnique(append(h.Labels, latest.CallerLabelSet...))
	since := now.Unix() - int64(Window/time.Second)
	for _, b := range latest.Recent {
		if b.Unix <= since {
			continue
		}
		h.CallsLastMinute += b.Count
		if b.Tool == tool {
			h.ToolCallsLastMinute += b.Count
		}
	}
	return h
}

// claim stores rec at its slot, create-only. false: another replica's
// record is already there.
func (l *Ledger) claim(ctx context.Context, rec Record) (bool, error) {
	key := SlotKey(rec.Caller, rec.Slot)
	data, err := encode(rec)
	if err != nil {
		return false, fmt.Errorf("history: %w", err)
	}
	if l.seal != nil {
		if data, err = l.seal(key, data); err != nil {
			return false, fmt.Errorf("history: seal %s: %w", key, err)
		}
	}
	err = l.store.Put(ctx, key, data)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, evidence.ErrExist):
		return false, nil
	}
	return false, fmt.Errorf("history: claim %s: %w", key, err)
}

// retryAfter returns how long until decide lets the call through on the
// same history with older calls gone from the rate window, or 0. The facts
// change only when a second's bucket leaves the window, so only those
// instants are tried.
func (l *Ledger) retryAfter(latest *Record, session SessionState, tool string, decide func(Facts) Outcome) time.Duration {
	if latest == nil {
		return 0
	}
	now := l.now()
	since := now.Unix() - int64(Window/time.Second)
	var tried int64
	for _, b := range latest.Recent {
		if b.Unix <= since || b.Unix == tried {
			continue
		}
		tried = b.Unix
		at := time.Unix(b.Unix, 0).Add(Window + time.Second)
		f := Facts{Slot: latest.Slot, History: historyOf(latest, session, tool, at)}
		if decide(f).Dispatch {
			return at.Sub(now).Round(time.Second)
		}
	}
	return 0
}
