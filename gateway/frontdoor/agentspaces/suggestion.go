package agentspaces

import toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"

// suggestionOf is the deciding rule's @suggestion, when the policy check
// carries one.
func suggestionOf(pc *toolgatev1.PolicyCheck) string {
	if s, ok := any(pc).(interface{ GetSuggestion() string }); ok {
		return s.GetSuggestion()
	}
	return ""
}
