package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostileServeFilesThatWouldHangIt: a file the configuration names
// that is a named pipe or a device makes serve stop with a message, at
// once. Before, serve read such files whole: a named pipe without a writer
// blocked it for ever, and /dev/zero filled its memory.
func TestHostileServeFilesThatWouldHangIt(t *testing.T) {
	t.Parallel()
	fifo := func(t *testing.T, path string) {
		t.Helper()
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(t *testing.T, target, path string) {
		t.Helper()
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, cfg string
		plant     func(t *testing.T, dir string)
		want      string
	}{
		{"a policy file linked to a named pipe", "policies: {dir: ./policies}\n", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "pipe"))
			link(t, filepath.Join(dir, "pipe"), filepath.Join(dir, "policies", "policy.pipe.cedar"))
		}, "is a named pipe"},
		{"a policy schema linked to /dev/zero", "policies: {dir: ./policies}\n", func(t *testing.T, dir string) {
			link(t, "/dev/zero", filepath.Join(dir, "policies", "toolgate.cedarschema"))
		}, "is a device"},
		{"a redaction rules file that is /dev/zero", "redact: {rules_file: /dev/zero}\n", nil, "is a device"},
		{"a fingerprint key that is a named pipe", "redact: {fingerprint_key: {file: ./fp.key}}\n", func(t *testing.T, dir string) {
			fifo(t, filepath.Join(dir, "fp.key"))
		}, "is a named pipe"},
		{"a webhook secret that is /dev/zero", "approvals:\n  webhook: {url: http://127.0.0.1:9/hook, secret: {file: /dev/zero}}\n", nil, "is a device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := checkDir(t, tc.cfg)
			if tc.plant != nil {
				tc.plant(t, dir)
			}
			stderr := serveMustRefuse(t, dir, "--config", "cfg.yaml")
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("serve stopped, but its message lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}
