package policy

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkDecide measures one decision against policy sets of 10 and 1000
// rules. In "resource==" every rule pins its tool, so a request evaluates
// only the rules filed under that tool; in "resource-in" every rule names a
// driver instead and all of them are evaluated.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			for _, scope := range []string{"resource==", "resource-in"} {
				var src strings.Builder
				for i := range n {
					target := fmt.Sprintf(`resource == Tool::"tool%d"`, i)
					if scope == "resource-in" {
						target = fmt.Sprintf(`resource in Driver::"driver%d"`, i)
					}
					fmt.Fprintf(&src, "@id(\"p%d\")\npermit (principal, action == Action::\"RunTool\", %s)\nwhen { context.args has path && context.args.path like \"docs/*\" };\n", i, target)
				}
				e := mustLoad(b, policyDir(b, map[string]string{DefaultRef + ".cedar": src.String()}))
				req := Request{
					Caller: "alice", Action: ActionRunTool, RequestID: "req-1",
					ToolID: fmt.Sprintf("tool%d", n-1), Driver: fmt.Sprintf("driver%d", n-1),
					Args: map[string]any{"path": "docs/readme.md", "limit": 10},
				}
				want := fmt.Sprintf("p%d", n-1)
				b.Run(scope, func(b *testing.B) {
					ctx := context.Background()
					for b.Loop() {
						if d := e.Decide(ctx, req); !d.Allow || d.RuleID != want {
							b.Fatalf("Decide = %+v, want allow by %s", d, want)
						}
					}
				})
			}
		})
	}
}

// BenchmarkDecideApproval measures one approver decision and one decision
// held for approval, on a set of 10 approval rules and 10 Approve permits.
func BenchmarkDecideApproval(b *testing.B) {
	var src strings.Builder
	for i := range 10 {
		fmt.Fprintf(&src, "@id(\"hold%d\") @approval(\"ops\")\npermit (principal, action == Action::\"RunTool\", resource == Tool::\"tool%d\");\n", i, i)
		fmt.Fprintf(&src, "@id(\"approve%d\")\npermit (principal, action == Action::\"Approve\", resource == Tool::\"tool%d\")\nwhen { principal.groups.contains(context.group) };\n", i, i)
	}
	e := mustLoad(b, policyDir(b, map[string]string{DefaultRef + ".cedar": src.String()}))
	ctx := context.Background()
	args := map[string]any{"path": "docs/readme.md", "limit": 10}
	b.Run("held", func(b *testing.B) {
		req := Request{Caller: "alice", Action: ActionRunTool, RequestID: "req-1", ToolID: "tool9", Driver: "d", Args: args}
		for b.Loop() {
			if d := e.Decide(ctx, req); !d.ApprovalRequired || d.RuleID != "hold9" {
				b.Fatalf("Decide = %+v, want approval_required by hold9", d)
			}
		}
	})
	b.Run("approver", func(b *testing.B) {
		a := ApprovalRequest{Approver: "bob", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}}, Requester: "alice",
			Group: "ops", ToolID: "tool9", Driver: "d", RequestID: "req-1", Args: args}
		for b.Loop() {
			if d := e.DecideApproval(ctx, a); !d.Allow || d.RuleID != "approve9" {
				b.Fatalf("DecideApproval = %+v, want allow by approve9", d)
			}
		}
	})
}

// BenchmarkLoad measures loading one policy file of 10,000 argument rules,
// each pinning its tool and testing an argument, as a catalog's generated
// rules do: what every hot reload pays. B/op is all the memory allocated
// while loading; retained-B is the heap the loaded Engine keeps.
func BenchmarkLoad(b *testing.B) {
	const n = 10000
	var src strings.Builder
	for i := range n {
		fmt.Fprintf(&src, "@id(\"rule%d\") @reason(\"reads under docs only\")\npermit (principal, action == Action::\"RunTool\", resource == Tool::\"tool%d\")\nwhen { context.args has path && context.args.path like \"docs/*\" && principal.groups.contains(\"dev\") };\n", i, i)
	}
	dir := policyDir(b, map[string]string{DefaultRef + ".cedar": src.String()})
	b.ReportAllocs()
	var e *Engine
	for b.Loop() {
		e = mustLoad(b, dir)
	}
	if got := len(e.sets[DefaultRef].policies); got != n {
		b.Fatalf("loaded %d rules, want %d", got, n)
	}
	var before, after runtime.MemStats
	e = nil
	runtime.GC()
	runtime.ReadMemStats(&before)
	e = mustLoad(b, dir)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "retained-B")
	runtime.KeepAlive(e)
}
