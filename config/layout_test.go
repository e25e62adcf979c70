package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/drivers/workspace"
)

// TestCheckLayoutRefusesNesting: a workspace root that is, contains or lies
// inside one of the gateway's own files or folders is refused, whatever the
// spelling; apart, they are accepted.
func TestCheckLayoutRefusesNesting(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll(filepath.Join(dir, "repo", "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "repo"), filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	base := func() Config {
		return Config{
			File:     filepath.Join(dir, "repo", "toolgate.yaml"),
			Policies: PolicyConfig{Dir: "repo/policies"},
			Evidence: EvidenceConfig{URL: "file://./repo/evidence", SpoolDir: "repo/spool"},
			Drivers:  map[string]DriverSection{"workspace": {Type: "workspace", Config: &workspace.DriverConfig{Root: "repo/workspace"}}},
		}
	}
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr []string // "" entries: accepted
	}{
		{"apart", func(*Config) {}, nil},
		{"workspace is the repository", func(c *Config) { c.setRoot(".") },
			[]string{"drivers.workspace.root", "contains", "policies.dir", filepath.Join(dir, "repo", "policies")}},
		{"workspace is the policy folder", func(c *Config) { c.setRoot("repo/policies") }, []string{"drivers.workspace.root", " is policies.dir"}},
		{"workspace inside the policy folder", func(c *Config) { c.setRoot("repo/policies/ws") }, []string{"lies inside policies.dir"}},
		{"workspace through a symlinked alias", func(c *Config) { c.setRoot("alias/policies") }, []string{" is policies.dir"}},
		{"workspace spelt with ..", func(c *Config) { c.setRoot("repo/ws/../") }, []string{"contains policies.dir"}},
		{"evidence folder in the workspace", func(c *Config) { c.Evidence.URL = "file://repo/workspace/ev" }, []string{"contains evidence.url"}},
		{"workspace inside the evidence folder", func(c *Config) { c.Evidence.URL = "file://repo" }, []string{"lies inside evidence.url"}},
		{"spool in the workspace", func(c *Config) { c.Evidence.SpoolDir = "alias/workspace/spool" }, []string{"contains evidence.spool_dir"}},
		{"spool off", func(c *Config) { c.Evidence.SpoolDir = "none"; c.setRoot("repo/spool") }, nil},
		{"trace folder in the workspace", func(c *Config) {
			c.Drivers["tpmjs"] = DriverSection{Type: "tpmjs", Config: &tpmjs.DriverConfig{TraceDir: "repo/workspace/trace"}}
		}, []string{"contains drivers.tpmjs.trace_dir"}},
		{"signing key in the workspace", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/workspace/signing.pem") },
			[]string{"contains evidence.signing_key.file"}},
		{"signing key from the environment", func(c *Config) { c.Evidence.SigningKey = &SigningKeySource{SecretSource: SecretSource{Env: "K"}} }, nil},
		{"signing key beside the evidence folder", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/toolgate-signing.key") }, nil},
		{"signing key inside the evidence folder, published with it", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/evidence/k.pem") },
			[]string{"evidence.signing_key.file", "lies inside evidence.url", filepath.Join(dir, "repo", "evidence")}},
		{"signing key inside the evidence folder through an alias", func(c *Config) { c.Evidence.SigningKey = keyFile("alias/evidence/k.pem") },
			[]string{"evidence.signing_key.file", "lies inside evidence.url"}},
		{"signing key inside the spool", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/spool/k.pem") },
			[]string{"evidence.signing_key.file", "lies inside evidence.spool_dir"}},
		{"signing key inside the policy folder", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/policies/k.pem") },
			[]string{"evidence.signing_key.file", "lies inside policies.dir"}},
		{"signing key that is the evidence folder", func(c *Config) { c.Evidence.SigningKey = keyFile("repo/evidence") },
			[]string{"evidence.signing_key.file", "lies inside evidence.url"}},
		{"fingerprint key inside the evidence folder", func(c *Config) { c.Redact.FingerprintKey = &SecretSource{File: "repo/evidence/fp"} },
			[]string{"redact.fingerprint_key.file", "lies inside evidence.url"}},
		{"TLS key inside a trace folder", func(c *Config) {
			c.TLS = TLSConfig{CertFile: "repo/cert.pem", KeyFile: "repo/trace/key.pem"}
			c.Drivers["tpmjs"] = DriverSection{Type: "tpmjs", Config: &tpmjs.DriverConfig{TraceDir: "repo/trace"}}
		}, []string{"tls.key_file", "lies inside drivers.tpmjs.trace_dir"}},
		{"fingerprint key in the workspace", func(c *Config) { c.Redact.FingerprintKey = &SecretSource{File: "repo/workspace/fp"} },
			[]string{"contains redact.fingerprint_key.file"}},
		{"a decoded section's secret file in the workspace", func(c *Config) {
			c.SectionSettings = map[string]any{"console": struct {
				OIDC struct {
					Secret *SecretSource `yaml:"client_secret"`
				} `yaml:"oidc"`
			}{OIDC: struct {
				Secret *SecretSource `yaml:"client_secret"`
			}{&SecretSource{File: "repo/workspace/oidc-secret"}}}}
		}, []string{"contains console.oidc.client_secret.file"}},
		{"configuration file in the workspace", func(c *Config) { c.File = "repo/workspace/toolgate.yaml" },
			[]string{"contains the configuration file"}},
		{"s3 evidence is not a folder", func(c *Config) { c.Evidence.URL = "s3://bucket/repo/workspace" }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.change(&c)
			err := c.CheckLayout()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func (c *Config) setRoot(root string) {
	c.SetWorkspaceRoot("workspace", root)
}

// workspaceRoot is the root of the workspace driver called name.
func workspaceRoot(c Config, name string) string {
	if w, ok := c.Drivers[name].Config.(*workspace.DriverConfig); ok {
		return w.Root
	}
	return ""
}

// keyFile is a signing key source naming a file.
func keyFile(path string) *SigningKeySource {
	return &SigningKeySource{SecretSource: SecretSource{File: path}}
}
