package policy

import (
	"context"
	"fmt"
	"iter"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// Explanation is a decision together with every policy that matched the
// request. It answers the question a policy author asks of a dry run: which
// rules fired, and which of them decided.
type Explanation struct {
	// Decision is exactly what Decide returns for the same request,
	// including every evaluation error in Errors.
	Decision
	// Matched lists, in file order, every policy of the set whose scope and
	// conditions hold for the request, permits and forbids alike. It is empty
	// when the set is not loaded or the request is malformed.
	Matched []PolicyInfo
}

// PolicyInfo describes one policy that matched a request.
type PolicyInfo struct {
	// RuleID is the policy's rule id as Decide reports it.
	RuleID string
	// Effect is "permit" or "forbid".
	Effect string
	// Reason is the policy's @reason annotation, possibly "".
	Reason string
	// Approval is the policy's @approval group, "" for an unmarked policy.
	Approval string
	// Suggestion is the policy's @suggestion annotation, possibly "".
	Suggestion string
	// Position is "<file>:<line>:<column>" of the policy in its set.
	Position string
	// Determining is true when the policy is one of those that decided:
	// a matching permit of an allowed call, or a matching forbid of a
	// denied one. A call denied with RulePolicyError has no determining
	// policy, because Cedar's own verdict was overruled by the error.
	Determining bool
}

// Explain judges req exactly as Decide does and also lists every policy that
// matched it. It evaluates each candidate policy once more on its own, which
// costs more than Decide does; it is meant for dry runs and policy tests, not
// for the gateway's hot path.
func (e *Engine) Explain(ctx context.Context, req Request) Explanation {
	x := Explanation{Decision: e.Decide(ctx, req)}
	creq, entities, err := cedarRequest(req, e.entities)
	if err != nil {
		return x
	}
	return e.listMatched(ctx, x, creq, entities)
}

// ExplainApproval judges a exactly as DecideApproval does and also lists
// every policy that matched the Approve request. Like Explain, it is meant
// for dry runs and policy tests.
func (e *Engine) ExplainApproval(ctx context.Context, a ApprovalRequest) Explanation {
	x := Explanation{Decision: e.DecideApproval(ctx, a)}
	creq, entities, err := approvalRequest(a, e.entities)
	if err != nil {
		return x
	}
	return e.listMatched(ctx, x, creq, entities)
}

// listMatched fills x.Matched with the policies of x's set that match creq.
func (e *Engine) listMatched(ctx context.Context, x Explanation, creq cedar.Request, entities types.EntityGetter) Explanation {
	set, ok := e.sets[x.PolicyRef]
	if !ok || ctx.Err() != nil {
		return x
	}
	defer func() {
		// The decision already survived this request; should the per-policy
		// evaluation still fail, the decision stands without the list.
		if r := recover(); r != nil {
			x.Matched = nil
		}
	}()
	for id, p := range set.candidates(creq.Principal, creq.Resource).All() {
		_, diag := cedar.Authorize(onePolicy{id, p}, entities, creq)
		if len(diag.Reasons) == 0 {
			continue
		}
		lp := set.byID[id]
		pos := p.Position()
		info := PolicyInfo{
			RuleID:     lp.ruleID,
			Effect:     "permit",
			Reason:     lp.reason,
			Approval:   lp.approval,
			Suggestion: lp.suggestion,
			Position:   fmt.Sprintf("%s:%d:%d", set.file, pos.Line, pos.Column),
		}
		if p.Effect() == cedar.Forbid {
			info.Effect = "forbid"
		}
		info.Determining = determining(x.Decision, creq, lp)
		x.Matched = append(x.Matched, info)
	}
	return x
}

// determining reports whether the matching policy p is one of those that
// decided d: a forbid of a deny; a permit without @approval of an allow (for
// an approver, one that may authorise approvers); a marked permit of an
// approval_required decision. Nothing determines a decision the gateway
// made itself (policy_error, a refused approver).
func determining(d Decision, creq cedar.Request, p *loadedPolicy) bool {
	self, _ := creq.Context.Get("selfApproval")
	switch {
	case d.RuleID == RulePolicyError || d.RuleID == RuleNotInApprovalGroup || d.RuleID == RuleSelfApprovalDenied:
		return false
	case p.policy.Effect() == cedar.Forbid:
		return !d.Allow && !d.ApprovalRequired
	case d.ApprovalRequired:
		return true
	case !d.Allow:
		return false
	case creq.Action.ID == ActionApprove:
		return p.grantsApprove && (self != types.Boolean(true) || p.selfApproval)
	}
	return p.approval == ""
}

// onePolicy is a cedar.PolicyIterator over a single policy.
type onePolicy struct {
	id cedar.PolicyID
	p  *cedar.Policy
}

func (o onePolicy) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		yield(o.id, o.p)
	}
}
