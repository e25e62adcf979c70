// Package replay decides recorded tool calls again under another policy
// set, and reports which past calls would have been decided differently,
// by which rule.
//
// A call is rebuilt from its verified evidence exactly as the gateway
// decided it: principal and groups, tool and its attributes, canonical
// arguments, context (ids, policy_ref, parent) and the session history
// facts the decision saw. Where the evidence cannot say what a rule would
// read (an argument redacted before it was stored, attributes a record
// written by an older gateway lacks, history a set that did not read it
// left unrecorded), the call is not replayable and the report says why:
// replay never guesses.
package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy"
)

// Call is one recorded decision, rebuilt as the Cedar request it was.
type Call struct {
	RequestID string
	Caller    string
	ToolID    string
	// ReceivedAt is when the gateway received the request (request.json).
	ReceivedAt time.Time
	// Request is the policy request, as the gateway built it.
	Request policy.Request
	// From is the policy's own word on the call (allow, deny or
	// approval_required), before any human approval changed the outcome.
	From string
	// RuleID and PolicySetDigest are those of the recorded decision.
	RuleID          string
	PolicySetDigest string
	// Shadow is the recorded shadow set's decision, if any.
	Shadow *evidence.ShadowDecision

	gaps gaps
}

// gaps are what the record does not say of what a rule may read.
type gaps struct {
	// argKeys are the top-level argument names whose values were
	// redacted; anyArg is set when one such name cannot be told.
	argKeys []string
	anyArg  bool
	// noPrincipal, noTool, noHistory: the record lacks the caller's
	// attributes, the tool's, or the history facts.
	noPrincipal, noTool, noHistory bool
}

// NotReplayable is the error of a call that cannot be decided again
// faithfully; its text says why.
type NotReplayable struct{ Why string }

func (e *NotReplayable) Error() string { return e.Why }

func notReplayable(format string, a ...any) error {
	return &NotReplayable{Why: fmt.Sprintf(format, a...)}
}

// GatewayRule reports whether rule is one the gateway decides by itself,
// before or beyond what a policy set says: no set decided it, so no set
// can be asked again.
func GatewayRule(rule string) bool {
	switch rule {
	case "unknown_tool", "approval_stale", policy.RulePolicyRefNotSelectable, policy.RuleHistoryError:
		return true
	}
	return false
}

// ParseCall rebuilds the call of request id from its request.json, the
// policy_decision.json of the attempt to replay, and the redactions its
// manifest lists. A record that cannot be read, or that describes a
// decision no policy set made, is a *NotReplayable error; the call then
// still names its caller, tool and time of receipt when both records were
// read and agree, so that a filter can tell whether it was asked for.
func ParseCall(id string, request, decision []byte, redactions []evidence.Redaction) (Call, error) {
	var d evidence.DecisionRecord
	if err := evidence.DecodeRecord(decision, &d); err != nil {
		return Call{}, notReplayable("%s unreadable: %v", evidence.ArtifactPolicyDecision, err)
	}
	return parseCall(id, request, d, redactions)
}

// parseCall is ParseCall with the decision record already decoded by
// evidence.DecodeRecord.
func parseCall(id string, request []byte, d evidence.DecisionRecord, redactions []evidence.Redaction) (Call, error) {
	req, err := evidence.DecodeRequestRecord(request)
	if err != nil {
		return Call{}, notReplayable("%s unreadable: %v", evidence.ArtifactRequest, err)
	}
	if err := consistent(id, req, d); err != nil {
		return Call{}, err
	}
	named := Call{RequestID: id, Caller: d.Caller, ToolID: d.ToolID, ReceivedAt: req.ReceivedAt}
	from, err := policyWord(d)
	if err != nil {
		return named, err
	}
	args, err := decodeArgs(req.Args)
	if err != nil {
		return named, notReplayable("%s: args: %v", evidence.ArtifactRequest, err)
	}
	c := Call{
		RequestID: id, Caller: d.Caller, ToolID: d.ToolID, ReceivedAt: req.ReceivedAt,
		From: from, RuleID: d.RuleID, PolicySetDigest: d.PolicySetDigest, Shadow: d.Shadow,
		Request: policy.Request{
			Caller: d.Caller, Action: d.Action, ToolID: d.ToolID, Driver: d.Driver,
			RequestID: id, RunID: req.Ctx.RunID, StepID: req.Ctx.StepID, PolicyRef: req.Ctx.PolicyRef,
			ParentRequestID: d.ParentRequestID, Args: args,
		},
	}
	c.gaps.noPrincipal, c.gaps.noTool, c.gaps.noHistory = d.Principal == nil, d.Tool == nil, d.History == nil
	if p := d.Principal; p != nil {
		c.Request.CallerAttrs = policy.CallerAttributes{Groups: p.Groups, Roles: p.Roles}
	}
	if t := d.Tool; t != nil {
		c.Request.Tool = policy.ToolAttributes{Package: t.Package, Export: t.Export, Version: t.Version, Tags: t.Tags}
	}
	if h := d.History; h != nil {
		c.Request.History = policy.History{Calls: h.Calls, ToolCalls: h.ToolCalls, Labels: h.Labels,
			CallsLastMinute: h.CallsLastMinute, ToolCallsLastMinute: h.ToolCallsLastMinute}
	}
	if err := c.gaps.redacted(redactions); err != nil {
		return named, err
	}
	return c, nil
}

