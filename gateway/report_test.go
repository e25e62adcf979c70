package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence"
)

// TestRedactionReportIsBounded: an allowed read of a file dense with
// secrets, and a denied call whose args are dense with rule keywords, both
// complete with a manifest under evidence.MaxManifestSize that accounts for
// every secret, listed or counted.
func TestRedactionReportIsBounded(t *testing.T) {
	t.Parallel()
	const known = "known-secret-value-42"
	e := newEnv(t, envOptions{secrets: []string{known}})
	line := "export TOKEN=" + known + " ghp_0123456789abcdefghijABCDEFGHIJ012345\n"
	dense := strings.Repeat(line, (1<<20)/len(line))
	if err := os.WriteFile(filepath.Join(e.workspace, "dense.txt"), []byte(dense), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, id, tool string
		args           map[string]any
		minSecrets     int64
	}{
		{"a 1 MiB file dense with secrets, read", "dense-read", "workspace.readFile", map[string]any{"path": "dense.txt"}, int64(2 * strings.Count(dense, known))},
		{"1 MiB of keyword-dense args, denied", "dense-deny", "other.tool", map[string]any{"q": strings.Repeat("password token secret api_key bearer ", (1<<20-64)/37)}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The reply may exceed the client's message limit; the
			// evidence is what counts.
			e.call(context.Background(), tc.id, tc.tool, tc.args)
			data := e.artifact(tc.id, evidence.ArtifactManifest)
			if len(data) >= evidence.MaxManifestSize {
				t.Fatalf("manifest is %d bytes, the bound is %d", len(data), evidence.MaxManifestSize)
			}
			m, err := evidence.ParseManifest(data)
			if err != nil || m.Outcome != evidence.OutcomeCompleted {
				t.Fatalf("manifest %v, outcome %q: the request did not complete", err, m.Outcome)
			}
			var total int64
			for _, r := range m.Redactions {
				total += max(1, r.Omitted)
			}
			if total < tc.minSecrets {
				t.Errorf("the report accounts for %d secrets, want at least %d", total, tc.minSecrets)
			}
		})
	}
}
