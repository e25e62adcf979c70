package mcpdoor

import (
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestDenyMetaCarriesTheRetryHint: a rate-limit deny's retry hint is in
// the result's _meta decision as retryAfterMs, a number a client reads
// without parsing the reason; a deny without one has none.
func TestDenyMetaCarriesTheRetryHint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		pc   *toolgatev1.PolicyCheck
		want any
	}{
		{"a rate-limit deny", &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "rate", Reason: "too many (retry after 31s)", RetryAfterMs: 31000}, int64(31000)},
		{"a deny time does not lift", &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "default_deny", Reason: "no"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := resultOf("r1", &toolgatev1.RunToolResponse{PolicyCheck: tc.pc, EvidenceRefs: []string{"requests/r1/request.json"}})
			dec, _ := res.Meta[MetaDecision].(map[string]any)
			if got := dec["retryAfterMs"]; got != tc.want || !res.IsError {
				t.Errorf("_meta decision %v (isError %v): retryAfterMs %v, want %v", dec, res.IsError, got, tc.want)
			}
		})
	}
}
