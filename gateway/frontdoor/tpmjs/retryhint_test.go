package tpmjsdoor

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestDenyBodyCarriesTheRetryHint: a rate-limit deny's retry hint is in
// the reply's toolgate.retry_after_ms; a deny without one leaves it out.
func TestDenyBodyCarriesTheRetryHint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ms   int64
		want any
	}{
		{"a rate-limit deny", 31000, float64(31000)},
		{"a deny time does not lift", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := &toolgatev1.RunToolResponse{
				PolicyCheck:  &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "rate", Reason: "too many", RetryAfterMs: tc.ms},
				EvidenceRefs: []string{"requests/r1/request.json"},
			}
			rec := httptest.NewRecorder()
			(&Door{}).writeJSON(rec, 200, replyOf("r1", resolved{toolID: "x"}, resp, 1))
			var body struct {
				Error    *protoError    `json:"error"`
				Toolgate map[string]any `json:"toolgate"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if got := body.Toolgate["retry_after_ms"]; got != tc.want || body.Error == nil || body.Error.Code != codePolicyDenied {
				t.Errorf("reply %s: toolgate.retry_after_ms %v, want %v, and a POLICY_DENIED error", rec.Body.String(), got, tc.want)
			}
		})
	}
}
