package evidence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/evidence/trust"
)

// AttemptOpen is the state of an attempt that has no dispatch record yet:
// claimed or decided, and either in flight or abandoned before dispatch.
const AttemptOpen = "open"

// Attempt is one attempt at running a request, as its artifacts show it.
// A request's first attempt starts with its claim (request.json); a retry
// of a request whose last attempt was not dispatched opens the next one.
type Attempt struct {
	Number int `json:"attempt"`
	// State is AttemptOpen, Dispatched or NotDispatched.
	State string `json:"state"`
	// Decided is set when the attempt's policy_decision.json is stored.
	Decided bool `json:"decided"`
	// Reason says why a NotDispatched attempt was closed.
	Reason string `json:"reason,omitempty"`
	// Gateway and At come from the dispatch record that settled the
	// attempt; both are empty for an open attempt.
	Gateway string    `json:"gateway,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

// ReadAttempts derives the attempts of requestID from keys, the request's
// keys in s, reading the dispatch records it needs. Attempts are returned
// in order; a request always has at least its first. An unreadable
// dispatch record is an error: the state it would settle cannot be told.
func ReadAttempts(ctx context.Context, s Reader, requestID string, keys []string) ([]Attempt, error) {
	return readAttempts(ctx, s.Get, requestID, keys, nil)
}

// ReadAttemptsTrusted is ReadAttempts for a reader about to act on the
// attempts: every record that closes an attempt not dispatched, the only
// record that lets a retry run a request again, must carry a signature by
// a key ring trusts (see package trust). One that does not is an error
// wrapping trust.ErrTampered. A dispatch marker is not checked: it only
// ever stops a request from running.
func ReadAttemptsTrusted(ctx context.Context, s Reader, requestID string, keys []string, ring *trust.Keyring) ([]Attempt, error) {
	if ring == nil {
		return nil, errors.New("evidence: read attempts: no keys to check them with")
	}
	return readAttempts(ctx, s.Get, requestID, keys, ring)
}

// getFunc reads one artifact, as Reader.Get does.
type getFunc func(ctx context.Context, key string) ([]byte, error)

// readAttempts is ReadAttempts reading dispatch records with get, which
// lets the verifier read them from the store or the spool, and checking
// the closing records' signatures with ring, when set.
func readAttempts(ctx context.Context, get getFunc, requestID string, keys []string, ring *trust.Keyring) ([]Attempt, error) {
	byNumber := map[int]*Attempt{1: {Number: 1, State: AttemptOpen}}
	has := map[string]bool{}
	for _, k := range keys {
		n, name, ok := ParseAttemptKey(requestID, k)
		if !ok {
			continue
		}
		if byNumber[n] == nil {
			byNumber[n] = &Attempt{Number: n, State: AttemptOpen}
		}
		has[k] = true
		if name == ArtifactPolicyDecision {
			byNumber[n].Decided = true
		}
	}
	numbers := make([]int, 0, len(byNumber))
	for n := range byNumber {
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	attempts := make([]Attempt, 0, len(numbers))
	for _, n := range numbers {
		a := byNumber[n]
		if err := settle(ctx, get, requestID, a, has, ring); err != nil {
			return nil, err
		}
		attempts = append(attempts, *a)
	}
	return attempts, nil
}

// settle fills in a's state from its dispatch records, when it has any.
func settle(ctx context.Context, get getFunc, requestID string, a *Attempt, has map[string]bool, ring *trust.Keyring) error {
	dispatchKey := AttemptKey(requestID, a.Number, ArtifactDispatch)
	if !has[dispatchKey] {
		return nil
	}
	d, err := readDispatch(ctx, get, requestID, a.Number, dispatchKey, ring)
	if err != nil {
		return err
	}
	a.State, a.Reason, a.Gateway, a.At = d.State, d.Reason, d.Gateway, d.At
	closeKey := AttemptKey(requestID, a.Number, ArtifactNotDispatched)
	if d.State != Dispatched || !has[closeKey] {
		return nil
	}
	c, err := readDispatch(ctx, get, requestID, a.Number, closeKey, ring)
	if err != nil {
		return err
	}
	if c.State != NotDispatched {
		return fmt.Errorf("evidence: %s: state is %q, want %q", closeKey, c.State, NotDispatched)
	}
	a.State, a.Reason, a.Gateway, a.At = c.State, c.Reason, c.Gateway, c.At
	return nil
}

func readDispatch(ctx context.Context, get getFunc, requestID string, attempt int, key string, ring *trust.Keyring) (DispatchRecord, error) {
	data, err := get(ctx, key)
	if err != nil {
		return DispatchRecord{}, err
	}
	d, err := ParseDispatchRecord(data, requestID, attempt)
	if err != nil {
		return DispatchRecord{}, fmt.Errorf("%s: %w", key, err)
	}
	if ring != nil && d.State == NotDispatched {
		if _, _, err := ring.OpenSigned(key, data); err != nil {
			return DispatchRecord{}, fmt.Errorf("an attempt closed as not dispatched must be signed by a trusted gateway: %w", err)
		}
	}
	return d, nil
}

// NeverDispatched reports whether every attempt was closed NotDispatched:
// nothing of the request ever ran, and a retry may still run it.
func NeverDispatched(attempts []Attempt) bool {
	for _, a := range attempts {
		if a.State != NotDispatched {
			return false
		}
	}
	return len(attempts) > 0
}
