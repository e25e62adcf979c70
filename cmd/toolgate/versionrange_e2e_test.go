package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileCatalogVersionRange: a TPMJS catalog entry or registry
// version whose range an executor would paste into its shell (a space
// starts another word, "<" and ">" redirect, "||" runs a command, "*"
// globs) stops `check config` and `serve`, naming the key; the forms that
// are literal to a shell still start.
func TestHostileCatalogVersionRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, version, key string
	}{
		{"a comparator range with a space", ">=0.1.0 <1.0.0", "tools.js.hello"},
		{"a redirection", ">=0.1.0", "tools.js.hello"},
		{"a union", "1.x||2.x", "tools.js.hello"},
		{"a glob", "1.*", "tools.js.hello"},
		{"a registry range", "registry:>=1 <2", "drivers.js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tourDir(t)
			cfg := "drivers: {js: {type: tpmjs, url: 'http://127.0.0.1:1'}}\n" +
				"tools: {js.hello: {driver: js, package: hello-tool, export: hello, version: '" + tc.version + "'}}\n"
			if v, ok := strings.CutPrefix(tc.version, "registry:"); ok {
				cfg = "drivers: {js: {type: tpmjs, url: 'http://127.0.0.1:1', allow_registry_ids: true, registry_version: '" + v + "'}}\n"
			}
			if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"check", "config", "toolgate.yaml"}, {"serve", "--config", "toolgate.yaml", "--listen", "127.0.0.1:0"}} {
				out, stderr, code := runTool(t, dir, args...)
				if code == exitOK || !strings.Contains(out+stderr, tc.key) || !strings.Contains(out+stderr, "not allowed") {
					t.Fatalf("%s: exit %d, want a refusal naming %s:\n%s%s", args[0], code, tc.key, out, stderr)
				}
			}
		})
	}
	t.Run("forms literal to a shell", func(t *testing.T) {
		dir := tourDir(t)
		cfg := "drivers: {js: {type: tpmjs, url: 'http://127.0.0.1:1', allow_registry_ids: true, registry_version: '~1.2'}}\n" +
			"tools: {js.a: {driver: js, package: a-tool, export: a, version: '^0.1.0'}, js.b: {driver: js, package: b-tool, export: b, version: '1.x'}}\n"
		if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, stderr, code := runTool(t, dir, "check", "config", "toolgate.yaml"); code != exitOK {
			t.Fatalf("exit %d:\n%s%s", code, out, stderr)
		}
	})
}
