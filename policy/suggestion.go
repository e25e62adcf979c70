package policy

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
)

// AnnotationSuggestion tells a denied or held-back caller what to do
// instead: @suggestion("use the fetch tool instead"). It is recorded with
// the decision (policy_decision.json's suggestion, PolicyCheck.suggestion)
// and shown to agents by front doors that have a place for it (an Agent
// Spaces policyDenied event). It is the same for every caller, and so
// leaks nothing a rule's @reason does not.
const AnnotationSuggestion = "suggestion"

// maxSuggestionBytes bounds a suggestion: it is copied into the evidence of
// every call the rule decides.
const maxSuggestionBytes = 512

// suggestionProblems reports what is wrong with p's @suggestion, if it has
// one. Either effect may carry it: a forbid says what to use instead, a
// permit marked @approval what to do while waiting.
func suggestionProblems(p *cedar.Policy) []string {
	v, ok := p.Annotations()[AnnotationSuggestion]
	if !ok {
		return nil
	}
	s := string(v)
	switch {
	case s == "":
		return []string{"@suggestion must not be empty"}
	case len(s) > maxSuggestionBytes:
		return []string{fmt.Sprintf("@suggestion: %d bytes, the limit is %d", len(s), maxSuggestionBytes)}
	case !utf8.ValidString(s):
		return []string{"@suggestion must be valid UTF-8"}
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return []string{fmt.Sprintf("@suggestion must hold printable characters only, on one line (found %U)", r)}
		}
	}
	return nil
}
