package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// History.
//
// A call is judged with the history of its session and of its caller:
//
//	context.session.calls         Long: earlier calls of the session that were
//	                              allowed and dispatched
//	context.session.toolCalls     Long: of those, calls of this same tool
//	context.session.labels        Set<String>: labels the session acquired
//	context.caller.callsLastMinute      Long: the caller's dispatched calls in
//	                                    the last 60 s, all tools
//	context.caller.toolCallsLastMinute  Long: the same, of this tool
//
// Both records are always present (zeroes and an empty set for a first
// call), so rules need no `has` guard. Caller-scoped labels are in
// context.session.labels as well: a rule cannot tell, and need not, whether
// a label came from this run or an earlier one of the caller.
//
// A permit marked @label("x") adds label x to the session of a call it
// allowed once that call is dispatched; @caller_label("x") adds it to every
// later session of the caller, so that starting a new run does not wash it
// off. Either may list several labels: @label("sensitive, pii").

// Annotations that label sessions.
const (
	// AnnotationLabel lists labels a permit adds to the call's session.
	AnnotationLabel = "label"
	// AnnotationCallerLabel lists labels a permit adds to the caller.
	AnnotationCallerLabel = "caller_label"
)

// History holds the facts about a call's past that Cedar sees as
// context.session and context.caller.
type History struct {
	// Calls and ToolCalls count the session's earlier dispatched calls,
	// all tools and this one.
	Calls, ToolCalls int64
	// Labels are the session's labels, caller-scoped ones included.
	Labels []string
	// CallsLastMinute and ToolCallsLastMinute count the caller's dispatched
	// calls in the last 60 s, all tools and this one.
	CallsLastMinute, ToolCallsLastMinute int64
}

// A first call's records, built once: a call with no history (every call
// of a deployment whose rules never read it) costs no allocation for them.
// Cedar values are immutable, so sharing them is safe.
var (
	firstSession = History{}.buildSession()
	firstCaller  = History{}.buildCaller()
)

// sessionRecord is context.session of h.
func (h History) sessionRecord() types.Record {
	if h.Calls == 0 && h.ToolCalls == 0 && len(h.Labels) == 0 {
		return firstSession
	}
	return h.buildSession()
}

func (h History) buildSession() types.Record {
	return types.NewRecord(types.RecordMap{
		"calls":     types.Long(h.Calls),
		"toolCalls": types.Long(h.ToolCalls),
		"labels":    stringSet(h.Labels),
	})
}

// callerRecord is context.caller of h.
func (h History) callerRecord() types.Record {
	if h.CallsLastMinute == 0 && h.ToolCallsLastMinute == 0 {
		return firstCaller
	}
	return h.buildCaller()
}

func (h History) buildCaller() types.Record {
	return types.NewRecord(types.RecordMap{
		"callsLastMinute":     types.Long(h.CallsLastMinute),
		"toolCallsLastMinute": types.Long(h.ToolCallsLastMinute),
	})
}

// labelPattern is what a label may look like: it is copied into every
// later decision's evidence of the session, and compared in rules.
var labelPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// maxLabelsPerRule bounds the labels one annotation may list.
const maxLabelsPerRule = 16

// ValidLabel reports whether s may be a label (of a rule or of a catalog
// tool): 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'.
func ValidLabel(s string) bool { return labelPattern.MatchString(s) }

// splitLabels parses an annotation's comma-separated label list.
func splitLabels(v string) ([]string, error) {
	parts := strings.Split(v, ",")
	if len(parts) > maxLabelsPerRule {
		return nil, fmt.Errorf("%d labels, the limit is %d", len(parts), maxLabelsPerRule)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if !ValidLabel(p) {
			return nil, fmt.Errorf("label %q must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'", p)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// labelAnnotationProblems returns what is wrong with p's @label and
// @caller_label annotations.
func labelAnnotationProblems(p *cedar.Policy) []string {
	ann := p.Annotations()
	var msgs []string
	for _, key := range []string{AnnotationLabel, AnnotationCallerLabel} {
		v, ok := ann[types.AnnotationKey(key)]
		if !ok {
			continue
		}
		if p.Effect() == cedar.Forbid {
			msgs = append(msgs, fmt.Sprintf("@%s is allowed only on a permit: a forbid dispatches nothing to label", key))
			continue
		}
		if _, err := splitLabels(string(v)); err != nil {
			msgs = append(msgs, fmt.Sprintf("@%s(%q): %v", key, string(v), err))
		}
	}
	return msgs
}

// policyLabels returns the labels p's annotations list, session- and
// caller-scoped; the annotations were checked at load.
func policyLabels(p *cedar.Policy) (session, caller []string) {
	ann := p.Annotations()
	if v, ok := ann[AnnotationLabel]; ok {
		session, _ = splitLabels(string(v))
	}
	if v, ok := ann[AnnotationCallerLabel]; ok {
		caller, _ = splitLabels(string(v))
	}
	return session, caller
}

// addLabels sets d's labels for a call that may be dispatched: those of
// every matching permit (a call two permits allow read what both
// describe), and the tool's catalog labels.
func addLabels(d Decision, set *policySet, reasons []cedar.DiagnosticReason, tool ToolAttributes) Decision {
	session := slices.Clone(tool.Labels)
	var caller []string
	for _, r := range reasons {
		p := set.byID[r.PolicyID]
		session = append(session, p.labels...)
		caller = append(caller, p.callerLabels...)
	}
	d.Labels = sortedUnique(session)
	d.CallerLabels = sortedUnique(caller)
	return d
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// usesHistory reports whether p reads the history facts or labels
// sessions. It looks for the words in the policy's text, so a string
// literal holding one counts too: a false positive only keeps history for
// nothing, never decides without it.
func usesHistory(p *cedar.Policy) bool {
	ann := p.Annotations()
	if _, ok := ann[AnnotationLabel]; ok {
		return true
	}
	if _, ok := ann[AnnotationCallerLabel]; ok {
		return true
	}
	// The policy's text without its annotations, whose prose ("every
	// caller may…") would otherwise turn history on for every call. What
	// is left may still name either word elsewhere (in a string, an
	// entity id); a false positive costs a write, a false negative would
	// decide on empty history.
	bare := *p.AST()
	bare.Annotations = nil
	text := string(cedar.NewPolicyFromAST(&bare).MarshalCedar())
	return strings.Contains(text, "session") || strings.Contains(text, "caller")
}

// UsesHistory reports whether any loaded policy reads context.session or
// context.caller or carries @label or @caller_label: the gateway keeps
// history only while its policies need it.
func (e *Engine) UsesHistory() bool {
	for _, set := range e.sets {
		if set.history {
			return true
		}
	}
	return false
}

// UsesHistory reports whether the current Engine's policies use history.
func (l *Live) UsesHistory() bool { return l.Engine().UsesHistory() }
