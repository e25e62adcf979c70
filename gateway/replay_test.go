package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/evidence"
)

// TestReplayRefusesAStoredResponseThatDoesNotMatchItsManifest: a retry
// gets the stored response only when it is the one the manifest committed
// to; an answer rewritten on disk (a deny turned into an allow, ok flipped)
// is refused with DATA_LOSS instead of being handed back.
func TestReplayRefusesAStoredResponseThatDoesNotMatchItsManifest(t *testing.T) {
	t.Parallel()
	signer := newTestSigner(t)
	flip := func(t *testing.T, body []byte) []byte {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		m["ok"] = true
		m["policy_check"].(map[string]any)["decision"] = "allow"
		out, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return append(out, '\n')
	}
	tests := []struct {
		name   string
		signer *evidence.Signer
		// tamper rewrites the files of the request's folder.
		tamper   func(t *testing.T, dir string)
		wantCode codes.Code
		wantMsg  string
	}{
		{"an untouched response is replayed", nil, func(*testing.T, string) {}, codes.OK, ""},
		{"a flipped decision is refused", nil, func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "response.json"), flip)
		}, codes.DataLoss, "response.json has SHA-256"},
		{"a flipped decision with a manifest rewritten to match is refused when manifests are signed", signer, func(t *testing.T, dir string) {
			rewrite(t, filepath.Join(dir, "response.json"), flip)
			body, err := os.ReadFile(filepath.Join(dir, "response.json"))
			if err != nil {
				t.Fatal(err)
			}
			rewrite(t, filepath.Join(dir, "manifest.json"), func(t *testing.T, raw []byte) []byte {
				m, err := evidence.ParseManifest(raw)
				if err != nil {
					t.Fatal(err)
				}
				for i, a := range m.Artifacts {
					if strings.HasSuffix(a.Key, "/response.json") {
						m.Artifacts[i] = evidence.Digest(a.Key, body)
					}
				}
				m.Signature = nil
				out, err := evidence.EncodeManifest(m)
				if err != nil {
					t.Fatal(err)
				}
				return out
			})
		}, codes.DataLoss, "not signed"},
		{"a signed manifest is checked and replayed", signer, func(*testing.T, string) {}, codes.OK, ""},
		{"a manifest of another request is refused", nil, func(t *testing.T, dir string) {
			other, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "other", "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			rewrite(t, filepath.Join(dir, "manifest.json"), func(*testing.T, []byte) []byte { return other })
		}, codes.DataLoss, "belongs to another request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": readOnlyPolicy}, signer: tc.signer})
			args := map[string]any{"command": "touch pwned"}
			first := e.mustCall("replay-1", "workspace.shell", args)
			e.mustCall("other", "workspace.shell", args)
			if first.GetPolicyCheck().GetDecision() != "deny" {
				t.Fatalf("first answer %v, want a deny", first)
			}
			tc.tamper(t, filepath.Join(e.evidenceDir, "requests", "replay-1"))
			resp, err := e.call(context.Background(), "replay-1", "workspace.shell", args)
			if tc.wantCode == codes.OK {
				if err != nil || resp.GetPolicyCheck().GetDecision() != "deny" {
					t.Fatalf("replay: %v %v, want the stored deny", resp, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("the tampered response was replayed: %v", resp)
			}
			wantCode(t, err, tc.wantCode, "evidence tampering: requests/replay-1/")
			wantCode(t, err, tc.wantCode, "failed authentication")
			wantCode(t, err, tc.wantCode, tc.wantMsg)
			if _, err := os.Stat(filepath.Join(e.workspace, "pwned")); err == nil {
				t.Fatal("the retry ran the denied command")
			}
		})
	}
}

// rewrite replaces a file's content with edit's result, as someone with
// write access to the evidence folder could.
func rewrite(t *testing.T, path string, edit func(*testing.T, []byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(t, data), 0o600); err != nil {
		t.Fatal(err)
	}
}
