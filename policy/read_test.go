package policy

import (
	"context"
	"testing"
)

func TestDecideRead(t *testing.T) {
	t.Parallel()
	team := `@id("team_reads")
permit (principal, action == Action::"ReadEvidence", resource)
when { context.requesterGroups.containsAny(principal.groups) };
`
	tests := []struct {
		name     string
		files    map[string]string
		req      ReadRequest
		allow    bool
		wantRule string
	}{
		{
			name:  "the shipped default lets a caller read its own call",
			req:   ReadRequest{Reader: "alice", Requester: "alice", ToolID: "workspace.readFile", Driver: "workspace", RequestID: "r1"},
			allow: true, wantRule: "read_own_evidence",
		},
		{
			name:     "the shipped default hides another caller's call",
			req:      ReadRequest{Reader: "mallory", Requester: "alice", ToolID: "workspace.readFile", Driver: "workspace", RequestID: "r1"},
			wantRule: RuleDefaultDeny,
		},
		{
			name:     "a permit for every action never opens the record",
			files:    map[string]string{"policy.default.cedar": `@id("all") permit (principal, action, resource);`},
			req:      ReadRequest{Reader: "mallory", Requester: "alice", ToolID: "t", RequestID: "r1"},
			wantRule: RuleDefaultDeny,
		},
		{
			name:  "a team rule opens the calls of the reader's groups",
			files: map[string]string{"policy.default.cedar": team},
			req: ReadRequest{Reader: "bob", ReaderAttrs: CallerAttributes{Groups: []string{"ops"}}, Requester: "alice",
				RequesterAttrs: CallerAttributes{Groups: []string{"ops", "dev"}}, ToolID: "t", RequestID: "r1"},
			allow: true, wantRule: "team_reads",
		},
		{
			name:  "a team rule hides other teams",
			files: map[string]string{"policy.default.cedar": team},
			req: ReadRequest{Reader: "bob", ReaderAttrs: CallerAttributes{Groups: []string{"sec"}}, Requester: "alice",
				RequesterAttrs: CallerAttributes{Groups: []string{"ops"}}, ToolID: "t", RequestID: "r1"},
			wantRule: RuleDefaultDeny,
		},
		{
			name: "a forbid for every action wins, and rules reading args still load",
			files: map[string]string{"policy.default.cedar": `@id("readers") permit (principal, action == Action::"ReadEvidence", resource);
@id("no_paths") forbid (principal, action, resource) when { context.args has path };
@id("no_shell") forbid (principal, action, resource == Tool::"workspace.shell");`},
			req:      ReadRequest{Reader: "bob", Requester: "alice", ToolID: "workspace.shell", Driver: "workspace", RequestID: "r1"},
			wantRule: "no_shell",
		},
		{
			name:     "a request without a requester fails closed",
			req:      ReadRequest{Reader: "bob", ToolID: "t", RequestID: "r1"},
			wantRule: RulePolicyError,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := shippedDir
			if tc.files != nil {
				dir = policyDir(t, tc.files)
			}
			d := mustLoad(t, dir).DecideRead(context.Background(), tc.req)
			if d.Allow != tc.allow || d.RuleID != tc.wantRule {
				t.Fatalf("DecideRead = allow %v rule %q (%s), want allow %v rule %q", d.Allow, d.RuleID, d.Reason, tc.allow, tc.wantRule)
			}
		})
	}
}

// BenchmarkDecideRead is one ReadEvidence decision on the shipped
// policy: what the console pays per request the first time a person's
// listing passes it (decisions are cached per reader and request until
// the policy reloads).
func BenchmarkDecideRead(b *testing.B) {
	e := mustLoad(b, shippedDir)
	r := ReadRequest{Reader: "mallory", Requester: "alice", ToolID: "workspace.readFile", Driver: "workspace", RequestID: "r1", RunID: "run-1"}
	for b.Loop() {
		if e.DecideRead(context.Background(), r).Allow {
			b.Fatal("allowed")
		}
	}
}
