package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/policy"
)

// Replayer decides recorded calls under a candidate policy folder and
// compares each outcome with the baseline: a baseline folder when one is
// given, else the decision on record.
type Replayer struct {
	Candidate *Policies
	// Baseline, if set, decides each call again for the "from" side. A
	// set whose digest is the recorded one must then reach the recorded
	// decision: when it does not, the record lacks something the decision
	// read, and the call is not replayable.
	Baseline *Policies
}

// Outcome is what replaying one call found.
type Outcome struct {
	// From and To are the baseline's and the candidate's words.
	From, To string
	// RuleID and Reason are the candidate's deciding rule and its reason.
	RuleID, Reason string
	// Why is set, and nothing else is, when the call is not replayable.
	Why string
}

// Flipped reports whether the candidate decides otherwise.
func (o Outcome) Flipped() bool { return o.Why == "" && o.From != o.To }

// Replay decides c under the candidate and the baseline.
func (r *Replayer) Replay(ctx context.Context, c Call) (Outcome, error) {
	from := c.From
	if r.Baseline != nil {
		b, err := r.Baseline.Decide(ctx, c)
		if o, done := skip(err); done {
			return o, nil
		}
		if r.Baseline.Digest(c.Request.PolicyRef) == c.PolicySetDigest && b.Word() != c.From {
			return Outcome{Why: fmt.Sprintf("the baseline set is the recorded one (%s), yet it decides %s (rule %s) where the record says %s (rule %s): the record lacks something the decision read",
				c.PolicySetDigest, b.Word(), b.RuleID, c.From, c.RuleID)}, nil
		}
		from = b.Word()
	}
	d, err := r.Candidate.Decide(ctx, c)
	if o, done := skip(err); done {
		return o, nil
	}
	if err := ctx.Err(); err != nil {
		// A cancelled decision is a deny; it must not be reported as one.
		return Outcome{}, err
	}
	return Outcome{From: from, To: d.Word(), RuleID: d.RuleID, Reason: d.Reason}, nil
}

// skip turns a *NotReplayable error into the outcome that reports it.
func skip(err error) (Outcome, bool) {
	var nr *NotReplayable
	if errors.As(err, &nr) {
		return Outcome{Why: nr.Why}, true
	}
	return Outcome{}, false
}

// ShadowOutcome is the outcome of c's recorded shadow decision against
// the enforcing set's; ok is false when no shadow set decided c.
func ShadowOutcome(c Call) (Outcome, bool) {
	s := c.Shadow
	if s == nil {
		return Outcome{}, false
	}
	switch s.Decision {
	case policy.WordAllow, policy.WordDeny, policy.WordApprovalRequired:
	default:
		return Outcome{Why: fmt.Sprintf("the shadow decision %q is none of allow, deny, approval_required", s.Decision)}, true
	}
	return Outcome{From: c.From, To: s.Decision, RuleID: s.RuleID, Reason: s.Reason}, true
}
