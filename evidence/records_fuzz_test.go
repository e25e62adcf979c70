package evidence

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseAttemptKey checks ParseAttemptKey, which the verifier applies
// to every key found in a request's folder, keys an attacker with bucket
// access chooses: it never accepts a key outside the request's folder or
// with a non-canonical attempt number, whatever it accepts AttemptKey
// rebuilds exactly, and every key AttemptKey builds parses back.
func FuzzParseAttemptKey(f *testing.F) {
	for _, seed := range []struct {
		id, key string
		n       int
		name    string
	}{
		{"r1", "requests/r1/dispatch.json", 2, ArtifactDispatch},
		{"r1", "requests/r1/attempts/2/policy_decision.json", 1, ArtifactRequest},
		{"r1", "requests/r1/attempts/02/dispatch.json", 10, ArtifactNotDispatched},
		{"r1", "requests/r1/attempts/1/dispatch.json", 3, "x"},
		{"r1", "requests/r10/attempts/2/dispatch.json", 2, ArtifactDispatch},
		{"r1", "requests/r1/attempts/2/sub/dispatch.json", 2, "attempts"},
		{"r1", "requests/r1/attempts/+2/dispatch.json", 2, ArtifactDispatch},
		{"a", "requests/a/attempts/9999999999999999999999/x", 7, "y"},
	} {
		f.Add(seed.id, seed.key, seed.n, seed.name)
	}
	f.Fuzz(func(t *testing.T, id, key string, n int, name string) {
		attempt, got, ok := ParseAttemptKey(id, key)
		if ok {
			if !strings.HasPrefix(key, RequestPrefix(id)) {
				t.Fatalf("ParseAttemptKey(%q, %q) accepted a key outside the request's folder", id, key)
			}
			if attempt < 1 || (attempt > 1 && strings.Contains(got, "/")) {
				t.Fatalf("ParseAttemptKey(%q, %q) = %d, %q", id, key, attempt, got)
			}
			if rebuilt := AttemptKey(id, attempt, got); rebuilt != key {
				t.Fatalf("ParseAttemptKey(%q, %q) = %d, %q, which AttemptKey rebuilds as %q", id, key, attempt, got, rebuilt)
			}
		}
		// The other direction, for the keys the gateway writes: a valid
		// request id, an attempt from 1 and a single-segment name.
		if n < 1 || validRequestID(id) != nil || validRequestID(name) != nil {
			return
		}
		built := AttemptKey(id, n, name)
		if a, nm, ok := ParseAttemptKey(id, built); !ok || a != n || nm != name {
			t.Fatalf("ParseAttemptKey(%q, AttemptKey(%q, %d, %q) = %q) = %d, %q, %v", id, id, n, name, built, a, nm, ok)
		}
	})
}

// FuzzParseDispatchRecord checks ParseDispatchRecord on stored bytes an
// attacker may have written: it never panics, and a record it accepts
// belongs to the request and attempt asked for, has a known state, and
// survives a round trip through JSON unchanged.
func FuzzParseDispatchRecord(f *testing.F) {
	for _, seed := range []struct {
		data, id string
		attempt  int
	}{
		{`{"request_id":"r1","attempt":1,"state":"dispatched","gateway":"toolgate/1@a","at":"2025-01-01T00:00:00Z"}`, "r1", 1},
		{`{"request_id":"r1","attempt":2,"state":"not_dispatched","reason":"connection refused","gateway":"g","at":"2025-01-01T00:00:00Z"}`, "r1", 2},
		{`{"request_id":"r2","attempt":1,"state":"dispatched"}`, "r1", 1},
		{`{"request_id":"r1","attempt":1,"state":"skipped"}`, "r1", 1},
		{`{"request_id":"r1","attempt":"1","state":"dispatched"}`, "r1", 1},
		{`{"request_id":"r1","attempt":1,"state":"dispatched","state":"not_dispatched"}`, "r1", 1},
		{`{"request_id":"r1","attempt":1,"state":"dispatched"} trailing`, "r1", 1},
		{`null`, "", 0},
	} {
		f.Add([]byte(seed.data), seed.id, seed.attempt)
	}
	f.Fuzz(func(t *testing.T, data []byte, id string, attempt int) {
		d, err := ParseDispatchRecord(data, id, attempt)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "evidence: dispatch record: ") {
				t.Fatalf("ParseDispatchRecord error %q lacks the package prefix", err)
			}
			return
		}
		if d.RequestID != id || d.Attempt != attempt || (d.State != Dispatched && d.State != NotDispatched) {
			t.Fatalf("ParseDispatchRecord(%q, %q, %d) accepted %+v", data, id, attempt, d)
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatalf("marshal %+v: %v", d, err)
		}
		d2, err := ParseDispatchRecord(again, id, attempt)
		// A time's zone is a pointer, so At is compared as an instant.
		sameAt := err == nil && d2.At.Equal(d.At)
		d2.At = d.At
		if err != nil || !sameAt || d2 != d {
			t.Fatalf("round trip of %+v gave %+v, %v (JSON %s)", d, d2, err, strconv.Quote(string(again)))
		}
	})
}

