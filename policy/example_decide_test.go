package policy_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/toolgate/toolgate/policy"
)

// A security team's rule set, loaded from its folder and asked about two
// calls: the forbid names the rule that decided, with its reason.
func ExampleEngine_Decide() {
	dir, err := os.MkdirTemp("", "policies")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rules := `@id("reads") permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
@id("no_secrets") @reason("files under secrets/ are never read")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secrets/*" };`
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(rules), 0o600); err != nil {
		log.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, path := range []string{"notes/todo.txt", "secrets/prod.env"} {
		d := engine.Decide(context.Background(), policy.Request{
			Caller: "ci-bot", Action: policy.ActionRunTool,
			ToolID: "workspace.readFile", Driver: "workspace",
			RequestID: "example-1",
			Args:      map[string]any{"path": path},
		})
		fmt.Printf("%s: allow=%v rule=%s (%s)\n", path, d.Allow, d.RuleID, d.Reason)
	}
	// Output:
	// notes/todo.txt: allow=true rule=reads (permitted by policy reads)
	// secrets/prod.env: allow=false rule=no_secrets (files under secrets/ are never read)
}
