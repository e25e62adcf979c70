package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// systemSecretDir makes a fresh folder under /etc, where operators keep
// key files: the sandbox shows /etc (read-only) to every shell command, so
// a key file there is readable unless the gateway masks it. The suite runs
// as root (CI's container); a run that cannot write /etc cannot stage the
// attack and says so.
func systemSecretDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/etc", "toolgate-hostile-")
	if err != nil {
		t.Fatalf("this attack needs a folder under /etc, which the sandbox shows, as an operator's key files are: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestHostileShellReadsTheConfiguredSecretFiles: a caller whom policy lets
// run workspace.shell tries to read every secret file the configuration
// names under /etc — the signing key, the fingerprint key, the replicas'
// shared MAC key, a trusted key, the approval webhook's HMAC key and the
// MCP door's state key — by path, by a glob of their folder and by a
// search. None of their contents, nor their digests, comes back.
func TestHostileShellReadsTheConfiguredSecretFiles(t *testing.T) {
	t.Parallel()
	etc := systemSecretDir(t)
	dir := t.TempDir()
	writePolicy(t, dir, `@id("shell_for_all") permit (principal, action, resource in Driver::"workspace");`)
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", filepath.Join(etc, "signing.pem")); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	if _, stderr, code := runTool(t, dir, "evidence", "keygen", "--out", "peer.pem"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	pub, stderr, code := runTool(t, dir, "evidence", "pubkey", "--key", "peer.pem")
	if code != exitOK {
		t.Fatalf("pubkey: %s", stderr)
	}
	files := map[string]string{
		"fingerprint.key": "fingerprint-key-4b1d9e0c7a2f6358e1d04c9b",
		"shared-mac.key":  "shared-mac-key-8e2c51f09d7b4a36c0e8f1a2b3d4",
		"peer.pub":        pub,
		"webhook.key":     "webhook-hmac-key-0c9d8e7f6a5b4c3d2e1f",
		"mcp-state.key":   "0123456789abcdef0123456789abcdef",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`
evidence:
  url: file://./toolgate-evidence
  spool_dir: ./toolgate-spool
  signing_key: {file: %[1]s/signing.pem}
  trusted_keys: [{file: %[1]s/peer.pub}]
  shared_mac_key: {file: %[1]s/shared-mac.key}
redact:
  fingerprint_key: {file: %[1]s/fingerprint.key}
approvals:
  webhook: {url: 'http://127.0.0.1:1/hook', secret: {file: %[1]s/webhook.key}, retries: -1}
drivers:
  workspace: {type: workspace, root: ./workspace}
front_doors:
  mcp: {listen: 127.0.0.1:0, state_key_file: %[1]s/mcp-state.key}
`, etc)
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "--config", "toolgate.yaml")
	d := &sandboxDeployment{dir: dir, srv: srv}
	if res := d.shell(t, "ls -la "+etc, 10000); !res.OK {
		t.Fatalf("a plain shell call failed: %s", res.raw)
	}
	names := []string{"signing.pem"}
	for name := range files {
		names = append(names, name)
	}
	secrets := map[string]string{}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(etc, name))
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = string(data)
	}
	attacks := map[string]string{
		"a glob of the folder": fmt.Sprintf("for f in %s/*; do echo \"== $f\"; sha256sum $f; od -An -tx1 $f | tr -d ' \\n'; echo; rev $f; done", etc),
		"a search of /etc":     "grep -rl -e 'PRIVATE [K]EY' -e 'webhook-hmac-[k]ey' -e 'shared-mac-[k]ey' /etc 2>/dev/null",
	}
	for _, name := range names {
		attacks["cat "+name] = fmt.Sprintf("cat %[1]s/%[2]s; sha256sum %[1]s/%[2]s; base64 -w0 %[1]s/%[2]s", etc, name)
	}
	for attack, command := range attacks {
		t.Run(attack, func(t *testing.T) {
			res := d.shell(t, command, 10000)
			for name, text := range secrets {
				sum := sha256.Sum256([]byte(text))
				for form, s := range map[string]string{
					"its content": strings.TrimSpace(text), "its digest": hex.EncodeToString(sum[:]), "its bytes in hex": hex.EncodeToString([]byte(text)),
				} {
					if strings.Contains(res.raw, s) {
						t.Errorf("the shell read %s of %s:\n%s", form, name, res.raw)
					}
				}
			}
		})
	}
}
