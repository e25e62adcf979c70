package gateway

import (
	"fmt"
	"slices"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
)

// RulePolicyRefNotSelectable is the rule_id of a call denied because its
// ctx.policy_ref names a set this caller may not select: a shadow
// candidate, or a set policies.selectable does not give the caller.
const RulePolicyRefNotSelectable = policy.RulePolicyRefNotSelectable

// selection says which policy sets a caller may name in ctx.policy_ref.
// RunTool, nested calls and ListTools all ask it, so no path lets a caller
// be judged by a set it could not name directly.
type selection struct {
	// shadowOf maps each shadow candidate to the set it shadows.
	shadowOf map[string]string
	// rules restrict selection when restricted is set.
	rules      []config.PolicySelection
	restricted bool
}

func newSelection(shadows map[string]string, rules []config.PolicySelection) selection {
	s := selection{shadowOf: map[string]string{}, rules: rules, restricted: rules != nil}
	for enforcing, candidate := range shadows {
		s.shadowOf[candidate] = enforcing
	}
	return s
}

// allows reports whether caller, with attrs, may be judged by the set ref
// (the effective policy_ref, never empty); when not, the reason says why.
func (s selection) allows(caller string, attrs policy.CallerAttributes, ref string) (string, bool) {
	if enforcing, ok := s.shadowOf[ref]; ok {
		return fmt.Sprintf("policy set %q is the shadow candidate of %q: it is evaluated beside it and recorded, never enforced, so ctx.policy_ref cannot name it", ref, enforcing), false
	}
	if ref == defaultPolicy || !s.restricted {
		return "", true
	}
	for _, r := range s.rules {
		if !slices.Contains(r.Refs, ref) {
			continue
		}
		if slices.Contains(r.Callers, caller) || slices.ContainsFunc(r.Groups, func(g string) bool { return slices.Contains(attrs.Groups, g) }) {
			return "", true
		}
	}
	return fmt.Sprintf("caller %q may not select policy set %q: policies.selectable does not give it to this caller or its groups", caller, ref), false
}
