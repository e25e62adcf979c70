package evidence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// attemptArtifacts are the artifacts an attempt after the first keeps in
// its own folder, "attempts/<n>/". Everything else of a request lies in
// the request's folder itself.
var attemptArtifacts = []string{ArtifactPolicyDecision, ArtifactDispatch, ArtifactNotDispatched}

// attempts derives the attempts of request id from its keys in the store
// (present) and in the spool, and returns as problems, each starting with
// the key concerned, what in them contradicts the layout: a key under
// "attempts/" that is not an attempt's artifact, a dispatch record that is
// unreadable or belongs to another request, attempt or state, and an
// attempt that follows a gap or an attempt not closed not_dispatched (a
// request id must never run twice). Only a failing store is an error.
func (r *requestCopies) attempts(ctx context.Context, id string, present []string) ([]Attempt, []string, error) {
	var problems []string
	keys := make([]string, 0, len(present)+len(r.inSpool))
	for _, k := range mergeSorted(present, r.inSpool) {
		n, name, ok := ParseAttemptKey(id, k)
		switch {
		case !ok:
			problems = append(problems, k+": not an attempt's artifact: attempt folders are numbered 2, 3, … without leading zeros")
		case n > 1 && !slices.Contains(attemptArtifacts, name):
			problems = append(problems, fmt.Sprintf("%s: not an attempt's artifact: an attempt's folder holds only %s", k, strings.Join(attemptArtifacts, ", ")))
		default:
			keys = append(keys, k)
		}
	}
	// A close is checked by its own signature only while the request
	// has no manifest: a manifest's signature covers the bytes of every
	// record it lists, and closes written before they were signed are
	// still good under it.
	ring := r.v.ring
	if slices.Contains(keys, Key(id, ArtifactManifest)) {
		ring = nil
	}
	attempts, err := readAttempts(ctx, r.getRecord, id, keys, ring)
	if se, isStore := errors.AsType[storeError](err); isStore {
		return nil, nil, se.err
	}
	if err != nil {
		// ReadAttempts names the key, after the package prefix at most.
		return nil, append(problems, strings.TrimPrefix(err.Error(), "evidence: ")), nil
	}
	return attempts, append(problems, sequenceProblems(id, attempts)...), nil
}

// sequenceProblems reports attempts that could not have been opened: each
// attempt after the first is opened only once the one before it is closed
// not_dispatched, so a gap, or an attempt after one that was dispatched or
// is still open, means the request could have run twice, or that evidence
// was removed.
func sequenceProblems(id string, attempts []Attempt) []string {
	var problems []string
	for i, a := range attempts {
		folder := RequestPrefix(id) + AttemptArtifact(a.Number, "")
		switch {
		case a.Number != i+1:
			problems = append(problems, fmt.Sprintf("%s: attempt %d without attempt %d", folder, a.Number, i+1))
		case i > 0 && attempts[i-1].State != NotDispatched:
			problems = append(problems, fmt.Sprintf("%s: attempt %d opened while attempt %d is %s, not %s",
				folder, a.Number, i, attempts[i-1].State, NotDispatched))
		}
	}
	return problems
}

// mergeSorted returns the sorted union of two sorted key lists.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// storeError marks a failure of the store or the spool while deriving
// attempts, as opposed to a record that does not parse.
type storeError struct{ err error }

func (e storeError) Error() string { return e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

// getRecord reads a dispatch record for readAttempts: the store's copy of
// key, or else the spool's, keeping what it read for the digest checks.
// Its errors are all storeErrors, so that a failing store can be told from
// a malformed record.
func (r *requestCopies) getRecord(ctx context.Context, key string) ([]byte, error) {
	copies, err := r.read(ctx, key)
	if err != nil {
		return nil, storeError{err}
	}
	if len(copies) == 0 {
		// Listed a moment ago, gone now: nothing create-only removes.
		return nil, storeError{fmt.Errorf("%s: listed but gone: %w", key, ErrNotExist)}
	}
	r.cached[key] = copies
	return copies[0].data, nil
}
