package policy

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Human approval.
//
// A permit marked @approval("<group>") does not allow a call at once: it
// holds it back until a member of <group> approves that exact call. For a
// RunTool or CallTool request, Decide combines the matching policies so:
//
//	matching policies                           decision
//	any forbid                                  deny (the first forbid)
//	a policy that fails to evaluate             deny (policy_error)
//	no permit                                   deny (default_deny)
//	at least one permit without @approval       allow (the first such permit)
//	only permits marked @approval               approval_required (the first)
//
// An approval_required Decision has Allow false, so any caller that only
// knows Allow treats the call as not run. Approvers names the group of the
// reported rule.
//
// Who may approve is decided by Cedar too, with DecideApproval: see
// ApprovalRequest.

// ActionApprove is the action of an approver deciding a pending call.
const ActionApprove = "Approve"

// Annotations of approval rules.
const (
	// AnnotationApproval marks a permit as needing approval by the members of
	// the group it names.
	AnnotationApproval = "approval"
	// AnnotationSelfApproval, with the value SelfApprovalAllowed on a permit
	// of Action::"Approve", lets that permit authorise an approver who is
	// also the requester.
	AnnotationSelfApproval = "self_approval"
	// SelfApprovalAllowed is the only value @self_approval accepts.
	SelfApprovalAllowed = "allowed"
)

// Rule ids DecideApproval reports when the gateway refuses an approver
// before or beyond what the policies say. No policy may use them as @id.
const (
	// RuleNotInApprovalGroup: the approver is not a member of the group
	// the approval rule names.
	RuleNotInApprovalGroup = "approver_not_in_group"
	// RuleSelfApprovalDenied: the approver made the pending call and no
	// permit with @self_approval("allowed") authorised them.
	RuleSelfApprovalDenied = "self_approval_denied"
)

// The wire words of a decision, as policy_decision evidence and the CLI
// write them.
const (
	WordAllow            = "allow"
	WordDeny             = "deny"
	WordApprovalRequired = "approval_required"
)

// Word returns d's wire word: WordAllow, WordApprovalRequired or WordDeny.
func (d Decision) Word() string {
	switch {
	case d.Allow:
		return WordAllow
	case d.ApprovalRequired:
		return WordApprovalRequired
	}
	return WordDeny
}

// approvalGroup is what an @approval group may look like: short, lower-case,
// and free of anything a path, a log line or a shell would read specially.
var approvalGroup = regexp.MustCompile(`^[a-z0-9._-]{1,64}$`)

// approvalAnnotationProblems returns what is wrong with p's @approval and
// @self_approval annotations. Cedar's parser already refuses an annotation
// given twice.
func approvalAnnotationProblems(p *cedar.Policy) []string {
	ann := p.Annotations()
	var msgs []string
	if group, ok := ann[AnnotationApproval]; ok {
		switch {
		case p.Effect() == cedar.Forbid:
			msgs = append(msgs, "@approval is allowed only on a permit; a forbid denies whoever approves")
		case !approvalGroup.MatchString(string(group)):
			msgs = append(msgs, fmt.Sprintf("@approval(%q): the group must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'", string(group)))
		}
	}
	if v, ok := ann[AnnotationSelfApproval]; ok {
		switch _, marked := ann[AnnotationApproval]; {
		case p.Effect() == cedar.Forbid:
			msgs = append(msgs, "@self_approval is allowed only on a permit")
		case string(v) != SelfApprovalAllowed:
			msgs = append(msgs, fmt.Sprintf("@self_approval(%q): the only value is %q", string(v), SelfApprovalAllowed))
		case marked:
			msgs = append(msgs, "@self_approval cannot be combined with @approval: a permit marked @approval never authorises an approver")
		}
	}
	return msgs
}

// namesApprove reports whether the action scope of p names Action::"Approve"
// itself, so that a permit written before approvals existed, with an
// unconstrained action, never makes everyone an approver.
func namesApprove(p *cedar.Policy) bool {
	approve := types.NewEntityUID("Action", ActionApprove)
	switch s := (*xast.Policy)(p.AST()).Action.(type) {
	case xast.ScopeTypeEq:
		return s.Entity == approve
	case xast.ScopeTypeInSet:
		return slices.Contains(s.Entities, approve)
	}
	return false
}

// ApprovalRequest asks: may Approver decide the pending call of Requester?
// The gateway fills it from the pending call's record; the group is the
// Approvers of the Decision that held the call back.
//
// DecideApproval allows only when all of these hold:
//
//   - Group is a valid group and Approver is a member (ApproverAttrs.Groups);
//   - no forbid matches and no policy fails to evaluate;
//   - a permit without @approval whose action scope names Action::"Approve"
//     (action == Action::"Approve", or action in [..., Action::"Approve"])
//     matches;
//   - when Approver == Requester (context.selfApproval), such a matching
//     permit also carries @self_approval("allowed").
type ApprovalRequest struct {
	// Approver is the caller deciding: principal Caller::"<Approver>".
	Approver string
	// ApproverAttrs are the approver's groups and roles.
	ApproverAttrs CallerAttributes
	// ToolID, Driver and Tool describe the pending call's tool, the
	// resource, exactly as for its Request.
	ToolID string
	Driver string
	Tool   ToolAttributes
	// Requester is the pending call's caller: context.requester.
	Requester string
	// RequestID is the pending call's request_id: context.requestId.
	RequestID string
	// PolicyRef is the policy set that held the call back; the approval is
	// judged by the same set. DefaultRef when empty.
	PolicyRef string
	// Group is the approval rule's @approval group: context.group.
	Group string
	// Args are the pending call's arguments: context.args.
	Args map[string]any
	// History is the pending call's history when it was held back:
	// context.session and context.caller.
	History History
}

