package evidence

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestNewApprovalIDsAreValidAndDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		id := NewApprovalID()
		if err := ValidApprovalID(id); err != nil {
			t.Fatal(err)
		}
		if len(id) != len("apr_")+26 || seen[id] {
			t.Fatalf("id %q: wrong length or repeated", id)
		}
		seen[id] = true
	}
}

func TestValidApprovalIDRefusesEveryOtherSpelling(t *testing.T) {
	t.Parallel()
	good := "apr_abcdefghijklmnopqrstuvwxy4"
	if err := ValidApprovalID(good); err != nil {
		t.Fatalf("%q: %v", good, err)
	}
	for _, tc := range []struct{ name, id string }{
		{"no prefix", good[4:]},
		{"another prefix", "req_" + good[4:]},
		{"upper case", "apr_" + strings.ToUpper(good[4:])},
		{"one character short", good[:len(good)-1]},
		{"one character long", good + "a"},
		{"padding", good[:len(good)-1] + "="},
		{"a digit base32 lacks", "apr_abcdefghijklmnopqrstuvwxy1"},
		{"a last character with stray bits, a second spelling of one id", "apr_abcdefghijklmnopqrstuvwxy5"},
		{"a path", "apr_../../../../etc/passwdxxxx"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidApprovalID(tc.id); err == nil {
				t.Fatalf("ValidApprovalID(%q) accepted it", tc.id)
			}
		})
	}
}

func testApprovalRequest() ApprovalRequestRecord {
	return ApprovalRequestRecord{RequestID: "r1", ApprovalID: "apr_abcdefghijklmnopqrstuvwxy4", Attempt: 1, Caller: "bob",
		Action: "call", ToolID: "fs.delete", Driver: "workspace", CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		PolicyRef: "default", PolicySetDigest: storyDigest, RuleID: storyRule, Approvers: "ops",
		RequestedAt: storyT0, ExpiresAt: storyExpires, Gateway: storyGateway}
}

func testApprovalRecord() ApprovalRecord {
	return ApprovalRecord{RequestID: "r1", ApprovalID: "apr_abcdefghijklmnopqrstuvwxy4", Decision: ApprovalApprove,
		Approver: "alice", DecidedAt: hourIn, CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		PolicySetDigest: storyDigest, RuleID: storyRule, ApprovalRequestSHA256: strings.Repeat("0f", 32),
		Authorization: &ApproverDecision{RuleID: "ops-approve"}, Gateway: storyGateway}
}

// mutateJSON marshals v, lets change edit it as a map, and returns the
// bytes.
func mutateJSON(t *testing.T, v any, change func(map[string]any)) []byte {
	t.Helper()
	data, _ := json.Marshal(v)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	change(m)
	out, _ := json.Marshal(m)
	return out
}

func TestParseApprovalRequestRecordRefusesWhatIsNotAnAsk(t *testing.T) {
	t.Parallel()
	good, _ := json.Marshal(testApprovalRequest())
	if _, err := ParseApprovalRequestRecord(good, "r1"); err != nil {
		t.Fatalf("a well-formed record: %v", err)
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	for _, tc := range []struct {
		name string
		data []byte
		id   string
	}{
		{"another request's", good, "r2"},
		{"an unknown field", mutateJSON(t, testApprovalRequest(), set("approved", true)), "r1"},
		{"a field given twice", []byte(strings.Replace(string(good), `"rule_id":"`, `"rule_id":"x","rule_id":"`, 1)), "r1"},
		{"a field given twice in another case", []byte(strings.Replace(string(good), `"rule_id":"`, `"RULE_ID":"x","rule_id":"`, 1)), "r1"},
		{"trailing data", append(append([]byte{}, good...), []byte(` {}`)...), "r1"},
		{"a malformed approval id", mutateJSON(t, testApprovalRequest(), set("approval_id", "apr_x")), "r1"},
		{"attempt 0", mutateJSON(t, testApprovalRequest(), set("attempt", 0)), "r1"},
		{"no caller", mutateJSON(t, testApprovalRequest(), set("caller", "")), "r1"},
		{"no tool", mutateJSON(t, testApprovalRequest(), set("tool_id", "")), "r1"},
		{"no rule", mutateJSON(t, testApprovalRequest(), set("rule_id", "")), "r1"},
		{"no approvers", mutateJSON(t, testApprovalRequest(), set("approvers", "")), "r1"},
		{"no gateway", mutateJSON(t, testApprovalRequest(), set("gateway", "")), "r1"},
		{"a hash without its prefix", mutateJSON(t, testApprovalRequest(), set("canonical_request_hash", strings.Repeat("ab", 32))), "r1"},
		{"a policy digest that is not one", mutateJSON(t, testApprovalRequest(), set("policy_set_digest", "latest")), "r1"},
		{"no time of asking", mutateJSON(t, testApprovalRequest(), set("requested_at", time.Time{})), "r1"},
		{"an expiry at the time of asking", mutateJSON(t, testApprovalRequest(), set("expires_at", storyT0)), "r1"},
		{"a nested request that is itself", mutateJSON(t, testApprovalRequest(), set("nested_request_id", "r1")), "r1"},
		{"a nested request that is a path", mutateJSON(t, testApprovalRequest(), set("nested_request_id", "../r2")), "r1"},
		{"null", []byte("null"), "r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseApprovalRequestRecord(tc.data, tc.id)
			if err == nil {
				t.Fatalf("accepted %s as %+v", tc.data, a)
			}
			if !strings.HasPrefix(err.Error(), "evidence: approval request record: ") {
				t.Fatalf("error %q lacks its prefix", err)
			}
		})
	}
}