// consistent checks that the two records describe one call.
func consistent(id string, req evidence.RequestRecord, d evidence.DecisionRecord) error {
	switch {
	case req.RequestID != id:
		return notReplayable("%s names request %s", evidence.ArtifactRequest, strconv.Quote(req.RequestID))
	case d.RequestID != id:
		return notReplayable("%s names request %s", evidence.ArtifactPolicyDecision, strconv.Quote(d.RequestID))
	case d.Caller != req.Caller || d.ToolID != req.ToolID || d.ParentRequestID != req.ParentRequestID:
		return notReplayable("%s and %s disagree on the caller, the tool or the parent request",
			evidence.ArtifactRequest, evidence.ArtifactPolicyDecision)
	case d.Action != policy.ActionRunTool && d.Action != policy.ActionCallTool:
		return notReplayable("%s: action %s is not a tool call", evidence.ArtifactPolicyDecision, strconv.Quote(d.Action))
	}
	return nil
}

// policyWord returns what the policy set itself said of the call: a
// decision linked to a settled approval records the human's outcome, not
// the policy's.
func policyWord(d evidence.DecisionRecord) (string, error) {
	if GatewayRule(d.RuleID) {
		return "", notReplayable("decided by the gateway, not by a policy set (rule %s)", d.RuleID)
	}
	switch d.Decision {
	case policy.WordAllow, policy.WordDeny, policy.WordApprovalRequired:
	default:
		return "", notReplayable("%s: decision %s is none of allow, deny, approval_required",
			evidence.ArtifactPolicyDecision, strconv.Quote(d.Decision))
	}
	a := d.Approval
	if a == nil || a.Outcome == evidence.ApprovalPending {
		return d.Decision, nil
	}
	if d.Decision == policy.WordAllow && a.PolicySetChanged {
		// Allowed under a set other than the one the approval was asked
		// under: whether that set held the call or allowed it outright,
		// the record does not say.
		return "", notReplayable("allowed by approval %s under another policy set than asked for it: the set's own word is not on record",
			a.ApprovalID)
	}
	// The call was held for approval; allow, deny, expiry and use are
	// what people and time made of it.
	return policy.WordApprovalRequired, nil
}

// decodeArgs decodes request.json's canonical arguments as the gateway
// handed them to policy: numbers kept as json.Number.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return args, nil
}

// redacted notes the arguments redacted from request.json. A redaction
// anywhere else in what the Cedar request is built from makes the call
// not replayable: the caller, the tool, the ids and the history facts are
// read by every decision.
func (g *gaps) redacted(redactions []evidence.Redaction) error {
	for _, r := range redactions {
		switch r.Artifact {
		case evidence.ArtifactRequest:
			if err := g.redactedRequest(r); err != nil {
				return err
			}
		case "", evidence.ArtifactPolicyDecision:
			if !decisionProse(r.Path) || r.Omitted > 0 {
				return notReplayable("%s had a secret redacted (rule %s) from what the decision is rebuilt from",
					evidence.ArtifactPolicyDecision, r.Rule)
			}
		}
	}
	return nil
}

func (g *gaps) redactedRequest(r evidence.Redaction) error {
	if r.Omitted > 0 {
		// A count of redactions whose paths were not kept: any
		// argument, or any field, may be among them.
		return notReplayable("%s had %d secrets redacted (rule %s) at places the manifest does not list",
			evidence.ArtifactRequest, r.Omitted, r.Rule)
	}
	rest, ok := strings.CutPrefix(r.Path, "$.args")
	if !ok || rest == "" {
		return notReplayable("%s had a secret redacted (rule %s) at %s, outside the arguments",
			evidence.ArtifactRequest, r.Rule, strconv.Quote(r.Path))
	}
	key, ok := topKey(rest)
	if !ok {
		g.anyArg = true
		return nil
	}
	g.argKeys = append(g.argKeys, key)
	return nil
}

// decisionProse reports whether path, in policy_decision.json, is text the
// decision explains itself with, which no rule reads.
func decisionProse(path string) bool {
	for _, p := range []string{"$.reason", "$.suggestion", "$.errors", "$.shadow.reason"} {
		if path == p || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// topKey returns the argument name that starts rest, the part of a
// redaction path after "$.args": ".name…" or "[\"quoted name\"]…".
func topKey(rest string) (string, bool) {
	switch {
	case strings.HasPrefix(rest, "."):
		name := rest[1:]
		if i := strings.IndexAny(name, ".[<"); i >= 0 {
			name = name[:i]
		}
		return name, name != ""
	case strings.HasPrefix(rest, `["`):
		quoted := rest[1:]
		end := closingQuote(quoted)
		if end < 0 || !strings.HasPrefix(quoted[end+1:], "]") {
			return "", false
		}
		var name string
		if err := json.Unmarshal([]byte(quoted[:end+1]), &name); err != nil {
			return "", false
		}
		return name, true
	}
	return "", false
}

// closingQuote returns the index in s, which starts with a quote, of the
// quote that ends that JSON string, or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}