// ApprovalContext builds the Cedar context DecideApproval evaluates a
// against.
func ApprovalContext(a ApprovalRequest) (types.Record, error) {
	args, err := ArgsValue(a.Args)
	if err != nil {
		return types.Record{}, err
	}
	return types.NewRecord(types.RecordMap{
		"requestId":    types.String(a.RequestID),
		"policyRef":    types.String(effectiveRef(a.PolicyRef)),
		"requester":    types.String(a.Requester),
		"group":        types.String(a.Group),
		"selfApproval": types.Boolean(a.Approver == a.Requester),
		"args":         args,
		"session":      a.History.sessionRecord(),
		"caller":       a.History.callerRecord(),
	}), nil
}

// approvalRequest builds the Cedar request and entities of a, or says why a
// cannot be expressed.
func approvalRequest(a ApprovalRequest, cache *entityCache) (cedar.Request, *requestEntities, error) {
	switch {
	case a.Approver == "":
		return cedar.Request{}, nil, fmt.Errorf("approval request has no approver")
	case a.Requester == "":
		return cedar.Request{}, nil, fmt.Errorf("approval request has no requester")
	case a.ToolID == "":
		return cedar.Request{}, nil, fmt.Errorf("approval request has no tool_id")
	case a.Driver == "":
		return cedar.Request{}, nil, fmt.Errorf("tool %q has no driver", a.ToolID)
	case a.RequestID == "":
		return cedar.Request{}, nil, fmt.Errorf("approval request has no request_id")
	}
	cctx, err := ApprovalContext(a)
	if err != nil {
		return cedar.Request{}, nil, fmt.Errorf("tool arguments cannot be expressed in Cedar: %w", err)
	}
	creq, entities := toolRequest(cache, a.Approver, a.ApproverAttrs, ActionApprove, a.ToolID, a.Driver, a.Tool, cctx)
	return creq, entities, nil
}

// DecideApproval judges whether a.Approver may decide the pending call a
// describes (see ApprovalRequest for the rules). It fails closed as Decide
// does: a malformed request, a cancelled ctx, an evaluation error or an
// internal failure is a deny whose RuleID says why. An allowed Decision's
// RuleID and Reason are the authorising permit's; ApprovalRequired is
// always false.
func (e *Engine) DecideApproval(ctx context.Context, a ApprovalRequest) (d Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = failed(d, fmt.Sprintf("internal failure while deciding an approval: %v", r))
		}
	}()
	set, d, ok := e.begin(ctx, a.PolicyRef)
	if !ok {
		return d
	}
	creq, entities, err := approvalRequest(a, e.entities)
	if err != nil {
		return failed(d, err.Error())
	}
	if !approvalGroup.MatchString(a.Group) || !slices.Contains(a.ApproverAttrs.Groups, a.Group) {
		d.RuleID = RuleNotInApprovalGroup
		d.Reason = fmt.Sprintf("caller %q is not a member of the approval group %q", a.Approver, a.Group)
		return d
	}
	decision, diag := cedar.Authorize(set.candidates(creq.Principal, creq.Resource), entities, creq)
	if errs := diag.Errors; len(errs) > 0 {
		return evaluationFailed(d, set, errs)
	}
	if decision != cedar.Allow {
		if len(diag.Reasons) > 0 {
			return decidedBy(d, set.byID[diag.Reasons[0].PolicyID])
		}
		d.RuleID = RuleDefaultDeny
		d.Reason = fmt.Sprintf("no permit of Action::%q in %s matched approver %q for tool %q", ActionApprove, set.file, a.Approver, a.ToolID)
		return d
	}
	return approvalVerdict(d, set, diag.Reasons, a)
}

// approvalVerdict picks, among the matching permits of an Approve request,
// the one that authorises the approver, or denies.
func approvalVerdict(d Decision, set *policySet, reasons []cedar.DiagnosticReason, a ApprovalRequest) Decision {
	self := a.Approver == a.Requester
	var eligible *loadedPolicy
	for _, r := range reasons {
		p := set.byID[r.PolicyID]
		if !p.grantsApprove {
			continue
		}
		if eligible == nil {
			eligible = p
		}
		if !self || p.selfApproval {
			d.Allow = true
			return decidedBy(d, p)
		}
	}
	switch {
	case eligible == nil:
		d.RuleID = RuleDefaultDeny
		d.Reason = fmt.Sprintf("no permit naming Action::%q without @approval in %s matched approver %q for tool %q", ActionApprove, set.file, a.Approver, a.ToolID)
	default:
		d.RuleID = RuleSelfApprovalDenied
		d.Reason = fmt.Sprintf("caller %q made this call and may not approve it: the matching permit %s does not carry @%s(%q)",
			a.Approver, eligible.ruleID, AnnotationSelfApproval, SelfApprovalAllowed)
	}
	return d
}

// HasApprovalRules reports whether any loaded policy set has a permit
// marked @approval: a gateway that cannot tell its callers apart has no
// approver to ask, and says so at start.
func (e *Engine) HasApprovalRules() bool {
	for _, set := range e.sets {
		for _, p := range set.policies {
			if p.approval != "" {
				return true
			}
		}
	}
	return false
}
