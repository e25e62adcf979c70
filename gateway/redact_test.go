package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/configsecrets"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestRedactConfigReachesEveryArtifact builds a gateway from configuration with a team's rules
// file, a disabled rule and a fingerprint key, and checks what an auditor sees: the team's
// token redacted, the disabled rule's token kept, and one fingerprint for one secret across
// calls and artifacts.
func TestRedactConfigReachesEveryArtifact(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(`permit (principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	const teamToken = "acme_0123456789abcdefghijklmn"
	const slackToken = "xoxb-" + "2417639805-4829103746152-Kq8vN3mZ7xR2pL5tW9bY1cD4"
	if err := os.WriteFile(filepath.Join(ws, "out.txt"), []byte("deploying with "+teamToken+"\nnotify "+slackToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.toml")
	if err := os.WriteFile(rules, []byte(`
[[rules]]
id = "acme-token"
description = "ACME deploy token"
regex = '''\b(acme_[a-z0-9]{24})\b'''
keywords = ["acme_"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseConfig([]byte(`
instance: redact-test
policies: {dir: ` + filepath.Join(dir, "policies") + `}
evidence: {url: "mem://", spool_dir: none, signing_key: {file: ` + filepath.Join(dir, "signing.key") + `, create: true}}
redact:
  rules_file: ` + rules + `
  disable_rules: [slack-bot-token]
  fingerprint_key: {env: FP_KEY}
drivers:
  workspace: {type: workspace, root: ` + ws + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	getenv := func(name string) string {
		if name == "FP_KEY" {
			return "a fingerprint key of enough bytes"
		}
		return ""
	}
	g, closer, err := Build(context.Background(), cfg, getenv, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })
	conn := serve(t, g)
	e := &env{t: t, store: g.store, gw: g, conn: conn, client: toolgatev1.NewToolGatewayClient(conn), workspace: ws}

	fingerprints := map[string]bool{}
	for _, id := range []string{"fp-1", "fp-2"} {
		resp := e.mustCall(id, "workspace.readFile", map[string]any{"path": "out.txt"})
		body, _ := protojson.Marshal(resp.GetToolResult())
		if strings.Contains(string(body), teamToken) || !strings.Contains(string(body), "[REDACTED:acme-token]") {
			t.Errorf("%s: team token not redacted in the reply: %s", id, body)
		}
		if !strings.Contains(string(body), slackToken) {
			t.Errorf("%s: the disabled rule still redacted: %s", id, body)
		}
		m, err := evidence.ParseManifest(e.artifact(id, evidence.ArtifactManifest))
		if err != nil {
			t.Fatal(err)
		}
		if m.FingerprintKeyID == "" || m.FingerprintKeyID != g.redactor.FingerprintKeyID() {
			t.Errorf("%s: fingerprint key id %q", id, m.FingerprintKeyID)
		}
		for _, r := range m.Redactions {
			if r.Rule == "acme-token" {
				fingerprints[r.Fingerprint] = true
			}
		}
	}
	if len(fingerprints) != 1 {
		t.Errorf("one token in two calls and two artifacts each has fingerprints %v, want exactly one", fingerprints)
	}
}

func TestRedactFingerprintKey(t *testing.T) {
	t.Parallel()
	getenv := func(name string) string {
		return map[string]string{"LONG": "0123456789abcdef0123", "SHORT": "tiny"}[name]
	}
	newSigner := func(seed byte) *evidence.Signer {
		s, err := evidence.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	signer1, signer2 := newSigner(1), newSigner(2)

	configured, err := configsecrets.FingerprintKey(&config.SecretSource{Env: "LONG"}, signer1, getenv)
	if err != nil || string(configured) != "0123456789abcdef0123" {
		t.Errorf("configured key: %q, %v", configured, err)
	}
	if _, err := configsecrets.FingerprintKey(&config.SecretSource{Env: "SHORT"}, nil, getenv); err == nil {
		t.Error("a 4-byte key was accepted")
	}
	a, _ := configsecrets.FingerprintKey(nil, signer1, getenv)
	b, _ := configsecrets.FingerprintKey(nil, signer1, getenv)
	c, _ := configsecrets.FingerprintKey(nil, signer2, getenv)
	if string(a) != string(b) || string(a) == string(c) || len(a) != 32 {
		t.Error("a key derived from the signing key must be stable per signing key and differ between them")
	}
	r1, _ := configsecrets.FingerprintKey(nil, nil, getenv)
	r2, _ := configsecrets.FingerprintKey(nil, nil, getenv)
	if len(r1) != 32 || string(r1) == string(r2) {
		t.Error("without configuration each start must draw a new random key")
	}
}

// TestConfiguredSecretsAreKnownEverywhere builds a gateway whose
// configuration hands it an executor API key, a caller's API key, a signing
// key file and a fingerprint key, and checks that each is redacted from
// text in the encodings it would leak in: as is, the key file's PEM text
// and its body, the seed as base64 and hex.
func TestConfiguredSecretsAreKnownEverywhere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(`permit (principal, action, resource);`), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := bytes.Repeat([]byte{0x5a, 0x17, 0xc3}, 11)[:ed25519.SeedSize]
	key := ed25519.NewKeyFromSeed(seed)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	keyFile := filepath.Join(dir, "signing.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"EXEC_KEY":   "exec-api-key-0f3b9d2e7a",
		"CALLER_KEY": "caller-api-key-9c1e44b7d2",
		"FP_KEY":     "fingerprint-key-7e21c0ffee",
	}
	cfg, err := config.ParseConfig([]byte(`
instance: configured-secrets
policies: {dir: ` + filepath.Join(dir, "policies") + `}
evidence: {url: "mem://", spool_dir: none, signing_key: {file: ` + keyFile + `}}
auth: {keys: [{caller: ci, env: CALLER_KEY}]}
redact: {fingerprint_key: {env: FP_KEY}}
drivers:
  exec: {type: tpmjs, url: "http://127.0.0.1:9", api_key_env: EXEC_KEY}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	g, closer, err := Build(context.Background(), cfg, func(name string) string { return vars[name] }, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })

	pemBody := strings.Split(string(keyPEM), "\n")[1]
	leaks := map[string]string{
		"the executor API key":  "Authorization: " + vars["EXEC_KEY"],
		"a caller's API key":    "k=" + vars["CALLER_KEY"] + ";",
		"the fingerprint key":   "fp " + vars["FP_KEY"],
		"the signing key file":  "cat signing.pem\n" + string(keyPEM),
		"the PEM body alone":    "body " + pemBody,
		"the seed as base64":    "seed " + base64.StdEncoding.EncodeToString(seed),
		"the seed as hex":       "seed " + hex.EncodeToString(seed),
		"the seed as upper hex": "seed " + strings.ToUpper(hex.EncodeToString(seed)),
	}
	for name, text := range leaks {
		t.Run(name, func(t *testing.T) {
			out, _ := g.redactor.String(text)
			for _, secret := range []string{vars["EXEC_KEY"], vars["CALLER_KEY"], vars["FP_KEY"], pemBody,
				base64.StdEncoding.EncodeToString(seed), hex.EncodeToString(seed)} {
				if strings.Contains(strings.ToLower(out), strings.ToLower(secret)) {
					t.Errorf("%q survives in %q", secret, out)
				}
			}
		})
	}
}
