package evidence

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseApprovalUseRecord: approval_use.json comes from the store,
// which anyone may write; a record the parser accepts belongs to the
// request asked about, names a valid user and re-encodes to a record
// that parses to the same.
func FuzzParseApprovalUseRecord(f *testing.F) {
	h, d := "sha256:"+strings.Repeat("a", 64), strings.Repeat("b", 64)
	good := `{"request_id":"r1","approval_id":"apr_` + strings.Repeat("a", 26) + `","used_by":"r2",` +
		`"canonical_request_hash":"` + h + `","policy_set_digest":"` + h + `","rule_id":"x",` +
		`"approval_sha256":"` + d + `","used_at":"2026-01-01T00:00:00Z","gateway":"g"}`
	for _, seed := range []struct{ data, id string }{
		{good, "r1"},
		{good, "r2"},
		{strings.Replace(good, `"r2"`, `"../r2"`, 1), "r1"},
		{strings.Replace(good, `"used_by":"r2",`, `"used_by":"r2","used_by":"r3",`, 1), "r1"},
		{good + " trailing", "r1"},
		{`null`, ""},
	} {
		f.Add(seed.data, seed.id)
	}
	f.Fuzz(func(t *testing.T, data, id string) {
		u, err := ParseApprovalUseRecord([]byte(data), id)
		if err != nil {
			return
		}
		if u.RequestID != id || validRequestID(u.UsedBy) != nil || ValidApprovalID(u.ApprovalID) != nil {
			t.Fatalf("accepted %+v for %q", u, id)
		}
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := ParseApprovalUseRecord(b, id); err != nil || again != u {
			t.Fatalf("re-encoded %s: %+v %v", b, again, err)
		}
	})
}
