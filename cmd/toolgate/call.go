package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway/wire"
	"github.com/toolgate/toolgate/internal/termsafe"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// callExitCodes is what "toolgate call -h" says before the flags.
const callExitCodes = `
Exit 0 when the call ran and the tool succeeded, 1 on a deny or a tool
failure, 2 on a usage error or a failed call (unreachable gateway, bad
request …), 3 when policy holds the call for a human's approval: it has not
run; the reply's pending_approval names the approval, and once someone has
decided it ("toolgate approvals approve|deny ID"), the same call with the
same --request-id runs once, or ends denied.
`

// callCmd runs one RunTool call. Exit 0 when the response is ok, 1 on a deny
// or a tool failure, 2 on any error, 3 when the call waits for approval.
func callCmd(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs := newFlagSet("toolgate call", "--request-id ID --tool TOOL [flags]", callExitCodes, std)
	conn := addConnFlags(fs)
	requestID := fs.String("request-id", "", "stable request `id` (required); retries reuse it")
	tool := fs.String("tool", "", "tool `id` (required), e.g. workspace.readFile")
	argsJSON := fs.String("args", "{}", "tool arguments as a JSON `object`")
	runID := fs.String("run-id", "", "ctx.run_id")
	stepID := fs.String("step-id", "", "ctx.step_id")
	policyRef := fs.String("policy-ref", "", "ctx.policy_ref (default policy.default)")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "toolgate call: "+format+"\n", a...)
		return exitError
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	if *requestID == "" || *tool == "" {
		return fail("--request-id and --tool are required")
	}
	var argMap map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(*argsJSON)))
	if err := dec.Decode(&argMap); err != nil || dec.More() {
		return fail("--args: want one JSON object: %v", err)
	}
	argStruct, err := structpb.NewStruct(argMap)
	if err != nil {
		return fail("--args: %v", err)
	}
	client, closeConn, ctx, err := conn.dial(ctx, std.Getenv)
	if err != nil {
		return fail("%v", err)
	}
	defer closeConn()
	req := &toolgatev1.RunToolRequest{RequestId: *requestID, ToolId: *tool, Args: argStruct}
	if *runID != "" || *stepID != "" || *policyRef != "" {
		req.Ctx = &toolgatev1.RunContext{RunId: *runID, StepId: *stepID, PolicyRef: *policyRef}
	}
	resp, err := client.RunTool(ctx, req)
	if err != nil {
		st := status.Convert(err)
		fmt.Fprintf(stderr, "toolgate call: %s: %s\n", st.Code(), termsafe.Text(st.Message()))
		for _, d := range st.Details() {
			if f, ok := d.(*toolgatev1.RunToolFailure); ok {
				fmt.Fprintf(stderr, "evidence written: %s\n", termsafe.Text(fmt.Sprint(f.GetEvidenceRefs())))
			}
		}
		return exitError
	}
	out, err := wire.MarshalResponse(resp)
	if err != nil {
		return fail("%v", err)
	}
	pretty, err := termsafe.Indent(out, "", "  ")
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(pretty))
	if p := resp.GetPendingApproval(); p != nil {
		fmt.Fprintf(stderr, "toolgate call: not run: waiting for approval %s by a member of %s (rule %s), until %s\n"+
			"once it is decided, run the same call with --request-id %s again\n",
			cell(p.GetApprovalId()), cell(p.GetApprovers()), cell(p.GetRuleId()),
			p.GetExpiresAt().AsTime().UTC().Format(time.RFC3339), cell(*requestID))
		return exitPending
	}
	if !resp.GetOk() {
		return exitFailure
	}
	return exitOK
}
