package config

import (
	"testing"
)

// The log's state file lives beside the signing key unless configured,
// one per instance, so that instances sharing a key file never share it.
func TestLogStateFileDefaults(t *testing.T) {
	t.Parallel()
	file := &SigningKeySource{SecretSource: SecretSource{File: "/keys/signing.pem"}}
	env := &SigningKeySource{SecretSource: SecretSource{Env: "TOOLGATE_KEY"}}
	for _, tc := range []struct {
		name, url, state string
		key              *SigningKeySource
		want             string
	}{
		{"beside a key file", "file://./ev", "", file, "/keys/signing.pem.gw-1.log-state"},
		{"a key from the environment", "file://./ev", "", env, "toolgate.gw-1.log-state"},
		{"configured", "file://./ev", "/var/lib/toolgate/log-state", file, "/var/lib/toolgate/log-state"},
		{"none", "file://./ev", "none", file, ""},
		{"a memory store dies with the process", "mem://", "", file, ""},
		{"a memory store with a file named", "mem://", "./state", file, "./state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			c.Evidence.URL, c.Evidence.SigningKey, c.Log.StateFile = tc.url, tc.key, tc.state
			if got := c.LogStateFile("gw-1"); got != tc.want {
				t.Fatalf("logStateFile = %q, want %q", got, tc.want)
			}
		})
	}
}
