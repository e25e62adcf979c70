package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/internal/termsafe"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

const approvalsUsage = `Usage:
  toolgate approvals ls [--state S] [--tool T] [--request ID] [--limit N] [--json] [flags]
  toolgate approvals show ID [--json] [flags]
  toolgate approvals approve ID --reason TEXT [--json] [flags]
  toolgate approvals deny ID --reason TEXT [--json] [flags]

` + approvalsAbout

// approvalsAbout is what every approvals usage says after its usage lines.
const approvalsAbout = `ls lists the approvals you may decide or have asked for (pending ones unless
--state says otherwise: pending, approved, denied, expired, consumed, all).
show prints one approval with the call's arguments and its evidence.
approve and deny decide a pending call; the caller then retries it with the
same request id, and it runs once (approve) or ends denied (deny).

Every subcommand takes the connection flags of "toolgate call" (--addr,
--key-env, --tls, --ca-file, --timeout). Exit 0 when done, 1 when the
gateway refused (no such approval, not yours to decide, already decided or
expired), 2 on a usage error or an unreachable gateway.
`

// approvalIDPattern is an approval id: "apr_" and 26 base32 characters.
var approvalIDPattern = regexp.MustCompile(`^apr_[a-z2-7]{26}$`)

// approvalStates are the states ListApprovals filters by.
var approvalStates = []string{"pending", "approved", "denied", "expired", "consumed", "all"}

// maxReasonBytes bounds an approver's reason, as the gateway does.
const maxReasonBytes = 1024

// approvalsCmd lists, shows and decides approvals.
func approvalsCmd(ctx context.Context, args []string, std stdio) int {
	return approvalsGroup().run(ctx, args, std)
}

// approvalsGroup is the commands of "toolgate approvals".
func approvalsGroup() group {
	return group{name: "toolgate approvals", usage: approvalsUsage, commands: map[string]command{
		"ls":   approvalsLs,
		"list": approvalsLs,
		"show": approvalsShow,
		"approve": func(ctx context.Context, args []string, std stdio) int {
			return approvalsDecide(ctx, "approve", args, std)
		},
		"deny": func(ctx context.Context, args []string, std stdio) int {
			return approvalsDecide(ctx, "deny", args, std)
		},
	}}
}

// approvalsFlags is a subcommand's flag set, with the connection flags.
func approvalsFlags(name, synopsis string, std stdio) (*flag.FlagSet, *connFlags) {
	fs := newFlagSet("toolgate approvals "+name, synopsis, approvalsAbout, std)
	return fs, addConnFlags(fs)
}

