package gateway

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/configsecrets"
	"github.com/toolgate/toolgate/gateway/signingkey"
)

// TestTrustedKeysConfig: evidence.trusted_keys takes a replica's public
// key from a file, an environment variable or the configuration itself,
// in any form `toolgate evidence pubkey` prints; a bad entry is refused
// with a message that never quotes what it was given.
func TestTrustedKeysConfig(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	b64 := base64.StdEncoding.EncodeToString(pub)
	privPEM, err := evidence.EncodePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	seed := base64.StdEncoding.EncodeToString(priv.Seed())
	dir := t.TempDir()
	for name, data := range map[string]string{
		"replica.pub": "# key id: " + evidence.KeyID(pub) + "\n" + pemKey,
		"private.pem": string(privPEM),
		"short.key":   "only-sixteen-byt\n",
		"mac.key":     strings.Repeat("m", 32) + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"REPLICA_PUB": b64, "EMPTY": "", "MAC": strings.Repeat("k", 40)}
	getenv := func(k string) string { return env[k] }
	indent := func(s string) string { return "      " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n      ") }
	file := func(name string) string { return filepath.Join(dir, name) }
	tests := []struct {
		name string
		yaml string
		// wantErr is where the configuration is refused ("" for not):
		// when decoded, validated, or read.
		wantErr, at string
		wantKeys    int
	}{
		{name: "a file as pubkey prints it", yaml: "trusted_keys: [{file: " + file("replica.pub") + "}]", wantKeys: 1},
		{name: "an environment variable", yaml: "trusted_keys: [{env: REPLICA_PUB}]", wantKeys: 1},
		{name: "inline base64", yaml: "trusted_keys: [" + b64 + "]", wantKeys: 1},
		{name: "inline PEM", yaml: "trusted_keys:\n    - |\n" + indent(pemKey), wantKeys: 1},
		{name: "several, with a shared MAC key", yaml: "trusted_keys: [" + b64 + ", {env: REPLICA_PUB}]\n  shared_mac_key: {file: " + file("mac.key") + "}", wantKeys: 2},
		{name: "a shared MAC key alone", yaml: "shared_mac_key: {env: MAC}"},
		{name: "inline garbage", yaml: "trusted_keys: [not-a-key]", at: "decode", wantErr: "line 3: evidence.trusted_keys: evidence: public key: neither a PEM"},
		{name: "inline private key", yaml: "trusted_keys:\n    - |\n" + indent(string(privPEM)), at: "decode", wantErr: "this is a private key"},
		{name: "a private key seed inline is 32 bytes, like a public key", yaml: "trusted_keys: [" + seed + "]", wantKeys: 1},
		{name: "unknown key in an entry", yaml: "trusted_keys: [{path: x}]", at: "decode", wantErr: `unknown key "path"`},
		{name: "a sequence entry", yaml: "trusted_keys: [[x]]", at: "decode", wantErr: "want {file: FILE}, {env: VAR} or the public key itself"},
		{name: "file and env", yaml: "trusted_keys: [{file: a, env: B}]", at: "validate", wantErr: "evidence.trusted_keys[0]: give file or env, not both"},
		{name: "empty entry", yaml: "trusted_keys: [{}]", at: "validate", wantErr: "evidence.trusted_keys[0]: give file, env or the public key itself"},
		{name: "bad env name", yaml: "trusted_keys: [{env: 'A B'}]", at: "validate", wantErr: `evidence.trusted_keys[0].env "A B"`},
		{name: "with signing_key none", yaml: "signing_key: none\n  trusted_keys: [" + b64 + "]", at: "validate", wantErr: "need a signing key"},
		{name: "shared MAC key inline", yaml: "shared_mac_key: {}", at: "validate", wantErr: "give file or env; the key never goes in the configuration"},
		{name: "a private key file", yaml: "trusted_keys: [{file: " + file("private.pem") + "}]", at: "read", wantErr: "evidence.trusted_keys[0]: " + file("private.pem") + ": this is a private key"},
		{name: "a missing file", yaml: "trusted_keys: [{file: " + file("nope.pub") + "}]", at: "read", wantErr: "no such file"},
		{name: "an empty variable", yaml: "trusted_keys: [{env: EMPTY}]", at: "read", wantErr: "environment variable EMPTY is empty or unset"},
		{name: "a short shared MAC key", yaml: "shared_mac_key: {file: " + file("short.key") + "}", at: "read", wantErr: "evidence.shared_mac_key: shorter than 32 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.ParseConfig([]byte("evidence:\n  url: file://./ev\n  " + tc.yaml + "\n"))
			at := "decode"
			if err == nil {
				at = "validate"
				if cfg, err = cfg.WithDefaults(); err == nil {
					err = cfg.Validate()
				}
			}
			var keys []ed25519.PublicKey
			if err == nil {
				at = "read"
				keys, err = cfg.TrustedPublicKeys(getenv)
				if err == nil {
					err = configsecrets.Check(cfg, getenv)
				}
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused at %s: %v", at, err)
				}
				if len(keys) != tc.wantKeys || (len(keys) > 0 && !bytes.Equal(keys[0], pub) && tc.name != "a private key seed inline is 32 bytes, like a public key") {
					t.Fatalf("keys = %d %x, want %d of %x", len(keys), keys, tc.wantKeys, pub)
				}
				return
			}
			if err == nil || at != tc.at || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error at %s: %v; want at %s: %q", at, err, tc.at, tc.wantErr)
			}
			for _, secret := range []string{"PRIVATE KEY-----\n", seed, string(privPEM[40:80]), strings.Repeat("k", 40), "only-sixteen"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

// TestSharedMACKeyIsRedacted: the shared MAC key is a known secret, so it
// is replaced wherever it would appear in evidence or logs.
func TestSharedMACKeyIsRedacted(t *testing.T) {
	t.Parallel()
	mac := []byte(strings.Repeat("s", 32))
	secrets := configuredSecrets(config.Config{}, func(string) string { return "" }, nil, signingkey.Text{}, nil, nil, mac)
	if len(secrets) != 1 || secrets[0] != string(mac) {
		t.Fatalf("configuredSecrets = %q, want the shared MAC key", secrets)
	}
}