func TestParseApprovalRecordRefusesWhatIsNotADecision(t *testing.T) {
	t.Parallel()
	good, _ := json.Marshal(testApprovalRecord())
	if _, err := ParseApprovalRecord(good, "r1"); err != nil {
		t.Fatalf("a well-formed record: %v", err)
	}
	expiry := testApprovalRecord()
	expiry.Decision, expiry.Authorization = ApprovalExpired, nil
	if data, _ := json.Marshal(expiry); func() error { _, err := ParseApprovalRecord(data, "r1"); return err }() != nil {
		t.Fatal("a well-formed expiry was refused")
	}
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"an unknown field", mutateJSON(t, testApprovalRecord(), set("override", true))},
		{"an unknown field in the authorization", mutateJSON(t, testApprovalRecord(), set("authorization", map[string]any{"rule_id": "x", "admin": true}))},
		{"a decision given twice", []byte(strings.Replace(string(good), `"decision":"approve"`, `"decision":"deny","decision":"approve"`, 1))},
		{"the decision allow", mutateJSON(t, testApprovalRecord(), set("decision", "allow"))},
		{"the decision Approve", mutateJSON(t, testApprovalRecord(), set("decision", "Approve"))},
		{"no decision", mutateJSON(t, testApprovalRecord(), set("decision", ""))},
		{"no approver", mutateJSON(t, testApprovalRecord(), set("approver", ""))},
		{"an approver that clears the screen", mutateJSON(t, testApprovalRecord(), set("approver", "alice\x1b[2J"))},
		{"an approver longer than a log entry takes", mutateJSON(t, testApprovalRecord(), set("approver", strings.Repeat("a", 257)))},
		{"a reason with a carriage return", mutateJSON(t, testApprovalRecord(), set("reason", "fine\rdenied"))},
		{"a reason longer than 1024 bytes", mutateJSON(t, testApprovalRecord(), set("reason", strings.Repeat("a", 1025)))},
		{"no time", mutateJSON(t, testApprovalRecord(), set("decided_at", time.Time{}))},
		{"an approval request digest in upper case", mutateJSON(t, testApprovalRecord(), set("approval_request_sha256", strings.Repeat("0F", 32)))},
		{"no approval request digest", mutateJSON(t, testApprovalRecord(), set("approval_request_sha256", ""))},
		{"an approve without authorization", mutateJSON(t, testApprovalRecord(), func(m map[string]any) { delete(m, "authorization") })},
		{"a deny whose authorization names no rule", mutateJSON(t, testApprovalRecord(), func(m map[string]any) {
			m["decision"], m["authorization"] = "deny", map[string]any{"rule_id": ""}
		})},
		{"an expiry with an authorization", mutateJSON(t, testApprovalRecord(), set("decision", "expired"))},
		{"another request's", mutateJSON(t, testApprovalRecord(), set("request_id", "r2"))},
		{"a malformed approval id", mutateJSON(t, testApprovalRecord(), set("approval_id", "APR_ABCDEFGHIJKLMNOPQRSTUVWXY4"))},
		{"an array", []byte("[]")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseApprovalRecord(tc.data, "r1")
			if err == nil {
				t.Fatalf("accepted %s as %+v", tc.data, v)
			}
			if !strings.HasPrefix(err.Error(), "evidence: approval record: ") {
				t.Fatalf("error %q lacks its prefix", err)
			}
		})
	}
}