// parseWithID parses flags given before or after the one ID argument.
func parseWithID(fs *flag.FlagSet, args []string) (string, error) {
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", errors.New("want an approval ID (apr_…)")
	}
	id := fs.Arg(0)
	if err := parseFlags(fs, fs.Args()[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !approvalIDPattern.MatchString(id) {
		return "", fmt.Errorf("%s is not an approval id (apr_ and 26 characters a-z, 2-7)", printable(id))
	}
	return id, nil
}

// usageFail reports a usage error (already explained when errUsage) and
// returns exitError, or exitOK for -h.
func usageFail(std stdio, cmd string, err error) int {
	return std.exit("toolgate approvals "+cmd, err)
}

// rpcFail reports a failed RPC and returns its exit code: exitFailure when
// the gateway refused (the approval is unknown, not the caller's to
// decide, or no longer pending), exitError otherwise.
func rpcFail(stderr io.Writer, cmd string, err error) int {
	st := status.Convert(err)
	msg := fmt.Sprintf("toolgate approvals %s: %s: %s", cmd, st.Code(), printable(st.Message()))
	if st.Code() == codes.Unimplemented {
		msg += " (this gateway does not support approvals yet)"
	}
	fmt.Fprintln(stderr, msg)
	switch st.Code() {
	case codes.PermissionDenied, codes.FailedPrecondition, codes.NotFound:
		return exitFailure
	default:
		return exitError
	}
}

func approvalsLs(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs, conn := approvalsFlags("ls", "[--state S] [--tool T] [--request ID] [--limit N] [--json] [flags]", std)
	state := fs.String("state", "pending", "only approvals in this `state`: "+strings.Join(approvalStates, ", "))
	tool := fs.String("tool", "", "only approvals of this tool `id`")
	requestID := fs.String("request", "", "only the approval of this request `id`")
	limit := fs.Int("limit", 0, "print at most `N` approvals (0: all)")
	asJSON := fs.Bool("json", false, "print the approvals as JSON")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	switch {
	case fs.NArg() > 0:
		return usageFail(std, "ls", fmt.Errorf("unexpected arguments %q", fs.Args()))
	case !slices.Contains(approvalStates, *state):
		return usageFail(std, "ls", fmt.Errorf("--state %s: want one of %s", printable(*state), strings.Join(approvalStates, ", ")))
	case *limit < 0:
		return usageFail(std, "ls", errors.New("--limit: must not be negative"))
	}
	client, closeConn, ctx, err := conn.dial(ctx, std.Getenv)
	if err != nil {
		return usageFail(std, "ls", err)
	}
	defer closeConn()
	req := &toolgatev1.ListApprovalsRequest{State: *state, ToolId: *tool, RequestId: *requestID}
	approvals, err := listAll(ctx, client, req, *limit)
	if err != nil {
		return rpcFail(stderr, "ls", err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, &toolgatev1.ListApprovalsResponse{Approvals: approvals})
	}
	if len(approvals) == 0 {
		fmt.Fprintf(stdout, "no approvals (state %s)\n", *state)
		return exitOK
	}
	printApprovalTable(stdout, approvals, time.Now())
	return exitOK
}

// listAll follows the pages of ListApprovals until there are no more, or
// limit approvals are listed (0: no limit).
func listAll(ctx context.Context, client toolgatev1.ToolGatewayClient, req *toolgatev1.ListApprovalsRequest, limit int) ([]*toolgatev1.Approval, error) {
	var all []*toolgatev1.Approval
	seen := map[string]bool{}
	for {
		if limit > 0 {
			req.Limit = int32(min(limit-len(all), 1000))
		}
		resp, err := client.ListApprovals(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetApprovals()...)
		next := resp.GetNextPageToken()
		// A token seen before would list the same page forever.
		if next == "" || seen[next] || (limit > 0 && len(all) >= limit) {
			break
		}
		seen[next] = true
		req.PageToken = next
	}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, nil
}

// printApprovalTable prints one approval a line under a header.
func printApprovalTable(w io.Writer, approvals []*toolgatev1.Approval, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tREQUESTER\tRULE\tAPPROVERS\tSTATE\tEXPIRES")
	for _, a := range approvals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(a.GetApprovalId()), cell(a.GetToolId()), cell(a.GetRequester()),
			cell(a.GetRuleId()), cell(a.GetApprovers()), cell(a.GetState()), expiry(a, now))
	}
	tw.Flush()
}

// expiry is when an approval expires, and for a pending one how long that is
// from now.
func expiry(a *toolgatev1.Approval, now time.Time) string {
	if a.GetExpiresAt() == nil {
		return "-"
	}
	at := a.GetExpiresAt().AsTime().UTC()
	text := at.Format(time.RFC3339)
	if a.GetState() == "pending" {
		if left := at.Sub(now).Round(time.Minute); left > 0 {
			text += fmt.Sprintf(" (in %dh%02dm)", int(left.Hours()), int(left.Minutes())%60)
		} else {
			text += " (expired)"
		}
	}
	return text
}

// printable is s as cell shows it, but "" when empty.
func printable(s string) string {
	if s == "" {
		return ""
	}
	return cell(s)
}

// printJSON prints m as indented JSON with the proto field names.
func printJSON(stdout, stderr io.Writer, m proto.Message) int {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate approvals: %v\n", err)
		return exitError
	}
	out, err := termsafe.Indent(raw, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "toolgate approvals: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return exitOK
}

func approvalsShow(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs, conn := approvalsFlags("show", "ID [--json] [flags]", std)
	asJSON := fs.Bool("json", false, "print the approval as JSON")
	id, err := parseWithID(fs, args)
	if err != nil {
		return usageFail(std, "show", err)
	}
	client, closeConn, ctx, err := conn.dial(ctx, std.Getenv)
	if err != nil {
		return usageFail(std, "show", err)
	}
	defer closeConn()
	resp, err := client.ListApprovals(ctx, &toolgatev1.ListApprovalsRequest{ApprovalId: id, State: "all"})
	if err != nil {
		return rpcFail(stderr, "show", err)
	}
	var found *toolgatev1.Approval
	for _, a := range resp.GetApprovals() {
		if a.GetApprovalId() == id {
			found = a
		}
	}
	if found == nil {
		fmt.Fprintf(stderr, "toolgate approvals show: no approval %s that you may decide or asked for\n", id)
		return exitFailure
	}
	if *asJSON {
		return printJSON(stdout, stderr, found)
	}
	return printApproval(stdout, stderr, found, time.Now())
}

