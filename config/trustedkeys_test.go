package config

import "testing"

// TestTrustedKeyFilesAreTheGatewaysOwn: whoever could write a trusted
// key file could make the gateway trust their key, and the shared MAC key
// is a secret: both are among the paths no workspace may reach.
func TestTrustedKeyFilesAreTheGatewaysOwn(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte("evidence:\n  trusted_keys: [{file: ./keys/b.pub}]\n  shared_mac_key: {file: ./keys/mac}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range cfg.GatewayPaths() {
		got[p.Key] = p.Path
	}
	if got["evidence.trusted_keys[0].file"] != "./keys/b.pub" || got["evidence.shared_mac_key.file"] != "./keys/mac" {
		t.Fatalf("gateway paths = %v, want the trusted key and the shared MAC key files", got)
	}
}
