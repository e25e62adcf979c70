package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/toolgate/toolgate/evidence"
)

// Checker recomputes, from a caller's slots, the history facts a decision
// recorded: it implements evidence.HistoryChecker for `evidence verify`.
// Every slot up to the one the decision read (or claimed) must be present,
// authentic and follow from the one before it (its state is the previous
// state plus its call); the facts recomputed from the slot read must be
// the ones recorded, and a claimed slot must hold the decision's own call.
// So a deleted call, an edited or reordered history and a decision whose
// recorded facts were changed are each reported.
//
// It remembers per caller how far the chain is checked, and a bounded
// number of records, so that verifying a whole store reads each slot about
// once. It is safe for concurrent use.
type Checker struct {
	mu      sync.Mutex
	checked map[string]uint64
	records map[string]*Record
}

// maxCheckedRecords bounds the records a Checker keeps; past it they are
// dropped and read again when needed.
const maxCheckedRecords = 8192

// NewChecker returns an empty Checker.
func NewChecker() *Checker {
	return &Checker{checked: map[string]uint64{}, records: map[string]*Record{}}
}

// checkRun is one CheckHistory call's store access.
type checkRun struct {
	c    *Checker
	ctx  context.Context
	s    evidence.Reader
	open func(key string, data []byte) ([]byte, error)
}

// errBroken is a problem found in the history, not a failure to read it.
type errBroken struct{ msg string }

func (e *errBroken) Error() string { return e.msg }

func broken(format string, args ...any) error { return &errBroken{fmt.Sprintf(format, args...)} }

