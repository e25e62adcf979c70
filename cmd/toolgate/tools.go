package main

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/internal/termsafe"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// toolsCmd lists the tools the gateway would let this caller run. Exit 0
// when it answered (even with no tools), 2 on an error.
func toolsCmd(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs := newFlagSet("toolgate tools", "[flags] [QUERY]", "", std)
	conn := addConnFlags(fs)
	limit := fs.Int("limit", 0, "print at most `N` tools (0: the gateway's default, 100)")
	policyRef := fs.String("policy-ref", "", "policy set to check with (default policy.default)")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "toolgate tools: "+format+"\n", a...)
		return exitError
	}
	if fs.NArg() > 1 {
		return fail("want at most one QUERY argument (quote several words)")
	}
	client, closeConn, ctx, err := conn.dial(ctx, std.Getenv)
	if err != nil {
		return fail("%v", err)
	}
	defer closeConn()
	resp, err := client.ListTools(ctx, &toolgatev1.ListToolsRequest{
		Query: fs.Arg(0), Limit: int32(*limit), PolicyRef: *policyRef,
	})
	if err != nil {
		st := status.Convert(err)
		return fail("%s: %s", st.Code(), termsafe.Text(st.Message()))
	}
	fmt.Fprintln(stdout, "tool_id\tdriver\ttags\tdescription")
	for _, t := range resp.GetTools() {
		fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", cell(t.GetToolId()), cell(t.GetDriver()), cell(strings.Join(t.GetTags(), ",")), cell(t.GetDescription()))
	}
	return exitOK
}
