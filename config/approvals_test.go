package config

import (
	"testing"
	"time"
)

func TestApprovalsConfigValidate(t *testing.T) {
	hook := func(fields string) string { return "approvals: {webhook: {" + fields + "}}" }
	const env = "secret: {env: HOOK_KEY}"
	tests := []struct {
		name    string
		yaml    string
		wantErr string // "" means valid
	}{
		{"no approvals section", "", ""},
		{"a ttl of one hour", "approvals: {ttl: 1h}", ""},
		{"the longest ttl", "approvals: {ttl: 720h}", ""},
		{"a ttl beyond thirty days", "approvals: {ttl: 721h}", "approvals.ttl 721h0m0s"},
		{"a negative ttl", "approvals: {ttl: -1s}", "approvals.ttl -1s"},
		{"an https webhook", hook("url: 'https://hooks.example/toolgate', " + env), ""},
		{"an http webhook on loopback", hook("url: 'http://127.0.0.1:8080/hook', " + env), ""},
		{"an http webhook on localhost", hook("url: 'http://localhost:8080/hook', " + env), ""},
		{"an http webhook on ipv6 loopback", hook("url: 'http://[::1]:8080/hook', " + env), ""},
		{"an http webhook beyond this host", hook("url: 'http://hooks.example/toolgate', " + env), "http:// only to a loopback host"},
		{"an http webhook on a private address", hook("url: 'http://10.0.0.7/hook', " + env), "http:// only to a loopback host"},
		{"a webhook of another scheme", hook("url: 'ftp://hooks.example/x', " + env), "want https://host/path"},
		{"a webhook without a host", hook("url: 'https:///x', " + env), "want https://host/path"},
		{"a webhook with credentials in the url", hook("url: 'https://u:p@hooks.example/x', " + env), "must not carry credentials"},
		{"a webhook without a secret", hook("url: 'https://hooks.example/x'"), "approvals.webhook.secret: give file or env"},
		{"a webhook secret from both sources", hook("url: 'https://hooks.example/x', secret: {env: K, file: k}"), "approvals.webhook.secret: give file or env"},
		{"a webhook secret env that is no name", hook("url: 'https://hooks.example/x', secret: {env: 'A-B'}"), "approvals.webhook.secret.env"},
		{"a negative timeout", hook("url: 'https://hooks.example/x', timeout: -1s, " + env), "approvals.webhook.timeout"},
		{"a timeout beyond a minute", hook("url: 'https://hooks.example/x', timeout: 2m, " + env), "approvals.webhook.timeout"},
		{"twenty retries", hook("url: 'https://hooks.example/x', retries: 20, " + env), ""},
		{"never retried", hook("url: 'https://hooks.example/x', retries: -1, " + env), ""},
		{"too many retries", hook("url: 'https://hooks.example/x', retries: 21, " + env), "approvals.webhook.retries 21"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkConfigError(t, tc.yaml, tc.wantErr)
		})
	}
}

func TestApprovalsTTLDefault(t *testing.T) {
	if got := (ApprovalsConfig{}).EffectiveTTL(); got != 24*time.Hour {
		t.Fatalf("default approvals.ttl = %v, want 24h", got)
	}
}
