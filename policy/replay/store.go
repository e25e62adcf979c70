package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// DefaultConcurrency is how many requests Walk reads and verifies at once
// unless told otherwise: enough to hide an object store's latency, few
// enough that the artifacts held stay small.
const DefaultConcurrency = 16

// Filter selects the calls a walk replays; the zero value selects all.
type Filter struct {
	// Since and Until bound the time the gateway received the call:
	// Since <= received_at < Until; a zero bound is open.
	Since, Until time.Time
	// Caller and Tool, when set, select one caller's calls or one tool's.
	Caller, Tool string
}

func (f Filter) selects(c Call) bool {
	switch {
	case !f.Since.IsZero() && c.ReceivedAt.Before(f.Since):
		return false
	case !f.Until.IsZero() && !c.ReceivedAt.Before(f.Until):
		return false
	case f.Caller != "" && c.Caller != f.Caller:
		return false
	case f.Tool != "" && c.ToolID != f.Tool:
		return false
	}
	return true
}

// Walk verifies every request of s (see evidence.VerifyAllRead) and calls
// fn with each call its verified evidence rebuilds that filter selects.
// A request that fails verification goes to unverified instead, and one
// whose records cannot be rebuilt (no manifest yet, no decision, a gap)
// to skipped with the reason; neither is filtered unless its records were
// read and name a caller, tool and time the filter leaves out: a record
// that cannot be trusted or read cannot be told apart by its fields. Requests
// are visited one at a time, as VerifyAll visits them, so memory stays
// flat however many the store holds.
//
// opts.Concurrency requests are read and verified at once (0 means
// DefaultConcurrency), and reported in order.
func Walk(ctx context.Context, s evidence.Reader, opts evidence.VerifyOptions, filter Filter,
	fn func(Call) error, skipped func(id, why string), unverified func(evidence.VerifyReport)) error {
	return walk(ctx, s, opts, filter, nil, sink{
		add: func(_ evidence.VerifyReport, c Call, _ Outcome) error { return fn(c) },
		skip: func(rep evidence.VerifyReport, why string) error {
			skipped(rep.RequestID, why)
			return nil
		},
		unverified: func(rep evidence.VerifyReport) error {
			unverified(rep)
			return nil
		},
	})
}

// sink takes what a walk finds of each request, with the request's
// report: a call decided again (or selected, when the walk has no work),
// a call not replayable and why, a request that fails verification.
type sink struct {
	add        func(evidence.VerifyReport, Call, Outcome) error
	skip       func(evidence.VerifyReport, string) error
	unverified func(evidence.VerifyReport) error
}

// step is what a verifying goroutine made of one request: the call its
// records rebuild and, when work was given and the filter selects the
// call, what work made of it.
type step struct {
	c       Call
	err     error
	o       Outcome
	workErr error
}

// walk is Walk running work on each selected call in the goroutine that
// verified it, beside the others in flight, and handing its outcome to
// out in order: the decisions spread over the cores the verification
// uses. work runs before the logs are judged, so its outcome is thrown
// away when the final report fails: out.add sees only verified calls.
func walk(ctx context.Context, s evidence.Reader, opts evidence.VerifyOptions, filter Filter, work func(Call) (Outcome, error), out sink) error {
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	prepare := func(rep evidence.VerifyReport, got evidence.Verified) step {
		c, err := readCall(rep, got)
		st := step{c: c, err: err}
		if err == nil && work != nil && filter.selects(c) {
			st.o, st.workErr = work(c)
		}
		return st
	}
	return evidence.VerifyAllPrepared(ctx, s, opts, prepare, func(rep evidence.VerifyReport, st step) error {
		if rep.Failed() {
			return out.unverified(rep)
		}
		c, err := st.c, st.err
		if c.RequestID != rep.RequestID && err == nil {
			// Only a report prepare never saw comes without its call;
			// such a report always fails, so this is a broken promise.
			return fmt.Errorf("replay: request %q: verified, yet never read", rep.RequestID)
		}
		var nr *NotReplayable
		switch {
		case errors.As(err, &nr) && (c.Caller == "" || filter.selects(c)):
			return out.skip(rep, nr.Why)
		case err != nil && nr == nil:
			return err
		case err != nil, !filter.selects(c):
			return nil
		case st.workErr != nil:
			return st.workErr
		}
		return out.add(rep, c, st.o)
	})
}

// readCall rebuilds the call of a verified request from the bytes its
// verification read: its last decided attempt, the decision that stood.
// (An attempt that asked for approval records no history facts; the
// attempt that used the approval does, and policyWord reads the policy's
// own word back from it.)
func readCall(rep evidence.VerifyReport, got evidence.Verified) (Call, error) {
	id := rep.RequestID
	m, ok := got.Manifest()
	if !ok || rep.Outcome == "" {
		return Call{}, notReplayable("not finished (%s): no manifest vouches for its records yet", rep.Verdict())
	}
	decisionKey := ""
	for _, a := range rep.Attempts {
		if a.Decided {
			decisionKey = evidence.AttemptKey(id, a.Number, evidence.ArtifactPolicyDecision)
		}
	}
	if decisionKey == "" {
		return Call{}, notReplayable("no policy decision on record (outcome %s)", rep.Outcome)
	}
	decision, okD := got.Get(decisionKey)
	request, okR := got.Get(evidence.Key(id, evidence.ArtifactRequest))
	if !okD || !okR {
		return Call{}, notReplayable("the manifest does not vouch for %s and %s", evidence.ArtifactRequest, decisionKey)
	}
	if d, ok := got.Decision(decisionKey); ok {
		// The verification decoded the decision by the same rules.
		return parseCall(id, request, d, m.Redactions)
	}
	return ParseCall(id, request, decision, m.Redactions)
}

// Replay walks s and replays every selected call with r into a new
// report, listing the calls in log order (see order.go).
func Replay(ctx context.Context, s evidence.Reader, opts evidence.VerifyOptions, filter Filter, r *Replayer) (*Report, error) {
	work := func(c Call) (Outcome, error) { return r.Replay(ctx, c) }
	return inLogOrder(ctx, opts, func(opts evidence.VerifyOptions, out sink) error {
		return walk(ctx, s, opts, filter, work, out)
	})
}

// Shadow walks s and reports, for every selected call a shadow set
// decided, how the shadow set's decision differs from the enforcing
// set's, in log order; the calls no shadow set decided are counted in
// NoShadow.
func Shadow(ctx context.Context, s evidence.Reader, opts evidence.VerifyOptions, filter Filter) (*Report, error) {
	var noShadow int
	rep, err := inLogOrder(ctx, opts, func(opts evidence.VerifyOptions, out sink) error {
		add := out.add
		out.add = func(rep evidence.VerifyReport, c Call, _ Outcome) error {
			o, ok := ShadowOutcome(c)
			if !ok {
				noShadow++
				return nil
			}
			return add(rep, c, o)
		}
		return walk(ctx, s, opts, filter, nil, out)
	})
	rep.NoShadow = noShadow
	return rep, err
}
