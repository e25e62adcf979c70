package policy

import (
	"context"
	"fmt"
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
