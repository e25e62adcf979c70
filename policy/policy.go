// Package policy decides with Cedar whether a tool call may run.
//
// A folder of policy files is loaded once into an Engine. Each file
// <policy_ref>.cedar is one policy set; a request names the set it is judged
// by with its policy_ref (DefaultRef when it names none). Every policy is
// validated at load time against the gateway's built-in schema (Schema),
// which a folder's toolgate.cedarschema may extend but never weaken, so a
// typo in a rule stops the gateway from starting rather than making the rule
// silently never match.
//
// A request becomes the Cedar request
//
//	principal  Caller::"<caller>"
//	action     Action::"RunTool" or Action::"CallTool"
//	resource   Tool::"<tool_id>", a member of Driver::"<driver>", with
//	           attributes driver, package, export, version (String) and
//	           tags (Set of String)
//	context    see Context
//
// Decisions fail closed: anything other than a clean permit, including an
// error while evaluating any rule, is a deny.
//
// A permit marked @approval("<group>") holds a call back instead of allowing
// it: Decide then reports ApprovalRequired (never Allow) when such permits
// are the only ones that match. Whether a person may approve the held-back
// call is a Cedar decision as well, on Action::"Approve", made by
// DecideApproval; see approval.go for the rules.
package policy

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// DefaultRef is the policy_ref used when a request gives none.
const DefaultRef = "policy.default"

// Rule ids Decide reports when no policy of the set decided.
const (
	// RuleDefaultDeny: no permit matched and no forbid did.
	RuleDefaultDeny = "default_deny"
	// RulePolicyError: evaluation failed, so the call was denied.
	RulePolicyError = "policy_error"
	// RuleUnknownPolicyRef: the request named a policy set that is not loaded.
	RuleUnknownPolicyRef = "unknown_policy_ref"
	// RulePolicyRefNotSelectable: the gateway refused the request's
	// policy_ref before any set decided (a shadow candidate, or a set the
	// caller may not select). Decide never reports it; it is reserved so no
	// policy can pose as that refusal.
	RulePolicyRefNotSelectable = "policy_ref_not_selectable"
	// RuleHistoryError: the gateway could not read or extend the call's
	// session history, so nothing ran. Decide never reports it; it is
	// reserved so no policy can pose as that failure.
	RuleHistoryError = "history_error"
)

// The two actions a Request may ask for; ActionApprove is asked only
// through an ApprovalRequest.
const (
	// ActionRunTool is a call made by an orchestrator through RunTool.
	ActionRunTool = "RunTool"
	// ActionCallTool is a nested call made by guest code inside a sandbox.
	ActionCallTool = "CallTool"
)

// Request is one authorization question: may Caller perform Action on ToolID?
type Request struct {
	// Caller names the principal, Caller::"<Caller>". Required.
	Caller string
	// Action is ActionRunTool or ActionCallTool. Required.
	Action string
	// ToolID names the resource, Tool::"<ToolID>". Required.
	ToolID string
	// Driver names the tool's parent, Driver::"<Driver>", and is the Tool's
	// driver attribute. Required.
	Driver string
	// Tool holds the catalog attributes of the resource.
	Tool ToolAttributes
	// CallerAttrs are the principal's attributes: principal.groups and
	// principal.roles.
	CallerAttrs CallerAttributes

	RequestID       string // context.requestId
	RunID           string // context.runId, absent when empty
	StepID          string // context.stepId, absent when empty
	PolicyRef       string // the policy set to use; DefaultRef when empty
	ParentRequestID string // context.parentRequestId, absent when empty

	// Args are the tool arguments as decoded by a json.Decoder with
	// UseNumber; see ArgsValue for how they appear in Cedar.
	Args map[string]any

	// History is what Cedar sees of the call's past: context.session and
	// context.caller (see History). The zero value is a first call.
	History History
}

// ToolAttributes are the catalog facts about a tool that rules can test:
// resource.package, resource.export, resource.version and resource.tags,
// beside resource.driver. Tools without a package (the workspace's) have
// empty strings and no tags, so rules need no `has` guard.
type ToolAttributes struct {
	Package string
	Export  string
	Version string
	Tags    []string
	// Labels are the catalog's labels of the tool: a call of it that is
	// dispatched adds them to its session, as a permit's @label does.
	// Cedar does not see them as an attribute.
	Labels []string
}

