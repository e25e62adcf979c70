package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/redact"
)

func TestRedactCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	token := "ghp_" + "R7kQ2mX9vL4pT8wZ1nB6cY3dF5gH0jK2sA4e"
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	logFile := write("build.log", "cloning with "+token+"\nacme token acme_0123456789abcdefghijklmn\n")
	jsonFile := write("result.json", `{"db": {"password": "hunter2-Kx"}, "ok": true}`)
	rules := write("rules.toml", "[[rules]]\nid = \"acme-token\"\nregex = '''\\b(acme_[a-z0-9]{24})\\b'''\nkeywords = [\"acme_\"]\n")

	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string // substrings of stdout
		notOut   []string
		rules    []string // rules of the findings on stderr, in order
	}{
		{"text with the default rules", []string{logFile}, exitFailure,
			[]string{"[REDACTED:github-pat]", "acme_0123456789abcdefghijklmn"}, []string{token}, []string{"github-pat"}},
		{"a team's rules file", []string{"--rules-file", rules, logFile}, exitFailure,
			[]string{"[REDACTED:acme-token]"}, []string{"acme_0123"}, []string{"github-pat", "acme-token"}},
		{"a disabled rule", []string{"--disable", "github-pat", logFile}, exitOK,
			[]string{token}, nil, nil},
		{"JSON keeps its structure", []string{"--json", jsonFile}, exitFailure,
			[]string{`{"db": {"password": "[REDACTED:secret-key-name]"}, "ok": true}`}, []string{"hunter2"}, []string{"secret-key-name"}},
		{"rule list", []string{"--list-rules"}, exitOK,
			[]string{"generic-api-key", "gitleaks", "connection-string-password", "toolgate"}, nil, nil},
		{"unknown rule to disable", []string{"--disable", "no-such-rule", logFile}, exitError, nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"redact"}, tc.args...), stdio{Out: &stdout, Err: &stderr, Getenv: func(string) string { return "" }})
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, s := range tc.wantOut {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tc.notOut {
				if strings.Contains(stdout.String()+stderr.String(), s) {
					t.Errorf("output holds %q", s)
				}
			}
			if code == exitError {
				return
			}
			var got []string
			dec := json.NewDecoder(&stderr)
			for dec.More() {
				var f redact.Finding
				if err := dec.Decode(&f); err != nil {
					t.Fatalf("stderr is not JSON lines: %v", err)
				}
				got = append(got, f.Rule)
			}
			if strings.Join(got, " ") != strings.Join(tc.rules, " ") {
				t.Errorf("findings %v, want %v", got, tc.rules)
			}
		})
	}
}
