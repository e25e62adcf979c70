package policy

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// historyPolicies is a set a security team writes with history: a label on
// reading secrets, a flow rule, a per-session cap and a caller rate limit.
const historyPolicies = `
@id("read-secrets") @label("sensitive") @caller_label("saw-secrets")
permit (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secret/*" };

@id("read") @label("read, fs")
permit (principal, action, resource == Tool::"workspace.readFile");

@id("write")
permit (principal, action, resource == Tool::"workspace.createFile");

@id("no-egress-after-sensitive") @reason("the session read sensitive data")
forbid (principal, action, resource)
when { context.session.labels.contains("sensitive") && resource.tags.contains("egress") };

@id("three-reads") @reason("at most 3 reads per session")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.session.toolCalls >= 3 };

@id("rate") @reason("at most 10 calls a minute")
forbid (principal, action, resource)
when { context.caller.callsLastMinute >= 10 };

@id("session-cap")
forbid (principal, action, resource)
when { context.session.calls >= 100 };
`

func TestDecideWithHistory(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{"policy.default.cedar": historyPolicies}))
	egress := ToolAttributes{Tags: []string{"egress"}, Labels: []string{"wrote"}}
	tests := []struct {
		name         string
		tool         string
		attrs        ToolAttributes
		args         map[string]any
		history      History
		wantAllow    bool
		wantRule     string
		wantLabels   []string
		wantCallerLs []string
	}{
		{
			name: "a first secret read is allowed and labels the session and the caller",
			tool: "workspace.readFile", args: map[string]any{"path": "secret/k"},
			wantAllow: true, wantRule: "read-secrets",
			wantLabels: []string{"fs", "read", "sensitive"}, wantCallerLs: []string{"saw-secrets"},
		},
		{
			name: "a plain read carries only its own permit's labels",
			tool: "workspace.readFile", args: map[string]any{"path": "docs/a"},
			wantAllow: true, wantRule: "read", wantLabels: []string{"fs", "read"},
		},
		{
			name: "egress before anything sensitive is allowed and adds the catalog label",
			tool: "workspace.createFile", attrs: egress,
			wantAllow: true, wantRule: "write", wantLabels: []string{"wrote"},
		},
		{
			name: "egress after a sensitive label is denied by the flow rule",
			tool: "workspace.createFile", attrs: egress, history: History{Calls: 1, Labels: []string{"sensitive"}},
			wantRule: "no-egress-after-sensitive",
		},
		{
			name: "a non-egress write after a sensitive label is allowed",
			tool: "workspace.createFile", history: History{Calls: 1, Labels: []string{"sensitive"}},
			wantAllow: true, wantRule: "write",
		},
		{
			name: "the third read of a session is allowed",
			tool: "workspace.readFile", history: History{Calls: 2, ToolCalls: 2},
			wantAllow: true, wantRule: "read", wantLabels: []string{"fs", "read"},
		},
		{
			name: "the fourth read of a session is denied",
			tool: "workspace.readFile", history: History{Calls: 3, ToolCalls: 3},
			wantRule: "three-reads",
		},
		{
			name: "the caller's eleventh call in a minute is denied",
			tool: "workspace.createFile", history: History{CallsLastMinute: 10, ToolCallsLastMinute: 1},
			wantRule: "rate",
		},
		{
			name: "a session at its cap is denied",
			tool: "workspace.createFile", history: History{Calls: 100},
			wantRule: "session-cap",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := call(tt.tool)
			req.Tool, req.Args, req.History = tt.attrs, tt.args, tt.history
			d := e.Decide(context.Background(), req)
			if d.Allow != tt.wantAllow || d.RuleID != tt.wantRule {
				t.Fatalf("Decide = allow %v by %q (%s), want allow %v by %q", d.Allow, d.RuleID, d.Reason, tt.wantAllow, tt.wantRule)
			}
			if !slices.Equal(d.Labels, tt.wantLabels) || !slices.Equal(d.CallerLabels, tt.wantCallerLs) {
				t.Errorf("labels = %v, caller labels = %v; want %v and %v", d.Labels, d.CallerLabels, tt.wantLabels, tt.wantCallerLs)
			}
		})
	}
}

