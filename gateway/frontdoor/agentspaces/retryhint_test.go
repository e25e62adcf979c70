package agentspaces

import (
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestPolicyDeniedEventCarriesTheRetryHint: a rate-limit deny's retry
// hint is in the policyDenied event's toolgate.retry_after_ms; a deny
// without one leaves it 0 (omitted).
func TestPolicyDeniedEventCarriesTheRetryHint(t *testing.T) {
	t.Parallel()
	for _, ms := range []int64{31000, 0} {
		resp := &toolgatev1.RunToolResponse{PolicyCheck: &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "rate", Reason: "too many", RetryAfterMs: ms}}
		out := callOutcome(time.Now(), operation{Type: opShell, ID: "op"}, "r1", resp)
		if out.event.Type != eventPolicyDenied || out.event.Toolgate == nil || out.event.Toolgate.RetryAfterMS != ms {
			t.Errorf("retry_after_ms %d: event %+v (toolgate %+v)", ms, out.event, out.event.Toolgate)
		}
	}
}
