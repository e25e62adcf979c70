package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy/history"
)

// historyRun plays the session of TestHistoryDecides and returns its env.
func historyRun(t *testing.T, signer *evidence.Signer) *env {
	t.Helper()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": historyPolicies}, signer: signer})
	if err := os.MkdirAll(filepath.Join(e.workspace, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.workspace, "secret", "k"), []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ run, id, tool, path string }{
		{"r1", "read-secret", "workspace.readFile", "secret/k"},
		{"r1", "write-after", "workspace.createFile", "public/a"},
		{"r2", "write-fresh-run", "workspace.createFile", "public/a"},
		{"r1", "read-2", "workspace.readFile", "secret/k"},
	} {
		e.runIn(s.run, s.id, s.tool, map[string]any{"path": s.path, "content": "x"})
	}
	return e
}

// editDecision rewrites request id's policy_decision.json with edit and
// re-digests it in the (unsigned) manifest, so that only the history
// check can tell.
func editDecision(t *testing.T, e *env, id string, edit func(*evidence.DecisionHistory)) {
	t.Helper()
	dir := filepath.Join(e.evidenceDir, "requests", id)
	var d evidence.DecisionRecord
	raw, err := os.ReadFile(filepath.Join(dir, evidence.ArtifactPolicyDecision))
	if err != nil || json.Unmarshal(raw, &d) != nil || d.History == nil {
		t.Fatalf("%s's decision: %v %s", id, err, raw)
	}
	edit(d.History)
	edited, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m evidence.Manifest
	mraw, err := os.ReadFile(filepath.Join(dir, evidence.ArtifactManifest))
	if err != nil || json.Unmarshal(mraw, &m) != nil || m.Signature != nil {
		t.Fatalf("%s's manifest: %v, signed %v", id, err, m.Signature != nil)
	}
	sum := sha256.Sum256(edited)
	for i, a := range m.Artifacts {
		if a.Key == evidence.Key(id, evidence.ArtifactPolicyDecision) {
			m.Artifacts[i].SHA256, m.Artifacts[i].Size = hex.EncodeToString(sum[:]), int64(len(edited))
		}
	}
	mdata, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{evidence.ArtifactPolicyDecision: edited, evidence.ArtifactManifest: mdata} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVerifyRecomputesHistory: evidence verify recomputes, from the
// caller's history records, the facts each decision recorded, and reports
// a deleted earlier call of the session and a decision whose facts were
// edited (here behind an unsigned manifest re-digested to match, so only
// the recomputation can tell); an untouched store verifies ok.
func TestVerifyRecomputesHistory(t *testing.T) {
	t.Parallel()
	signer := testSigner(t, 7)
	tests := []struct {
		name   string
		signed bool
		tamper func(t *testing.T, e *env)
		// want maps request ids to a problem they must report; the
		// others must verify ok.
		want map[string]string
	}{
		{name: "untouched, signed", signed: true},
		{name: "untouched, unsigned"},
		{
			name: "the session's first call deleted", signed: true,
			tamper: func(t *testing.T, e *env) {
				if err := os.Remove(filepath.Join(e.evidenceDir, filepath.FromSlash(history.SlotKey("anonymous", 1)))); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string]string{"read-secret": "missing: a call of the caller's history was deleted",
				"write-after": "missing", "write-fresh-run": "missing", "read-2": "missing"},
		},
		{
			name: "a denied call's facts edited to hide the label",
			tamper: func(t *testing.T, e *env) {
				editDecision(t, e, "write-after", func(h *evidence.DecisionHistory) { h.Labels = []string{} })
			},
			want: map[string]string{"write-after": "records labels [], but slot 1 of the caller's history gives [sensitive]"},
		},
		{
			name: "an allowed call's count edited",
			tamper: func(t *testing.T, e *env) {
				editDecision(t, e, "read-2", func(h *evidence.DecisionHistory) { h.Calls = 0 })
			},
			want: map[string]string{"read-2": "records calls 0"},
		},
		{
			name: "a history record's state edited (unsigned store)",
			tamper: func(t *testing.T, e *env) {
				one := filepath.Join(e.evidenceDir, filepath.FromSlash(history.SlotKey("anonymous", 1)))
				raw, err := os.ReadFile(one)
				edited := strings.Replace(string(raw), `},"labels":["sensitive"]}`, `}}`, 1)
				if err != nil || edited == string(raw) || os.WriteFile(one, []byte(edited), 0o600) != nil {
					t.Fatalf("edit %s: %v\n%s", one, err, raw)
				}
			},
			want: map[string]string{"read-secret": "is not the state of slot 0 plus its call", "write-after": "edited or reordered",
				"write-fresh-run": "edited or reordered", "read-2": "edited or reordered"},
		},
		{
			name: "a history record replaced by another slot's",
			tamper: func(t *testing.T, e *env) {
				two := filepath.Join(e.evidenceDir, filepath.FromSlash(history.SlotKey("anonymous", 2)))
				one, err := os.ReadFile(filepath.Join(e.evidenceDir, filepath.FromSlash(history.SlotKey("anonymous", 1))))
				if err != nil || os.WriteFile(two, one, 0o600) != nil {
					t.Fatal(err)
				}
			},
			want: map[string]string{"write-fresh-run": "holds the record of slot 1", "read-2": "holds the record of slot 1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s *evidence.Signer
			var keys []ed25519.PublicKey
			if tt.signed {
				s, keys = signer, []ed25519.PublicKey{signer.PublicKey()}
			}
			e := historyRun(t, s)
			if tt.tamper != nil {
				tt.tamper(t, e)
			}
			opts := evidence.VerifyOptions{TrustedKeys: keys, History: history.NewChecker()}
			seen := 0
			err := evidence.VerifyAll(context.Background(), e.store, opts, func(r evidence.VerifyReport) error {
				seen++
				want, bad := tt.want[r.RequestID]
				switch {
				case !bad && r.Status != evidence.StatusOK:
					t.Errorf("%s: %s %v, want ok", r.RequestID, r.Status, r.Problems)
				case bad && (r.Status != evidence.StatusMismatch || !strings.Contains(strings.Join(r.Problems, "\n"), want)):
					t.Errorf("%s: %s %v, want a mismatch saying %q", r.RequestID, r.Status, r.Problems, want)
				}
				return nil
			})
			if err != nil || seen != 4 {
				t.Fatalf("VerifyAll: %v, %d reports", err, seen)
			}
		})
	}
}