// TestApprovalRequiredCarriesLabels: a held-back call, once approved and
// dispatched, labels its session as an allowed one does.
func TestApprovalRequiredCarriesLabels(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{"policy.default.cedar": `
@id("held") @approval("ops") @label("sensitive")
permit (principal, action, resource == Tool::"workspace.readFile");`}))
	d := e.Decide(context.Background(), call("workspace.readFile"))
	if !d.ApprovalRequired || !slices.Equal(d.Labels, []string{"sensitive"}) {
		t.Fatalf("Decide = %+v, want approval_required with label sensitive", d)
	}
}

func TestLabelAnnotationErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		policy  string
		wantErr string
	}{
		{
			name:    "a label on a forbid",
			policy:  `@label("x") forbid (principal, action, resource);`,
			wantErr: "@label is allowed only on a permit",
		},
		{
			name:    "a caller label on a forbid",
			policy:  `@caller_label("x") forbid (principal, action, resource);`,
			wantErr: "@caller_label is allowed only on a permit",
		},
		{
			name:    "an empty label",
			policy:  `@label("") permit (principal, action, resource);`,
			wantErr: `@label(""): label "" must be`,
		},
		{
			name:    "a label with a space inside",
			policy:  `@label("two words") permit (principal, action, resource);`,
			wantErr: `label "two words" must be`,
		},
		{
			name:    "an empty entry in a list",
			policy:  `@caller_label("a,,b") permit (principal, action, resource);`,
			wantErr: `label "" must be`,
		},
		{
			name:    "too many labels",
			policy:  `@label("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q") permit (principal, action, resource);`,
			wantErr: "17 labels, the limit is 16",
		},
		{
			name:    "a misspelt history attribute",
			policy:  `permit (principal, action, resource) when { context.session.toolcalls < 3 };`,
			wantErr: "toolcalls",
		},
		{
			name:    "a count compared with a string",
			policy:  `permit (principal, action, resource) when { context.caller.callsLastMinute == "3" };`,
			wantErr: "p.cedar:1:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(policyDir(t, map[string]string{"p.cedar": tt.policy}))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Load error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSplitLabels(t *testing.T) {
	t.Parallel()
	got, err := splitLabels(" b, a ,b,ns:x ")
	if err != nil || !slices.Equal(got, []string{"a", "b", "ns:x"}) {
		t.Fatalf("splitLabels = %v, %v; want [a b ns:x]", got, err)
	}
}

func TestUsesHistory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		want   bool
	}{
		{"no history", `permit (principal, action, resource == Tool::"workspace.readFile");`, false},
		{"a label", `@label("x") permit (principal, action, resource);`, true},
		{"a caller label", `@caller_label("x") permit (principal, action, resource);`, true},
		{"a session count", `forbid (principal, action, resource) when { context.session.calls > 3 };`, true},
		{"a rate", `forbid (principal, action, resource) when { context.caller.callsLastMinute > 3 };`, true},
		{"the words only in annotations", `@id("any caller") @reason("every caller, any session, may read")
permit (principal, action, resource == Tool::"workspace.readFile");`, false},
		{"a session read by index", `forbid (principal, action, resource) when { context["session"]["calls"] > 3 };`, true},
		{"a has test of the caller's facts", `forbid (principal, action, resource) when { context has caller };`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := mustLoad(t, policyDir(t, map[string]string{"p.cedar": tt.policy}))
			if got := e.UsesHistory(); got != tt.want {
				t.Errorf("UsesHistory() = %v, want %v", got, tt.want)
			}
		})
	}
}

// The shipped default policy reads no history, so a gateway on it writes
// no history slots.
func TestDefaultPolicyKeepsNoHistory(t *testing.T) {
	t.Parallel()
	if mustLoad(t, "../policies").UsesHistory() {
		t.Error("the default policy turns history on")
	}
}