// CheckHistory checks decision d of request req against the caller's
// slots in s, opened with open. It returns the problems found; an error
// only when the store fails.
func (c *Checker) CheckHistory(ctx context.Context, s evidence.Reader, open func(key string, data []byte) ([]byte, error),
	req evidence.RequestRecord, d evidence.DecisionRecord) ([]string, error) {
	h := d.History
	if h == nil {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	run := &checkRun{c: c, ctx: ctx, s: s, open: open}
	problems, err := run.check(req, d, h)
	var b *errBroken
	if errors.As(err, &b) {
		return append(problems, "history: "+b.msg), nil
	}
	return problems, err
}

func (r *checkRun) check(req evidence.RequestRecord, d evidence.DecisionRecord, h *evidence.DecisionHistory) ([]string, error) {
	if h.Claimed != 0 && h.Claimed != h.Slot+1 {
		return nil, broken("the decision read slot %d but claims slot %d", h.Slot, h.Claimed)
	}
	if err := r.chain(d.Caller, max(h.Slot, h.Claimed)); err != nil {
		return nil, err
	}
	var latest *Record
	var session SessionState
	if h.Slot > 0 {
		var err error
		if latest, err = r.record(d.Caller, h.Slot); err != nil {
			return nil, err
		}
		if session, err = r.sessionAt(latest, req.Ctx.RunID); err != nil {
			return nil, err
		}
	}
	at := h.ReadAt
	if at.IsZero() {
		at = d.DecidedAt
	}
	want := historyOf(latest, session, d.ToolID, at)
	var problems []string
	differ := func(name string, got, want any) {
		problems = append(problems, fmt.Sprintf("history: the decision records %s %v, but slot %d of the caller's history gives %v",
			name, got, h.Slot, want))
	}
	if h.Calls != want.Calls {
		differ("calls", h.Calls, want.Calls)
	}
	if h.ToolCalls != want.ToolCalls {
		differ("tool_calls", h.ToolCalls, want.ToolCalls)
	}
	if !slices.Equal(sortedUnique(h.Labels), want.Labels) {
		differ("labels", h.Labels, want.Labels)
	}
	if h.CallsLastMinute != want.CallsLastMinute {
		differ("calls_last_minute", h.CallsLastMinute, want.CallsLastMinute)
	}
	if h.ToolCallsLastMinute != want.ToolCallsLastMinute {
		differ("tool_calls_last_minute", h.ToolCallsLastMinute, want.ToolCallsLastMinute)
	}
	if h.Claimed > 0 {
		p, err := r.claimedBy(req, d, h)
		if err != nil {
			return nil, err
		}
		problems = append(problems, p...)
	}
	return problems, nil
}

// claimedBy checks that the slot d claimed holds d's call.
func (r *checkRun) claimedBy(req evidence.RequestRecord, d evidence.DecisionRecord, h *evidence.DecisionHistory) ([]string, error) {
	rec, err := r.record(d.Caller, h.Claimed)
	if err != nil {
		return nil, err
	}
	if rec.RequestID != d.RequestID || rec.Tool != d.ToolID || rec.RunID != req.Ctx.RunID ||
		!slices.Equal(rec.Labels, sortedUnique(h.LabelsAdded)) || !slices.Equal(rec.CallerLabels, sortedUnique(h.CallerLabelsAdded)) {
		return []string{fmt.Sprintf("history: slot %d, which the decision claims, holds request %q (tool %q, run %q, labels %v, caller labels %v), not this call",
			h.Claimed, rec.RequestID, rec.Tool, rec.RunID, rec.Labels, rec.CallerLabels)}, nil
	}
	return nil, nil
}

// chain checks caller's slots from the last one checked up to n: each
// present, authentic, and the state after the one before it plus its own
// call.
func (r *checkRun) chain(caller string, n uint64) error {
	for k := r.c.checked[caller] + 1; k <= n; k++ {
		rec, err := r.record(caller, k)
		if err != nil {
			return err
		}
		var prev *Record
		var session SessionState
		if k > 1 {
			if prev, err = r.record(caller, k-1); err != nil {
				return err
			}
			if session, err = r.sessionAt(prev, rec.RunID); err != nil {
				return err
			}
		}
		want := next(prev, session, Call{Caller: caller, RunID: rec.RunID, RequestID: rec.RequestID, Tool: rec.Tool},
			Added{Labels: rec.Labels, CallerLabels: rec.CallerLabels}, rec.Time)
		if !sameRecord(want, *rec) {
			return broken("%s: its state is not the state of slot %d plus its call (request %q): the history was edited or reordered",
				SlotKey(caller, k), k-1, rec.RequestID)
		}
		r.c.checked[caller] = k
	}
	return nil
}

// sameRecord compares two records as stored.
func sameRecord(a, b Record) bool {
	ea, errA := encode(a)
	eb, errB := encode(b)
	return errA == nil && errB == nil && bytes.Equal(ea, eb)
}

// sessionAt is the state of run's session as of rec, read as Ledger.session
// reads it.
func (r *checkRun) sessionAt(rec *Record, run string) (SessionState, error) {
	slot, ok := rec.Sessions[SessionID(run)]
	switch {
	case !ok:
		return SessionState{}, nil
	case slot == rec.Slot:
		return rec.Session, nil
	case slot > rec.Slot:
		return SessionState{}, broken("slot %d points to a later slot %d", rec.Slot, slot)
	}
	s, err := r.record(rec.Caller, slot)
	if err != nil {
		return SessionState{}, err
	}
	if s.RunID != run {
		return SessionState{}, broken("slot %d, which slot %d names as run %q's latest, is a call of run %q", slot, rec.Slot, run, s.RunID)
	}
	return s.Session, nil
}

// record returns caller's slot n, opened and decoded; a missing or
// unauthentic one is errBroken.
func (r *checkRun) record(caller string, n uint64) (*Record, error) {
	key := SlotKey(caller, n)
	if rec, ok := r.c.records[key]; ok {
		return rec, nil
	}
	data, err := r.s.Get(r.ctx, key)
	switch {
	case errors.Is(err, evidence.ErrNotExist):
		return nil, broken("%s: missing: a call of the caller's history was deleted", key)
	case err != nil:
		return nil, fmt.Errorf("history: read %s: %w", key, err)
	}
	if r.open != nil {
		if data, err = r.open(key, data); err != nil {
			return nil, broken("%s: failed authentication: %v", key, err)
		}
	}
	rec, err := decode(data, caller, n)
	if err != nil {
		return nil, broken("%s: %v", key, err)
	}
	if len(r.c.records) >= maxCheckedRecords {
		clear(r.c.records)
	}
	r.c.records[key] = rec
	return rec, nil
}

// Checker is what evidence verify calls.
var _ evidence.HistoryChecker = (*Checker)(nil)
