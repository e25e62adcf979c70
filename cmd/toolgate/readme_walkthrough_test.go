package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walkthroughBlocks returns the fenced blocks under the heading heading of
// the documentation page page (relative to the repository root), by
// language, in order; blocks inside list items are dedented.
func walkthroughBlocks(t *testing.T, page, heading string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", page))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]string{}
	in, lang, indent := false, "", ""
	var cur strings.Builder
	open := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case open && strings.HasPrefix(trimmed, "```"):
			blocks[lang] = append(blocks[lang], cur.String())
			cur.Reset()
			open = false
		case open:
			cur.WriteString(strings.TrimPrefix(line, indent) + "\n")
		case strings.HasPrefix(line, "#"):
			in = strings.TrimSpace(line) == heading
		case in && strings.HasPrefix(trimmed, "```"):
			open, lang = true, strings.TrimPrefix(trimmed, "```")
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
		}
	}
	return blocks
}

// TestReadmeSecurityTeamWalkthrough: the walkthrough's rules (its
// exfiltration rule and rate limit among them) validate, its test file
// passes against them, and its dry run with a session file is denied as
// it says.
func TestReadmeSecurityTeamWalkthrough(t *testing.T) {
	t.Parallel()
	blocks := walkthroughBlocks(t, "docs/security/policy.md", "## A security team's walkthrough")
	if len(blocks["cedar"]) != 1 || len(blocks["json"]) != 2 {
		t.Fatalf("the walkthrough has %d cedar and %d json blocks, want 1 and 2 (rules; tests, session)",
			len(blocks["cedar"]), len(blocks["json"]))
	}
	for _, want := range []string{"context.session.labels", "context.caller.toolCallsLastMinute", `@label("sensitive")`} {
		if !strings.Contains(blocks["cedar"][0], want) {
			t.Errorf("the walkthrough's rules lack %s", want)
		}
	}
	dir := policyFolder(t, map[string]string{
		"policy.default.cedar":     blocks["cedar"][0],
		"policy.default.test.json": blocks["json"][0],
	})
	session := filepath.Join(t.TempDir(), "session.json")
	if err := os.WriteFile(session, []byte(blocks["json"][1]), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"validate", []string{"policy", "validate", dir}, exitOK, ""},
		{"test", []string{"policy", "test", dir}, exitOK, "5 passed, 0 failed"},
		{"authorize with the session", []string{"policy", "authorize", "--policies", dir, "--caller", "agent", "--tool", "workspace.createFile",
			"--args", `{"path": "public/x", "content": "hi"}`, "--session-json", session}, exitFailure, "no_public_after_sensitive"},
		{"authorize without it", []string{"policy", "authorize", "--policies", dir, "--caller", "agent", "--tool", "workspace.createFile",
			"--args", `{"path": "public/x", "content": "hi"}`}, exitOK, "write_public"},
	}
	for _, s := range steps {
		out, stderr, code := runTool(t, ".", s.args...)
		if code != s.code || !strings.Contains(out, s.want) {
			t.Errorf("%s: exit %d, want %d with %q; output:\n%s%s", s.name, code, s.code, s.want, out, stderr)
		}
	}
}

// TestPolicyAuthorizeSessionJSON: --session-json is read strictly; a
// misspelt fact or an impossible history is an error, not a zero.
func TestPolicyAuthorizeSessionJSON(t *testing.T) {
	t.Parallel()
	dir := policyFolder(t, map[string]string{"policy.default.cedar": `@id("three") forbid (principal, action, resource)
when { context.session.toolCalls >= 3 };
@id("ok") permit (principal, action, resource);`})
	tmp := t.TempDir()
	tests := []struct {
		name, session string
		code          int
		want          string
	}{
		{"under the limit", `{"calls": 2, "toolCalls": 2}`, exitOK, "rule_id:    ok"},
		{"at the limit", `{"calls": 5, "toolCalls": 3}`, exitFailure, "rule_id:    three"},
		{"a misspelt fact", `{"calls": 5, "toolCall": 3}`, exitError, `unknown field "toolCall"`},
		{"an impossible history", `{"calls": 1, "toolCalls": 3}`, exitError, "toolCalls 3 is more than calls 1"},
		{"not an object", `[1]`, exitError, "--session-json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(tmp, strings.ReplaceAll(tt.name, " ", "-")+".json")
			if err := os.WriteFile(path, []byte(tt.session), 0o600); err != nil {
				t.Fatal(err)
			}
			checkAuthorize(t, dir, []string{"--caller", "a", "--tool", "workspace.readFile", "--session-json", path}, tt.code, []string{tt.want})
		})
	}
}
