package policy

import (
	"context"
	"fmt"
	"slices"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// ActionReadEvidence is the action of a person reading the evidence of a
// call in the console: principal Caller::"<reader>", resource the call's
// Tool::"<tool_id>", context ReadContext (the caller who made the call and
// that caller's groups).
//
// Like Action::"Approve", only a permit whose action scope names it
// (action == Action::"ReadEvidence", or action in [..., Action::"ReadEvidence"])
// authorises a reader: a permit written for every action never opens the
// record of everyone's calls.
const ActionReadEvidence = "ReadEvidence"

// ReadRequest asks: may Reader read the evidence of a call Requester made
// to ToolID (of driver Driver)? The decision depends on nothing else, so a
// listing may cache it per (requester, tool).
type ReadRequest struct {
	Reader      string
	ReaderAttrs CallerAttributes
	// Requester is the caller who made the call, as request.json records it.
	Requester      string
	RequesterAttrs CallerAttributes
	ToolID         string
	// Driver is the tool's driver as the decision records it; "" when the
	// evidence does not say (the Tool's parent is then Driver::"").
	Driver string
	// RequestID, CallPolicyRef and RunID are the call's (RunID "" when
	// it had none).
	RequestID, CallPolicyRef, RunID string
	// PolicyRef names the policy set that decides ("" for policy.default).
	PolicyRef string
}

// readContext is the Cedar context of r (ReadContext in the schema).
func readContext(r ReadRequest) types.Record {
	m := types.RecordMap{
		"requester":       types.NewEntityUID("Caller", types.String(r.Requester)),
		"requesterGroups": stringSet(r.RequesterAttrs.Groups),
		"requestId":       types.String(r.RequestID),
		"policyRef":       types.String(effectiveRef(r.CallPolicyRef)),
		"args":            types.NewRecord(nil),
		"session":         History{}.sessionRecord(),
		"caller":          History{}.callerRecord(),
	}
	if r.RunID != "" {
		m["runId"] = types.String(r.RunID)
	}
	return types.NewRecord(m)
}

// DecideRead judges a ReadRequest. It fails closed as Decide does: a
// malformed request, an evaluation error or an internal failure is a deny
// whose RuleID says why. Allow is set only when a permit naming
// Action::"ReadEvidence" matches and no forbid does.
func (e *Engine) DecideRead(ctx context.Context, r ReadRequest) (d Decision) {
	defer func() {
		if p := recover(); p != nil {
			d = failed(d, fmt.Sprintf("internal failure while deciding a read: %v", p))
		}
	}()
	set, d, ok := e.begin(ctx, r.PolicyRef)
	if !ok {
		return d
	}
	if r.Reader == "" || r.Requester == "" || r.ToolID == "" {
		return failed(d, "read request lacks a reader, a requester or a tool")
	}
	cctx := readContext(r)
	creq, entities := toolRequest(e.entities, r.Reader, r.ReaderAttrs, ActionReadEvidence, r.ToolID, r.Driver, ToolAttributes{}, cctx)
	decision, diag := cedar.Authorize(set.candidates(creq.Principal, creq.Resource), entities, creq)
	if len(diag.Errors) > 0 {
		return evaluationFailed(d, set, diag.Errors)
	}
	if decision != cedar.Allow {
		if len(diag.Reasons) > 0 {
			return decidedBy(d, set.byID[diag.Reasons[0].PolicyID])
		}
		d.RuleID = RuleDefaultDeny
		d.Reason = fmt.Sprintf("no permit of Action::%q in %s matched reader %q for a call of %q to %q",
			ActionReadEvidence, set.file, r.Reader, r.Requester, r.ToolID)
		return d
	}
	for _, reason := range diag.Reasons {
		if p := set.byID[reason.PolicyID]; p.effectPermit() && namesAction(p.policy, ActionReadEvidence) {
			d.Allow = true
			return decidedBy(d, p)
		}
	}
	d.RuleID = RuleDefaultDeny
	d.Reason = fmt.Sprintf("no permit naming Action::%q matched reader %q", ActionReadEvidence, r.Reader)
	return d
}

// DecideRead decides a read with the policy sets in force.
func (l *Live) DecideRead(ctx context.Context, r ReadRequest) Decision {
	return l.current.Load().DecideRead(ctx, r)
}

func (p *loadedPolicy) effectPermit() bool { return p.policy.Effect() == cedar.Permit }

// namesAction reports whether the action scope of p names
// Action::"<action>" itself.
func namesAction(p *cedar.Policy, action string) bool {
	uid := types.NewEntityUID("Action", types.String(action))
	switch s := (*xast.Policy)(p.AST()).Action.(type) {
	case xast.ScopeTypeEq:
		return s.Entity == uid
	case xast.ScopeTypeInSet:
		return slices.Contains(s.Entities, uid)
	}
	return false
}

// RuleText returns the Cedar text of the rule ruleID of the policy set
// policyRef ("" for policy.default), for a person reading why a call was
// decided so; ok is false when no loaded rule has that id.
func (e *Engine) RuleText(policyRef, ruleID string) (text string, ok bool) {
	set, found := e.sets[effectiveRef(policyRef)]
	if !found {
		return "", false
	}
	for _, p := range set.policies {
		if p.ruleID == ruleID {
			return string(p.policy.MarshalCedar()), true
		}
	}
	return "", false
}

// RuleText is Engine.RuleText of the policy sets in force.
func (l *Live) RuleText(policyRef, ruleID string) (string, bool) {
	return l.current.Load().RuleText(policyRef, ruleID)
}
