package console

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
)

// oidcSection is a valid console.oidc for a console on loopback.
const oidcSection = "{issuer: 'http://127.0.0.1:9000', client_id: console, client_secret: {env: OIDC_SECRET}, " +
	"redirect_url: 'http://127.0.0.1:8470/signin/oidc/callback'}"

func TestLoadAppliesTheListenerRules(t *testing.T) {
	t.Parallel()
	const keys = "auth: {keys: [{caller: bob, env: KEY_BOB, groups: [ops]}]}\n"
	tests := []struct {
		name, yaml, wantErr, listen string
	}{
		{name: "off without a section", yaml: keys},
		{name: "loopback with keys", yaml: keys + "console: {listen: '127.0.0.1:8470'}", listen: "127.0.0.1:8470"},
		{name: "another host without tls", yaml: keys + "console: {listen: '0.0.0.0:8470'}", wantErr: "tls is not configured"},
		{name: "another host behind a TLS proxy", yaml: keys + "tls: {allow_plaintext: true}\nconsole: {listen: '0.0.0.0:8470'}", listen: "0.0.0.0:8470"},
		{name: "no API keys to sign in with", yaml: "console: {listen: '127.0.0.1:8470'}", wantErr: "there are none"},
		{name: "another host without keys", yaml: "tls: {allow_plaintext: true}\nconsole: {listen: '0.0.0.0:8470'}", wantErr: "auth.keys is empty"},
		{name: "the gRPC listener's port", yaml: keys + "listen: '127.0.0.1:8470'\nconsole: {listen: '127.0.0.1:8470'}", wantErr: "taken by"},
		{name: "the admin listener's port", yaml: keys + "admin: {listen: '127.0.0.1:8470'}\nconsole: {listen: '127.0.0.1:8470'}", wantErr: "taken by"},
		{name: "an unknown key", yaml: keys + "console: {listen: '127.0.0.1:8470', cookie_secure: false}", wantErr: "cookie_secure"},
		{name: "oidc beside the keys", yaml: keys + "console: {listen: '127.0.0.1:8470', oidc: " + oidcSection + "}", listen: "127.0.0.1:8470"},
		{name: "oidc alone on loopback", yaml: "console: {listen: '127.0.0.1:8470', oidc: " + oidcSection + "}", listen: "127.0.0.1:8470"},
		{name: "oidc alone on another host behind a TLS proxy", yaml: "tls: {allow_plaintext: true}\nconsole: {listen: '0.0.0.0:8470', oidc: " +
			strings.ReplaceAll(oidcSection, "http://127.0.0.1:8470", "https://console.example.com") + "}", listen: "0.0.0.0:8470"},
		{name: "oidc alone on another host without tls", yaml: "console: {listen: '0.0.0.0:8470', oidc: " + oidcSection + "}", wantErr: "tls is not configured"},
		{name: "an oidc secret written inline", yaml: keys + "console: {listen: '127.0.0.1:8470', oidc: " +
			strings.Replace(oidcSection, "{env: OIDC_SECRET}", "hunter2", 1) + "}", wantErr: "a secret never goes in the configuration"},
		{name: "an oidc redirect elsewhere", yaml: keys + "console: {listen: '127.0.0.1:8470', oidc: " +
			strings.Replace(oidcSection, "/signin/oidc/callback", "/x?next=https://evil.example", 1) + "}", wantErr: "redirect_url"},
		{name: "an oidc issuer in plain http beyond loopback", yaml: keys + "console: {listen: '127.0.0.1:8470', oidc: " +
			strings.Replace(oidcSection, "http://127.0.0.1:9000", "http://id.example.com", 1) + "}", wantErr: "issuer"},
		{name: "an oidc redirect to another loopback port", yaml: keys + "console: {listen: '127.0.0.1:8471', oidc: " + oidcSection + "}", wantErr: "not the port"},
		{name: "an oidc redirect to loopback from a console that is not there", yaml: keys + "tls: {allow_plaintext: true}\nconsole: {listen: '0.0.0.0:8470', oidc: " + oidcSection + "}",
			wantErr: "on loopback, but console.listen"},
		{name: "an unknown oidc key", yaml: keys + "console: {listen: '127.0.0.1:8470', oidc: " +
			strings.Replace(oidcSection, "}", ", skip_nonce: true}", 1) + "}", wantErr: "skip_nonce"},
		{name: "a session that never lasts", yaml: keys + "console: {listen: '127.0.0.1:8470', session_ttl: -1s}", wantErr: "positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.ParseConfig([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Load(cfg)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Load: %v, want an error containing %q", err, tc.wantErr)
			case tc.wantErr == "" && c.Listen != tc.listen:
				t.Fatalf("listen %q, want %q", c.Listen, tc.listen)
			}
		})
	}
}