// CallerAttributes are what the gateway's configuration says about a
// caller, for role-based rules: principal.groups.contains("ops").
type CallerAttributes struct {
	Groups []string
	Roles  []string
}

// callerEntity is the Caller entity of a request.
func callerEntity(uid types.EntityUID, a CallerAttributes) types.Entity {
	return types.Entity{UID: uid, Attributes: types.NewRecord(types.RecordMap{
		"groups": stringSet(a.Groups),
		"roles":  stringSet(a.Roles),
	})}
}

func stringSet(items []string) types.Set {
	vals := make([]types.Value, len(items))
	for i, v := range items {
		vals[i] = types.String(v)
	}
	return types.NewSet(vals...)
}

// toolEntity is the Tool entity of a request: a member of its driver, with
// the catalog attributes.
func toolEntity(uid, driver types.EntityUID, driverName string, t ToolAttributes) types.Entity {
	return types.Entity{
		UID:     uid,
		Parents: types.NewEntityUIDSet(driver),
		Attributes: types.NewRecord(types.RecordMap{
			"driver":  types.String(driverName),
			"package": types.String(t.Package),
			"export":  types.String(t.Export),
			"version": types.String(t.Version),
			"tags":    stringSet(t.Tags),
		}),
	}
}

// Decision is the outcome of Decide and DecideApproval. Exactly one of
// three things holds: Allow (the call may run), ApprovalRequired (it may run
// once a member of Approvers approves it) or neither (a deny). Allow is
// false when approval is required, so code that only reads Allow treats a
// held-back call as not allowed.
type Decision struct {
	Allow bool
	// ApprovalRequired is true when every matching permit is marked
	// @approval and nothing denied; RuleID and Reason are then those of the
	// first such permit in file order.
	ApprovalRequired bool
	// Approvers is the @approval group of that permit when ApprovalRequired,
	// else "".
	Approvers string
	// RuleID is the deciding policy's @id annotation, or
	// "<file>:<policy id>" (for example "policy.default.cedar:policy2") for a
	// policy without one, or one of RuleDefaultDeny, RulePolicyError and
	// RuleUnknownPolicyRef.
	RuleID string
	// Reason is the deciding policy's @reason annotation, or an explanation
	// written by Decide.
	Reason string
	// Suggestion is the deciding policy's @suggestion annotation: what the
	// caller may do instead. "" when the rule has none, and on every
	// decision the gateway makes itself.
	Suggestion string
	// PolicyRef is the policy set the request was judged by.
	PolicyRef string
	// PolicySetDigest is "sha256:<hex>" of that policy set's file, or "" when
	// the set is not loaded.
	PolicySetDigest string
	// Errors lists what went wrong when RuleID is RulePolicyError.
	Errors []string
	// Labels and CallerLabels are what the call adds, once dispatched, to
	// its session and to its caller: the @label and @caller_label labels
	// of every matching permit, and the tool's catalog labels (session
	// ones). Sorted, without repeats; nil on a deny.
	Labels, CallerLabels []string
}

// Engine holds the policy sets of one folder. Its policies are immutable
// after Load, and it is safe for concurrent use.
type Engine struct {
	sets map[string]*policySet
	// entities caches the Caller and Tool entities decisions build; nil
	// caches nothing. A reloaded folder is a new Engine, with a new cache.
	entities *entityCache
}

