package evidence

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestVerifiedDecision: Verified hands out a decision record that decodes
// strictly exactly as DecodeRecord decodes it, and none that DecodeRecord
// refuses (an unknown field, a duplicate name), which verification still
// reads leniently: the request verifies either way.
func TestVerifiedDecision(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good, err := json.Marshal(DecisionRecord{RequestID: "r", Attempt: 1, Caller: "alice", ToolID: "t", Decision: "allow",
		RuleID: "read", DecidedAt: at, Errors: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data string
		ok         bool
	}{
		{"strict", string(good), true},
		{"unknown field", `{"request_id":"r","attempt":1,"decision":"allow","smuggled":1}`, false},
		{"duplicate", `{"request_id":"r","attempt":1,"decision":"allow","decision":"deny"}`, false},
		{"not json", `{`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := NewMemoryStore()
			key := Key("r", ArtifactPolicyDecision)
			m := Manifest{Version: ManifestVersion, RequestID: "r", Outcome: OutcomeCompleted, CreatedAt: at,
				Artifacts: []ArtifactDigest{Digest(key, []byte(tc.data))}}
			mb, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string][]byte{key: []byte(tc.data), Key("r", ArtifactManifest): mb} {
				if err := s.Put(ctx, k, v); err != nil {
					t.Fatal(err)
				}
			}
			calls := 0
			err = VerifyAllRead(ctx, s, VerifyOptions{}, func(rep VerifyReport, got Verified) error {
				calls++
				if rep.Tampered() {
					t.Errorf("verdict %s %q", rep.Verdict(), rep.Problems)
				}
				d, ok := got.Decision(key)
				if ok != tc.ok {
					t.Fatalf("Decision ok = %v, want %v", ok, tc.ok)
				}
				var want DecisionRecord
				if ok && (DecodeRecord([]byte(tc.data), &want) != nil || !reflect.DeepEqual(d, want)) {
					t.Errorf("Decision = %+v, want %+v", d, want)
				}
				return nil
			})
			if err != nil || calls != 1 {
				t.Fatalf("%d reports: %v", calls, err)
			}
			if _, ok := (Verified{}).Decision(key); ok {
				t.Error("an empty Verified hands out a decision")
			}
		})
	}
}
