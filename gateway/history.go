package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/approval"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/history"
)

// RuleHistoryError: the call's history could not be read or its slot
// claimed (the store failed, or a history record failed authentication),
// so nothing ran. Reserved: no policy may use it as its @id.
const RuleHistoryError = policy.RuleHistoryError

// HistoryKeeper decides calls on their session history and records the
// ones let through; *history.Ledger implements it.
type HistoryKeeper interface {
	Decide(ctx context.Context, c history.Call, decide func(history.Facts) history.Outcome) (history.Result, error)
}

// newHistory is the gateway's history, in its store, sealed with its keys
// so that every replica trusts the others' records and no one else's.
func (g *Gateway) newHistory() HistoryKeeper {
	o := history.Options{Store: g.store, Now: func() time.Time { return g.now() }}
	if g.sealer != nil {
		o.Seal = func(key string, data []byte) ([]byte, error) { return g.sealRecord(key, data, true) }
		o.Open = func(key string, data []byte) ([]byte, error) {
			body, _, err := g.trusted.Open(key, data)
			if err != nil {
				g.tampered(nil, "history", key, err)
			}
			return body, err
		}
	}
	return history.New(o)
}

// historyDecider is implemented by deciders that say whether their
// policies use history (*policy.Engine, *policy.Live).
type historyDecider interface{ UsesHistory() bool }

// wantsHistory: the call is decided on history when a policy reads it or
// labels sessions, or the tool carries catalog labels.
func (g *Gateway) wantsHistory(tool Tool) bool {
	if g.history == nil {
		return false
	}
	if len(tool.Labels) > 0 {
		return true
	}
	h, ok := g.decider.(historyDecider)
	return ok && h.UsesHistory()
}

// decideWithHistory decides req on its history: the decision that stands
// saw every call of the caller claimed before it, on any replica, and a
// call let through holds the next slot of its caller's history.
func (g *Gateway) decideWithHistory(ctx context.Context, req policy.Request, runs func(policy.Decision) bool) (policy.Decision, *evidence.DecisionHistory) {
	// last is only for naming the policy set when the history fails: the
	// decision that stands is the Result's, as decide also runs on the
	// hypothetical later facts of a retry hint.
	var last policy.Decision
	c := history.Call{Caller: req.Caller, RunID: req.RunID, RequestID: req.RequestID, Tool: req.ToolID}
	res, err := g.history.Decide(ctx, c, func(f history.Facts) history.Outcome {
		r := req
		r.History = f.History
		d := g.decider.Decide(ctx, r)
		last = d
		return history.Outcome{Dispatch: runs(d), Added: history.Added{Labels: d.Labels, CallerLabels: d.CallerLabels}, Decision: d}
	})
	if err != nil {
		d := last
		return policy.Decision{
			RuleID:    RuleHistoryError,
			Reason:    fmt.Sprintf("the call's history could not be read or extended, so nothing ran: %v", err),
			PolicyRef: d.PolicyRef, PolicySetDigest: d.PolicySetDigest,
		}, nil
	}
	d := res.Outcome.Decision
	h := res.Facts.History
	rec := &evidence.DecisionHistory{
		Slot: res.Facts.Slot, Calls: h.Calls, ToolCalls: h.ToolCalls, Labels: nonNil(h.Labels),
		CallsLastMinute: h.CallsLastMinute, ToolCallsLastMinute: h.ToolCallsLastMinute,
		ReadAt: res.Facts.At.UTC(), Claimed: res.Claimed, RetryAfterMS: res.RetryAfter.Milliseconds(),
	}
	if res.Claimed > 0 {
		rec.LabelsAdded, rec.CallerLabelsAdded = d.Labels, d.CallerLabels
	}
	if res.RetryAfter > 0 {
		d.Reason += fmt.Sprintf(" (retry after %s)", res.RetryAfter)
	}
	return d, rec
}

// runsUnder returns whether a decision lets p run: an allow, or a call
// held for approval that p's approval grants now (approval.Judge, as attempt
// applies it). An approved call is judged on its history at its use, as
// every call is: a history rule that forbids it now (the session moved
// past a limit, or acquired a label, while it waited) denies it, and the
// approval stays unused until it expires.
func (g *Gateway) runsUnder(p *prepared) func(policy.Decision) bool {
	return func(d policy.Decision) bool {
		if p.guestCall != nil {
			d = approval.GuestRerun(d, p.guestCall.requestID)
		}
		if d.Allow || !d.ApprovalRequired || p.held == nil || p.held.Final() {
			return d.Allow
		}
		granted, _ := approval.Judge(p.held, d, g.now().UTC())
		return granted.Allow
	}
}

// retryAfterMS is a deny's retry hint: the history's, when time alone
// lifts the deny; 0 on an allow.
func retryAfterMS(d policy.Decision, h *evidence.DecisionHistory) int64 {
	if d.Allow || h == nil {
		return 0
	}
	return h.RetryAfterMS
}

// factsOf is the policy.History a decision record says the call saw.
func factsOf(h *evidence.DecisionHistory) policy.History {
	return policy.History{Calls: h.Calls, ToolCalls: h.ToolCalls, Labels: h.Labels,
		CallsLastMinute: h.CallsLastMinute, ToolCallsLastMinute: h.ToolCallsLastMinute}
}