// Refs returns the policy_refs of the loaded policy sets, sorted.
func (e *Engine) Refs() []string {
	refs := make([]string, 0, len(e.sets))
	for ref := range e.sets {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	return refs
}

// Decide judges req by the policy set it names. The call is allowed only when
// a permit without @approval matches, no forbid matches and no policy of the
// set fails to evaluate. When the only matching permits are marked
// @approval, and nothing denies, the decision is ApprovalRequired (still not
// Allow). Every other outcome, including a malformed request, a cancelled
// ctx and an internal failure, is a deny whose RuleID says why.
//
// When several policies decide (several permits, or several forbids), the
// first one in file order is reported.
func (e *Engine) Decide(ctx context.Context, req Request) (d Decision) {
	defer func() {
		// Cedar is a third-party evaluator; whatever goes wrong inside it
		// must end as a deny, never as a crashed gateway.
		if r := recover(); r != nil {
			d = failed(d, fmt.Sprintf("internal failure while deciding: %v", r))
		}
	}()
	set, d, ok := e.begin(ctx, req.PolicyRef)
	if !ok {
		return d
	}
	creq, entities, err := cedarRequest(req, e.entities)
	if err != nil {
		return failed(d, err.Error())
	}

	decision, diag := cedar.Authorize(set.candidates(creq.Principal, creq.Resource), entities, creq)

	if len(diag.Errors) > 0 {
		return evaluationFailed(d, set, diag.Errors)
	}
	if len(diag.Reasons) == 0 {
		d.RuleID = RuleDefaultDeny
		d.Reason = fmt.Sprintf("no permit policy in %s matched caller %q calling tool %q", set.file, req.Caller, req.ToolID)
		return d
	}
	if decision != cedar.Allow {
		// The reasons are the matching forbids, in file order because the
		// candidates are visited in file order.
		return decidedBy(d, set.byID[diag.Reasons[0].PolicyID])
	}
	// For an allow, Cedar lists every matching permit, in file order. The
	// first one without @approval allows at once; when every one is marked,
	// the first marked one holds the call back for approval.
	for _, r := range diag.Reasons {
		if p := set.byID[r.PolicyID]; p.approval == "" {
			d.Allow = true
			return addLabels(decidedBy(d, p), set, diag.Reasons, req.Tool)
		}
	}
	p := set.byID[diag.Reasons[0].PolicyID]
	d.ApprovalRequired = true
	d.Approvers = p.approval
	return addLabels(decidedBy(d, p), set, diag.Reasons, req.Tool)
}

// evaluationFailed turns d into the deny of a set some policy of which
// failed to evaluate. Cedar skips such a policy; for a forbid that would
// turn a deny into an allow, so any error denies.
func evaluationFailed(d Decision, set *policySet, errs []cedar.DiagnosticError) Decision {
	msgs := make([]string, 0, len(errs))
	for _, de := range errs {
		p := set.byID[de.PolicyID]
		msgs = append(msgs, fmt.Sprintf("%s: rule %s: %s", positionText(de.Position), p.ruleID, de.Message))
	}
	d = failed(d, "a policy failed to evaluate, so the call is denied: "+strings.Join(msgs, "; "))
	d.Errors = msgs
	return d
}

// decidedBy reports p as the policy that decided d, whose Allow and
// ApprovalRequired are already set.
func decidedBy(d Decision, p *loadedPolicy) Decision {
	d.RuleID = p.ruleID
	d.Reason = p.reason
	d.Suggestion = p.suggestion
	switch {
	case d.Reason != "":
	case d.ApprovalRequired:
		d.Reason = fmt.Sprintf("policy %s requires approval by a member of %s", p.ruleID, p.approval)
	case d.Allow:
		d.Reason = "permitted by policy " + p.ruleID
	default:
		d.Reason = "forbidden by policy " + p.ruleID
	}
	return d
}

// begin starts a decision under policyRef: it looks up the set, records
// its digest, and checks that the decision is still wanted. When ok is
// false, d is already the final deny.
func (e *Engine) begin(ctx context.Context, policyRef string) (set *policySet, d Decision, ok bool) {
	ref := effectiveRef(policyRef)
	d = Decision{PolicyRef: ref}
	if set, ok = e.sets[ref]; !ok {
		d.RuleID = RuleUnknownPolicyRef
		d.Reason = fmt.Sprintf("no policy set named %q is loaded", ref)
		return nil, d, false
	}
	d.PolicySetDigest = set.digest
	if err := ctx.Err(); err != nil {
		return nil, failed(d, fmt.Sprintf("decision abandoned: %v", err)), false
	}
	return set, d, true
}

// cedarRequest builds the Cedar request and entities Decide evaluates, or
// says why req cannot be expressed in Cedar. cache may be nil.
func cedarRequest(req Request, cache *entityCache) (cedar.Request, *requestEntities, error) {
	if err := checkRequest(req); err != nil {
		return cedar.Request{}, nil, err
	}
	cctx, err := Context(req)
	if err != nil {
		return cedar.Request{}, nil, fmt.Errorf("tool arguments cannot be expressed in Cedar: %w", err)
	}
	creq, entities := toolRequest(cache, req.Caller, req.CallerAttrs, req.Action, req.ToolID, req.Driver, req.Tool, cctx)
	return creq, entities, nil
}

// toolRequest builds the Cedar request of caller doing action on a tool,
// and the entities it names: the caller, the tool and its driver. The
// caller and tool entities come from cache when it has them.
func toolRequest(cache *entityCache, caller string, attrs CallerAttributes, action, toolID, driverName string, tool ToolAttributes,
	cctx types.Record) (cedar.Request, *requestEntities) {
	principal := types.NewEntityUID("Caller", types.String(caller))
	resource := types.NewEntityUID("Tool", types.String(toolID))
	driver := types.NewEntityUID("Driver", types.String(driverName))
	entities := &requestEntities{
		principal: cache.caller(principal, caller, attrs),
		driver:    types.Entity{UID: driver},
		tool:      cache.tool(resource, driver, toolID, driverName, tool),
	}
	creq := cedar.Request{
		Principal: principal,
		Action:    types.NewEntityUID("Action", types.String(action)),
		Resource:  resource,
		Context:   cctx,
	}
	return creq, entities
}

// failed turns d into a policy_error deny carrying msg.
func failed(d Decision, msg string) Decision {
	d.Allow = false
	d.ApprovalRequired = false
	d.Approvers = ""
	d.RuleID = RulePolicyError
	d.Reason = msg
	d.Suggestion = ""
	d.Errors = []string{msg}
	d.Labels, d.CallerLabels = nil, nil
	return d
}

func effectiveRef(ref string) string {
	if ref == "" {
		return DefaultRef
	}
	return ref
}

// checkRequest rejects requests the Cedar model cannot express faithfully.
// An unknown action in particular must not reach policies written as
// `permit (principal, action, resource == …)`.
func checkRequest(req Request) error {
	switch {
	case req.Action != ActionRunTool && req.Action != ActionCallTool:
		return fmt.Errorf("request action %q is neither %q nor %q", req.Action, ActionRunTool, ActionCallTool)
	case req.Caller == "":
		return fmt.Errorf("request has no caller")
	case req.ToolID == "":
		return fmt.Errorf("request has no tool_id")
	case req.Driver == "":
		return fmt.Errorf("tool %q has no driver", req.ToolID)
	}
	return nil
}

func positionText(p cedar.Position) string {
	return fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
}

// policySet is one loaded <policy_ref>.cedar file.
type policySet struct {
	file     string // base name, e.g. "policy.default.cedar"
	digest   string
	policies []loadedPolicy // in file order
	byID     map[cedar.PolicyID]*loadedPolicy

	// Policies whose scope pins the resource (resource == Tool::"x") or,
	// failing that, the principal (principal == Caller::"x") can only match
	// requests for that entity; they are filed under it so a request
	// evaluates just the policies that can apply to it. All others are in
	// general. Each list holds indexes into policies in ascending order.
	general     []int
	byResource  map[types.EntityUID][]int
	byPrincipal map[types.EntityUID][]int
	// history: some policy uses history (usesHistory).
	history bool
}

type loadedPolicy struct {
	id     cedar.PolicyID // Cedar's name within the file: policy0, policy1, …
	policy *cedar.Policy
	ruleID string
	reason string // the @reason annotation, possibly ""
	// suggestion is the @suggestion annotation, possibly "".
	suggestion string
	// approval is the @approval group, "" for a policy without the mark.
	approval string
	// grantsApprove: a permit without @approval whose scope names
	// Action::"Approve", the only kind that may authorise an approver.
	grantsApprove bool
	// selfApproval: the permit carries @self_approval("allowed").
	selfApproval bool
	// labels and callerLabels are the @label and @caller_label lists.
	labels, callerLabels []string
}

// candidates returns, in file order, the policies that may apply to a
// request for principal and resource. Skipping the others is exact: their
// scope compares principal or resource with a different entity, which Cedar
// evaluates first and which is false without error.
func (s *policySet) candidates(principal, resource types.EntityUID) candidateList {
	return candidateList{
		set:   s,
		lists: [3][]int{s.general, s.byResource[resource], s.byPrincipal[principal]},
	}
}

// candidateList implements cedar.PolicyIterator by merging index lists.
type candidateList struct {
	set   *policySet
	lists [3][]int
}

func (c candidateList) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		lists := c.lists
		for {
			next := -1
			for i, l := range lists {
				if len(l) > 0 && (next < 0 || l[0] < lists[next][0]) {
					next = i
				}
			}
			if next < 0 {
				return
			}
			p := &c.set.policies[lists[next][0]]
			lists[next] = lists[next][1:]
			if !yield(p.id, p.policy) {
				return
			}
		}
	}
}