// printApproval prints every field of a, one a line, then its evidence
// and the call's arguments.
func printApproval(w, stderr io.Writer, a *toolgatev1.Approval, now time.Time) int {
	ts := func(t *timestamppb.Timestamp) string {
		if t == nil {
			return "-"
		}
		return t.AsTime().UTC().Format(time.RFC3339Nano)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range [][2]string{
		{"approval_id", cell(a.GetApprovalId())},
		{"state", cell(a.GetState())},
		{"request_id", cell(a.GetRequestId())},
		{"tool_id", cell(a.GetToolId())},
		{"requester", cell(a.GetRequester())},
		{"rule_id", cell(a.GetRuleId())},
		{"reason", cell(a.GetReason())},
		{"approvers", cell(a.GetApprovers())},
		{"requested_at", ts(a.GetRequestedAt())},
		{"expires_at", expiry(a, now)},
		{"decided_by", cell(a.GetDecidedBy())},
		{"decision_reason", cell(a.GetDecisionReason())},
		{"decided_at", ts(a.GetDecidedAt())},
		{"request_hash", cell(a.GetRequestHash())},
		{"policy_set_digest", cell(a.GetPolicySetDigest())},
		{"policy_ref", cell(a.GetPolicyRef())},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	tw.Flush()
	fmt.Fprintln(w, "evidence_refs:")
	for _, ref := range a.GetEvidenceRefs() {
		fmt.Fprintf(w, "  %s\n", cell(ref))
	}
	args := []byte("{}")
	if a.GetArgs() != nil {
		var err error
		if args, err = protojson.Marshal(a.GetArgs()); err != nil {
			fmt.Fprintf(stderr, "toolgate approvals show: args: %v\n", err)
			return exitError
		}
	}
	pretty, err := termsafe.Indent(args, "  ", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "toolgate approvals show: args: %v\n", err)
		return exitError
	}
	fmt.Fprintf(w, "args (as the evidence records them, redacted; unsafe characters escaped):\n  %s\n", pretty)
	return exitOK
}

func approvalsDecide(ctx context.Context, decision string, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs, conn := approvalsFlags(decision, "ID --reason TEXT [--json] [flags]", std)
	reason := fs.String("reason", "", "why, for the evidence (required; at most 1024 bytes)")
	asJSON := fs.Bool("json", false, "print the decided approval as JSON")
	id, err := parseWithID(fs, args)
	if err != nil {
		return usageFail(std, decision, err)
	}
	switch {
	case strings.TrimSpace(*reason) == "":
		return usageFail(std, decision, errors.New("--reason is required: it is recorded in the evidence with your decision"))
	case len(*reason) > maxReasonBytes:
		return usageFail(std, decision, fmt.Errorf("--reason: %d bytes, at most %d", len(*reason), maxReasonBytes))
	}
	client, closeConn, ctx, err := conn.dial(ctx, std.Getenv)
	if err != nil {
		return usageFail(std, decision, err)
	}
	defer closeConn()
	resp, err := client.DecideApproval(ctx, &toolgatev1.DecideApprovalRequest{ApprovalId: id, Decision: decision, Reason: *reason})
	if err != nil {
		return rpcFail(stderr, decision, err)
	}
	a := resp.GetApproval()
	if *asJSON {
		return printJSON(stdout, stderr, a)
	}
	if decision == "approve" {
		fmt.Fprintf(stdout, "approved %s: %s for %s (request %s); it runs once when retried with the same request id, until %s\n",
			id, cell(a.GetToolId()), cell(a.GetRequester()), cell(a.GetRequestId()), expiry(&toolgatev1.Approval{ExpiresAt: a.GetExpiresAt()}, time.Now()))
	} else {
		fmt.Fprintf(stdout, "denied %s: %s for %s (request %s) ends denied\n",
			id, cell(a.GetToolId()), cell(a.GetRequester()), cell(a.GetRequestId()))
	}
	return exitOK
}
