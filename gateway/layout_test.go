package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
)

// TestDefaultSigningKeyIsCheckedLikeAConfiguredOne: the key the embedded
// default creates, ./toolgate-signing.key, is refused inside a workspace
// or the evidence folder, and never created there.
func TestDefaultSigningKeyIsCheckedLikeAConfiguredOne(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	elsewhere := t.TempDir()
	tests := []struct {
		name, yaml, want string
	}{
		{"a workspace that is the gateway's folder",
			"policies: {dir: " + elsewhere + "/policies}\nevidence: {url: file://" + elsewhere + "/ev, spool_dir: none}\ndrivers: {workspace: {type: workspace, root: .}}",
			"contains evidence.signing_key.file (" + filepath.Join(dir, "toolgate-signing.key") + ")"},
		{"an evidence folder that is the gateway's folder",
			"policies: {dir: " + elsewhere + "/policies}\nevidence: {url: file://., spool_dir: none}\ndrivers: {workspace: {type: workspace, root: " + elsewhere + "/ws}}",
			"evidence.signing_key.file (" + filepath.Join(dir, "toolgate-signing.key") + ") lies inside evidence.url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.ParseConfig([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if cfg, err = cfg.WithDefaults(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := Build(context.Background(), cfg, func(string) string { return "" }, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(dir, "toolgate-signing.key")); err == nil {
				t.Fatal("a key was created in the refused place")
			}
		})
	}
}