// utc normalises times for comparison: a time's zone is a pointer, so
// times are compared as instants.
func utc(ts ...*time.Time) {
	for _, t := range ts {
		*t = t.UTC()
	}
}

// FuzzParseApprovalRequestRecord checks ParseApprovalRequestRecord on
// stored bytes an attacker may have written: it never panics, and a
// record it accepts belongs to the request asked for, has a valid
// approval id, an attempt, an expiry after the time of asking, and
// survives a round trip through JSON unchanged.
func FuzzParseApprovalRequestRecord(f *testing.F) {
	good, _ := json.Marshal(testApprovalRequestSeed())
	for _, seed := range []struct{ data, id string }{
		{string(good), "r1"},
		{string(good), "r2"},
		{strings.Replace(string(good), `"attempt":1`, `"attempt":1,"attempt":2`, 1), "r1"},
		{strings.Replace(string(good), `"attempt":1`, `"attempt":1e0`, 1), "r1"},
		{strings.Replace(string(good), `"request_id"`, `"REQUEST_ID"`, 1), "r1"},
		{string(good) + "}", "r1"},
		{`{"request_id":"r1","approval_id":"apr_abcdefghijklmnopqrstuvwxy5"}`, "r1"},
		{`null`, ""},
	} {
		f.Add([]byte(seed.data), seed.id)
	}
	f.Fuzz(func(t *testing.T, data []byte, id string) {
		a, err := ParseApprovalRequestRecord(data, id)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "evidence: approval request record: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		if a.RequestID != id || ValidApprovalID(a.ApprovalID) != nil || a.Attempt < 1 || !a.ExpiresAt.After(a.RequestedAt) {
			t.Fatalf("ParseApprovalRequestRecord(%q, %q) accepted %+v", data, id, a)
		}
		again, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("marshal %+v: %v", a, err)
		}
		a2, err := ParseApprovalRequestRecord(again, id)
		utc(&a.RequestedAt, &a.ExpiresAt, &a2.RequestedAt, &a2.ExpiresAt)
		if err != nil || a2 != a {
			t.Fatalf("round trip of %+v gave %+v, %v", a, a2, err)
		}
	})
}

// FuzzParseApprovalRecord checks ParseApprovalRecord likewise: a record it
// accepts belongs to the request, decides with one of the three words,
// carries an authorization exactly when someone decided, and survives a
// round trip unchanged.
func FuzzParseApprovalRecord(f *testing.F) {
	good, _ := json.Marshal(testApprovalRecordSeed())
	for _, seed := range []struct{ data, id string }{
		{string(good), "r1"},
		{strings.Replace(string(good), `"decision":"approve"`, `"decision":"allow"`, 1), "r1"},
		{strings.Replace(string(good), `"decision":"approve"`, `"decision":"deny","decision":"approve"`, 1), "r1"},
		{strings.Replace(string(good), `"decision":"approve"`, `"decision":"expired"`, 1), "r1"},
		{strings.Replace(string(good), `"rule_id":"ops-approve"`, `"rule_id":"ops-approve","admin":true`, 1), "r1"},
		{string(good), "r2"},
		{`{}}`, ""},
	} {
		f.Add([]byte(seed.data), seed.id)
	}
	f.Fuzz(func(t *testing.T, data []byte, id string) {
		v, err := ParseApprovalRecord(data, id)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "evidence: approval record: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		decided := v.Decision == ApprovalApprove || v.Decision == ApprovalDeny
		if v.RequestID != id || ValidApprovalID(v.ApprovalID) != nil || (!decided && v.Decision != ApprovalExpired) ||
			decided != (v.Authorization != nil) {
			t.Fatalf("ParseApprovalRecord(%q, %q) accepted %+v", data, id, v)
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal %+v: %v", v, err)
		}
		v2, err := ParseApprovalRecord(again, id)
		utc(&v.DecidedAt, &v2.DecidedAt)
		if err != nil || !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip of %+v gave %+v, %v", v, v2, err)
		}
	})
}

func testApprovalRequestSeed() ApprovalRequestRecord {
	return ApprovalRequestRecord{RequestID: "r1", ApprovalID: "apr_abcdefghijklmnopqrstuvwxy4", Attempt: 1, Caller: "bob",
		ToolID: "fs.delete", CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		PolicySetDigest: "sha256:" + strings.Repeat("cd", 32), RuleID: "ops-deletes", Approvers: "ops",
		RequestedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ExpiresAt: time.Date(2026, 1, 3, 3, 4, 5, 0, time.UTC),
		Gateway: "toolgate/test@gw-1"}
}

func testApprovalRecordSeed() ApprovalRecord {
	return ApprovalRecord{RequestID: "r1", ApprovalID: "apr_abcdefghijklmnopqrstuvwxy4", Decision: ApprovalApprove,
		Approver: "alice", DecidedAt: time.Date(2026, 1, 2, 4, 4, 5, 0, time.UTC), CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		PolicySetDigest: "sha256:" + strings.Repeat("cd", 32), RuleID: "ops-deletes", ApprovalRequestSHA256: strings.Repeat("0f", 32),
		Authorization: &ApproverDecision{RuleID: "ops-approve"}, Gateway: "toolgate/test@gw-1"}
}
