package policy

import (
	"context"
	"strings"
	"testing"
)

const suggestionRules = `
@id("shell_ok") @reason("ordinary commands")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");
@id("no_curl") @reason("network tools are not allowed") @suggestion("use the fetch tool instead")
forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.shell")
when { context.args has command && context.args.command like "curl*" };
@id("cleanup") @approval("ops") @suggestion("ask someone in ops, or delete files one by one")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.deleteFile");
@id("reads") @suggestion("reads are fine; keep them small")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
`

func TestSuggestionIsTheDecidingRules(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": suggestionRules}))
	shell := func(cmd string) Request {
		r := call("workspace.shell")
		r.Args = map[string]any{"command": cmd}
		return r
	}
	for _, tc := range []struct {
		name, rule, suggestion string
		req                    Request
	}{
		{"a forbid with a suggestion hands it to the denied caller", "no_curl", "use the fetch tool instead", shell("curl x")},
		{"a permit without one has none", "shell_ok", "", shell("ls")},
		{"a permit marked @approval carries its suggestion while held", "cleanup", "ask someone in ops, or delete files one by one", call("workspace.deleteFile")},
		{"an allowing permit carries its suggestion too", "reads", "reads are fine; keep them small", call("workspace.readFile")},
		{"the default deny has none", RuleDefaultDeny, "", call("workspace.createFile")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tc.req)
			if d.RuleID != tc.rule || d.Suggestion != tc.suggestion {
				t.Errorf("decided by %s with suggestion %q, want %s with %q", d.RuleID, d.Suggestion, tc.rule, tc.suggestion)
			}
		})
	}
	t.Run("a policy error drops the suggestion with the rule", func(t *testing.T) {
		if d := failed(Decision{RuleID: "no_curl", Suggestion: "use the fetch tool instead"}, "boom"); d.Suggestion != "" {
			t.Errorf("policy_error kept suggestion %q", d.Suggestion)
		}
	})
	t.Run("Explain lists each matching rule's suggestion", func(t *testing.T) {
		x := e.Explain(context.Background(), shell("curl x"))
		var got []string
		for _, m := range x.Matched {
			got = append(got, m.RuleID+"="+m.Suggestion)
		}
		if strings.Join(got, ",") != "shell_ok=,no_curl=use the fetch tool instead" {
			t.Errorf("matched %v", got)
		}
	})
}

func TestPolicyValidateChecksSuggestions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, annotation, want string }{
		{"an empty suggestion says nothing", `@suggestion("")`, "@suggestion must not be empty"},
		{"a newline could forge lines where suggestions are shown", `@suggestion("use fetch\ninstead")`, "printable characters only, on one line (found U+000A)"},
		{"a terminal escape is refused", `@suggestion("\u{1b}[31mred")`, "found U+001B"},
		{"a suggestion over 512 bytes is refused", `@suggestion("` + strings.Repeat("x", 513) + `")`, "@suggestion: 513 bytes, the limit is 512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := policyDir(t, map[string]string{"p.cedar": "@id(\"r\") " + tc.annotation + "\nforbid (principal, action, resource);"})
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `policy "r"`) {
				t.Errorf("Load: %v, want an error about rule r containing %q", err, tc.want)
			}
		})
	}
	t.Run("512 printable bytes, UTF-8 included, are accepted on a forbid and a permit", func(t *testing.T) {
		s := strings.Repeat("é", 256) // 512 bytes
		mustLoad(t, policyDir(t, map[string]string{"p.cedar": `@id("f") @suggestion("` + s + `") forbid (principal, action, resource);
@id("p") @suggestion("try again later") permit (principal, action, resource);`}))
	})
}

func TestPolicyTestsMayExpectASuggestion(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{
		DefaultRef + ".cedar": suggestionRules,
		"s.test.json": `{"tests": [
			{"name": "right", "request": {"caller": "a", "tool": "workspace.shell", "args": {"command": "curl x"}}, "expect": {"decision": "deny", "suggestion": "use the fetch tool instead"}},
			{"name": "wrong", "request": {"caller": "a", "tool": "workspace.shell", "args": {"command": "curl x"}}, "expect": {"decision": "deny", "suggestion": "use wget"}}
		]}`,
	})
	rep, err := RunTests(context.Background(), dir, testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Passed() != 1 || rep.Failed() != 1 {
		t.Fatalf("%d passed, %d failed, want 1 and 1: %+v", rep.Passed(), rep.Failed(), rep.Results)
	}
	for _, r := range rep.Results {
		if r.Case.Name == "wrong" && (len(r.Mismatches) != 1 || !strings.Contains(r.Mismatches[0], `suggestion: want "use wget", got "use the fetch tool instead"`)) {
			t.Errorf("mismatches %v", r.Mismatches)
		}
	}
}
