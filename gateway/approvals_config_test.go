package gateway

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/configsecrets"
	"github.com/toolgate/toolgate/internal/syncbuf"
)

func TestReadWebhookSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "hook.key")
	if err := os.WriteFile(file, []byte("0123456789abcdef-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOOK_KEY": "0123456789abcdef-from-env"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		src     config.SecretSource
		want    string
		wantErr string
	}{
		{"from the environment", config.SecretSource{Env: "HOOK_KEY"}, "0123456789abcdef-from-env", ""},
		{"from a file, without its line end", config.SecretSource{File: file}, "0123456789abcdef-from-file", ""},
		{"an unset variable stops the start", config.SecretSource{Env: "NOPE"}, "", "approvals.webhook.secret: environment variable NOPE is empty or unset"},
		{"a missing file stops the start", config.SecretSource{File: filepath.Join(dir, "nope")}, "", "approvals.webhook.secret: open"},
		{"a short key stops the start", config.SecretSource{File: short}, "", "shorter than 16 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configsecrets.WebhookSecret(&config.WebhookConfig{URL: "https://hooks.example/x", Secret: tc.src}, getenv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("secret = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// buildWithApprovals builds a gateway, as serve does, from a folder with
// one policy file and the given extra configuration; it returns the
// gateway, what Build logged and its error.
func buildWithApprovals(t *testing.T, policy, extraYAML string, env map[string]string) (*Gateway, string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "policy.default.cedar"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "policies: {dir: '" + filepath.Join(dir, "policies") + "'}\n" +
		"evidence: {url: 'mem://', spool_dir: none}\n" +
		"drivers: {workspace: {type: workspace, root: '" + filepath.Join(dir, "ws") + "'}}\n" + extraYAML
	cfg, err := config.ParseConfig([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	// The gateway resolves relative paths (the signing key it creates)
	// from the folder it starts in.
	t.Chdir(dir)
	log := &syncbuf.Buffer{}
	g, closer, err := Build(context.Background(), cfg, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(log, nil)))
	if err == nil {
		t.Cleanup(func() { closer.Close() })
	}
	return g, log.String(), err
}

const heldShellPolicy = `@id("shell_needs_ops") @approval("ops")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");
`

func TestBuildWarnsWhenApprovalsHaveNoApprovers(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	tests := []struct {
		name   string
		policy string
		extra  string
		warned bool
	}{
		{"approval rules without auth keys", heldShellPolicy, "", true},
		{"approval rules with auth keys", heldShellPolicy, "auth: {keys: [{caller: bob, sha256: " + digest + ", groups: [ops]}]}\n", false},
		{"no approval rules without auth keys", "permit (principal, action, resource);", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, log, err := buildWithApprovals(t, tc.policy, tc.extra, nil)
			if err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(log, "approvals need authenticated approvers; calls held for approval will expire")
			if warned != tc.warned {
				t.Fatalf("warned = %v, want %v; log:\n%s", warned, tc.warned, log)
			}
		})
	}
}

func TestBuildWiresTheApprovalWebhook(t *testing.T) {
	hook := "approvals: {webhook: {url: 'https://hooks.example/toolgate', secret: {env: HOOK_KEY}}}\n"
	t.Run("a missing secret stops the start", func(t *testing.T) {
		_, _, err := buildWithApprovals(t, heldShellPolicy, hook, nil)
		if err == nil || !strings.Contains(err.Error(), "config: approvals.webhook.secret: environment variable HOOK_KEY is empty or unset") {
			t.Fatalf("Build = %v, want the missing webhook secret named", err)
		}
	})
	t.Run("the secret is redacted from the evidence", func(t *testing.T) {
		const key = "hook-hmac-key-0123456789"
		g, _, err := buildWithApprovals(t, heldShellPolicy, hook, map[string]string{"HOOK_KEY": key})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := g.redactor.String("the key is " + key); strings.Contains(out, key) {
			t.Fatalf("the webhook key survives redaction: %q", out)
		}
	})
}
