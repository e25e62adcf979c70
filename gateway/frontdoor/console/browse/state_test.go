package browse

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence"
)

func TestIndexDerivesEachRequestsState(t *testing.T) {
	t.Parallel()
	dispatch := func(id string, attempt int, state string) string {
		return fmt.Sprintf(`{"request_id":%q,"attempt":%d,"state":%q,"gateway":"g","at":"2026-01-01T00:00:00Z"}`, id, attempt, state)
	}
	tests := []struct {
		name  string
		files map[string]string // artifact name → content
		want  string
	}{
		{name: "claimed", files: map[string]string{evidence.ArtifactRequest: `{"caller":"a"}`}, want: StateClaimed},
		{name: "decided", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactPolicyDecision: `{"decision":"allow"}`}, want: StateDecided},
		{name: "dispatched", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactPolicyDecision: `{"decision":"allow"}`,
			evidence.ArtifactDispatch: dispatch("ID", 1, evidence.Dispatched)}, want: StateDispatched},
		{name: "not dispatched", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactPolicyDecision: `{"decision":"allow"}`,
			evidence.ArtifactDispatch: dispatch("ID", 1, evidence.NotDispatched)}, want: StateNotDispatched},
		{name: "pending approval", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactPolicyDecision: `{"decision":"approval_required"}`,
			evidence.ArtifactApprovalRequest: `{}`}, want: StatePendingApproval},
		{name: "failed", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactManifest: `{"outcome":"failed"}`}, want: evidence.OutcomeFailed},
		{name: "a manifest that does not parse", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactManifest: `{`}, want: "unreadable"},
		{name: "a dispatch record that does not parse", files: map[string]string{evidence.ArtifactRequest: `{}`, evidence.ArtifactDispatch: `<x>`}, want: "unreadable"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := evidence.NewMemoryStore()
			id := fmt.Sprintf("s%d", i)
			for name, data := range tc.files {
				if err := s.Put(context.Background(), evidence.Key(id, name), []byte(strings.ReplaceAll(data, `"ID"`, strconv.Quote(id)))); err != nil {
					t.Fatal(err)
				}
			}
			x := NewIndex(s, nil)
			if err := x.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, ok := x.Get(id); !ok || got.State != tc.want {
				t.Fatalf("state %q (found %v), want %q", got.State, ok, tc.want)
			}
		})
	}
}
