package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

var errForeign = errors.New("another replica's")

// reader reads from a memory store, taking a record as its own unless it
// names a gateway "foreign@…" (another replica's) or "forged@…" (no
// trusted gateway's).
func reader(store evidence.Store) Reader {
	return Reader{
		Store: store,
		Attempts: func(ctx context.Context, id string, keys []string) ([]evidence.Attempt, error) {
			return evidence.ReadAttempts(ctx, store, id, keys)
		},
		OpenOwn: func(_ string, raw []byte) ([]byte, error) {
			switch {
			case bytes.Contains(raw, []byte(`"foreign@`)):
				return nil, errForeign
			case bytes.Contains(raw, []byte(`"forged@`)):
				return nil, trust.ErrTampered
			}
			return raw, nil
		},
		Foreign: func(err error) bool { return errors.Is(err, errForeign) },
	}
}

func put(t *testing.T, store evidence.Store, key string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), key, raw); err != nil {
		t.Fatal(err)
	}
}

func TestReadJudgesWhoseTheRequestIs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	hash := "sha256:" + strings.Repeat("a", 64)
	tests := []struct {
		name     string
		claim    string // the claim's gateway
		decision string // the decision's gateway; "" for none
		owner    string
		tampered bool
	}{
		{"its own claim", "gw@1", "", "gw@1", false},
		{"its own decision names the owner", "gw@1", "gw@2", "gw@2", false},
		{"another replica's claim", "foreign@1", "", "", false},
		{"another replica's claim, its own decision", "foreign@1", "gw@2", "gw@2", false},
		{"its claim, another replica's decision", "gw@1", "foreign@2", "", false},
		{"a forged claim", "forged@1", "", "", true},
		{"a forged decision", "gw@1", "forged@2", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := evidence.NewMemoryStore()
			put(t, store, evidence.Key("r1", evidence.ArtifactRequest), evidence.RequestRecord{
				RequestID: "r1", CanonicalRequestHash: hash, Gateway: tc.claim, ReceivedAt: at})
			if tc.decision != "" {
				put(t, store, evidence.AttemptKey("r1", 1, evidence.ArtifactPolicyDecision), evidence.DecisionRecord{
					Decision: "allow", Gateway: tc.decision, DecidedAt: at.Add(time.Second)})
			}
			ctx := context.Background()
			keys, err := store.List(ctx, evidence.RequestPrefix("r1"))
			if err != nil {
				t.Fatal(err)
			}
			s, err := reader(store).Read(ctx, "r1", keys)
			if tampered := errors.Is(err, trust.ErrTampered); tampered != tc.tampered {
				t.Fatalf("Read = %v; tampering %v, want %v", err, tampered, tc.tampered)
			}
			if err != nil {
				return
			}
			if s.Owner() != tc.owner {
				t.Fatalf("owner = %q, want %q", s.Owner(), tc.owner)
			}
			want := at
			if tc.decision != "" {
				want = at.Add(time.Second) // the decision is the latest record
			}
			if !s.LastActivity.Equal(want) {
				t.Fatalf("last activity = %v, want %v", s.LastActivity, want)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	t.Parallel()
	allow := &evidence.DecisionRecord{Decision: "allow"}
	dispatched := []evidence.Attempt{{Number: 1, State: evidence.Dispatched}}
	tests := []struct {
		name     string
		s        Stored
		readable bool
		want     string
	}{
		{"a whole record", Stored{ID: "r", Decision: allow, Attempts: dispatched,
			Keys: []string{evidence.Key("r", evidence.ArtifactToolResult)}}, true, ""},
		{"a deny needs no tool result", Stored{ID: "r", Decision: &evidence.DecisionRecord{Decision: "deny"},
			Attempts: []evidence.Attempt{{Number: 1, State: evidence.NotDispatched}}}, true, ""},
		{"an unreadable response", Stored{ID: "r", Decision: allow, Attempts: dispatched,
			Keys: []string{evidence.Key("r", evidence.ArtifactToolResult)}}, false, "response.json is unreadable"},
		{"no decision", Stored{ID: "r", Attempts: dispatched}, true, "attempt 1 has no policy decision"},
		{"allowed, never dispatched", Stored{ID: "r", Decision: allow, Attempts: []evidence.Attempt{{Number: 1, State: evidence.AttemptOpen}}},
			true, "attempt 1 was allowed but has no dispatch marker"},
		{"allowed, no tool result", Stored{ID: "r", Decision: allow, Attempts: dispatched}, true, "tool_result.json is missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := strings.Join(tc.s.Missing(tc.readable), "; "); got != tc.want {
				t.Fatalf("Missing = %q, want %q", got, tc.want)
			}
		})
	}
}
