package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// fakeGateway answers the approval RPCs from a list, in-process on
// loopback, and records what it was asked.
type fakeGateway struct {
	toolgatev1.UnimplementedToolGatewayServer
	mu        sync.Mutex
	approvals []*toolgatev1.Approval
	pageSize  int   // 0: everything on one page
	err       error // returned by every approval RPC when set
	runReply  *toolgatev1.RunToolResponse
	lists     []*toolgatev1.ListApprovalsRequest
	decisions []*toolgatev1.DecideApprovalRequest
	auth      []string // the authorization header of every call
}

// setErr makes every approval RPC fail with err (nil: answer again).
func (f *fakeGateway) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeGateway) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
}

func (f *fakeGateway) ListApprovals(ctx context.Context, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(ctx)
	f.lists = append(f.lists, proto.Clone(req).(*toolgatev1.ListApprovalsRequest))
	if f.err != nil {
		return nil, f.err
	}
	var match []*toolgatev1.Approval
	for _, a := range f.approvals {
		state := cmpOr(req.GetState(), "pending")
		if (state == "all" || a.GetState() == state) &&
			(req.GetApprovalId() == "" || a.GetApprovalId() == req.GetApprovalId()) &&
			(req.GetToolId() == "" || a.GetToolId() == req.GetToolId()) &&
			(req.GetRequestId() == "" || a.GetRequestId() == req.GetRequestId()) {
			match = append(match, a)
		}
	}
	start, _ := strconv.Atoi(req.GetPageToken())
	end := len(match)
	if f.pageSize > 0 {
		end = min(end, start+f.pageSize)
	}
	if req.GetLimit() > 0 {
		end = min(end, start+int(req.GetLimit()))
	}
	resp := &toolgatev1.ListApprovalsResponse{Approvals: match[start:end]}
	if end < len(match) {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (f *fakeGateway) DecideApproval(ctx context.Context, req *toolgatev1.DecideApprovalRequest) (*toolgatev1.DecideApprovalResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(ctx)
	f.decisions = append(f.decisions, proto.Clone(req).(*toolgatev1.DecideApprovalRequest))
	if f.err != nil {
		return nil, f.err
	}
	for _, a := range f.approvals {
		if a.GetApprovalId() == req.GetApprovalId() {
			a.State = map[string]string{"approve": "approved", "deny": "denied"}[req.GetDecision()]
			a.DecidedBy, a.DecisionReason, a.DecidedAt = "bob", req.GetReason(), timestamppb.Now()
			return &toolgatev1.DecideApprovalResponse{Approval: a}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no approval "+req.GetApprovalId())
}

func (f *fakeGateway) RunTool(ctx context.Context, req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(ctx)
	return f.runReply, nil
}

// serveFake starts f on a loopback listener and returns its address.
func serveFake(t *testing.T, f *fakeGateway) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	toolgatev1.RegisterToolGatewayServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// runCLI runs the toolgate command line in-process.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, stdio{Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] }})
	return out.String(), errb.String(), code
}

const (
	aprOne   = "apr_aaaaaaaaaaaaaaaaaaaaaaaaaa"
	aprTwo   = "apr_bbbbbbbbbbbbbbbbbbbbbbbbbb"
	aprThree = "apr_cccccccccccccccccccccccccc"
)

func fakeApproval(t *testing.T, id, tool, requester, state string) *toolgatev1.Approval {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"cmd": "rm -rf build", "token": "[REDACTED:secret-key-name]"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	return &toolgatev1.Approval{
		ApprovalId: id, RequestId: "req-" + id[4:8], ToolId: tool, Requester: requester,
		RuleId: "shell_needs_ops", Reason: "runs arbitrary commands", Approvers: "ops", State: state,
		Args: args, RequestedAt: timestamppb.New(at), ExpiresAt: timestamppb.New(at.Add(24 * time.Hour)),
		RequestHash: "sha256:" + strings.Repeat("ab", 32), PolicySetDigest: "sha256:" + strings.Repeat("cd", 32),
		PolicyRef:    "policy.default",
		EvidenceRefs: []string{"requests/req-x/approval_request.json", "requests/req-x/policy_decision.json"},
	}
}

func newFake(t *testing.T) (*fakeGateway, string) {
	f := &fakeGateway{approvals: []*toolgatev1.Approval{
		fakeApproval(t, aprOne, "workspace.shell", "alice", "pending"),
		fakeApproval(t, aprTwo, "workspace.deleteFile", "carol\x1b[31m", "pending"),
		fakeApproval(t, aprThree, "workspace.shell", "alice", "consumed"),
	}}
	return f, serveFake(t, f)
}

func TestApprovalsUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	_, addr := newFake(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"approvals"}, "Usage:"},
		{"an unknown subcommand", []string{"approvals", "grant", aprOne}, `unknown command "grant"`},
		{"show without an id", []string{"approvals", "show", "--addr", addr}, "want an approval ID"},
		{"show with two ids", []string{"approvals", "show", aprOne, aprTwo, "--addr", addr}, "unexpected arguments"},
		{"show with something that is no approval id", []string{"approvals", "show", "--addr", addr, "../../etc/passwd"}, "is not an approval id"},
		{"an id with a terminal escape is quoted", []string{"approvals", "show", "--addr", addr, "apr_\x1b[2J"}, `"apr_\x1b[2J" is not an approval id`},
		{"approve without a reason", []string{"approvals", "approve", aprOne, "--addr", addr}, "--reason is required"},
		{"deny with a blank reason", []string{"approvals", "deny", aprOne, "--reason", "  ", "--addr", addr}, "--reason is required"},
		{"approve with an overlong reason", []string{"approvals", "approve", aprOne, "--reason", strings.Repeat("x", 1025), "--addr", addr}, "at most 1024"},
		{"ls with an unknown state", []string{"approvals", "ls", "--state", "open", "--addr", addr}, "--state open: want one of pending, approved"},
		{"ls with an argument", []string{"approvals", "ls", "--addr", addr, "pending"}, "unexpected arguments"},
		{"ls with a negative limit", []string{"approvals", "ls", "--limit", "-1", "--addr", addr}, "--limit"},
		{"an unknown flag", []string{"approvals", "ls", "--all", "--addr", addr}, "flag provided but not defined: -all"},
		{"an unset key variable", []string{"approvals", "ls", "--addr", addr, "--key-env", "NOPE"}, "environment variable NOPE is empty or unset"},
		{"an unreachable gateway", []string{"approvals", "ls", "--addr", "127.0.0.1:1"}, "Unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runCLI(t, nil, tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 mentioning %q", code, stderr, tc.want)
			}
			if out != "" {
				t.Errorf("a usage error printed to stdout: %q", out)
			}
		})
	}
	out, _, code := runCLI(t, nil, "approvals", "--help")
	if code != exitOK || !strings.Contains(out, "approvals approve ID --reason TEXT") || !strings.Contains(out, "Exit 0 when done, 1 when the\ngateway refused") {
		t.Fatalf("approvals --help: exit %d\n%s", code, out)
	}
	if _, stderr, _ := runCLI(t, nil); !strings.Contains(stderr, "toolgate approvals <command>") {
		t.Errorf("the top-level usage does not list approvals:\n%s", stderr)
	}
}

func TestApprovalsExitCodesFollowTheGatewaysAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code codes.Code
		exit int
		want string
	}{
		{codes.PermissionDenied, exitFailure, "PermissionDenied: approver_not_in_group"},
		{codes.FailedPrecondition, exitFailure, "FailedPrecondition: approval already denied"},
		{codes.NotFound, exitFailure, "NotFound: no approval"},
		{codes.Unauthenticated, exitError, "Unauthenticated"},
		{codes.InvalidArgument, exitError, "InvalidArgument"},
		{codes.Unavailable, exitError, "Unavailable"},
		{codes.Unimplemented, exitError, "does not support approvals yet"},
	}
	for _, tc := range tests {
		t.Run(tc.code.String(), func(t *testing.T) {
			f, addr := newFake(t)
			msg := map[codes.Code]string{
				codes.PermissionDenied: "approver_not_in_group: bob is not a member of ops", codes.FailedPrecondition: "approval already denied",
				codes.NotFound: "no approval " + aprOne,
			}[tc.code]
			f.setErr(status.Error(tc.code, cmpOr(msg, "refused\x1b[2J")))
			for _, args := range [][]string{
				{"approvals", "approve", aprOne, "--reason", "ok", "--addr", addr},
				{"approvals", "deny", aprOne, "--reason", "no", "--addr", addr},
				{"approvals", "ls", "--addr", addr},
				{"approvals", "show", aprOne, "--addr", addr},
			} {
				out, stderr, code := runCLI(t, nil, args...)
				if code != tc.exit || !strings.Contains(stderr, tc.want) {
					t.Errorf("%s: exit %d, stderr %q; want exit %d mentioning %q", args[1], code, stderr, tc.exit, tc.want)
				}
				if strings.Contains(stderr, "\x1b") || out != "" {
					t.Errorf("%s: stdout %q, stderr %q: want nothing on stdout and no raw escape", args[1], out, stderr)
				}
			}
		})
	}
}

func TestApprovalsLsPrintsATable(t *testing.T) {
	t.Parallel()
	f, addr := newFake(t)
	out, stderr, code := runCLI(t, nil, "approvals", "ls", "--addr", addr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and the two pending approvals, got:\n%s", out)
	}
	if !slices.Equal(strings.Fields(lines[0]), []string{"ID", "TOOL", "REQUESTER", "RULE", "APPROVERS", "STATE", "EXPIRES"}) {
		t.Errorf("header %q", lines[0])
	}
	row := strings.Fields(lines[1])
	if want := []string{aprOne, "workspace.shell", "alice", "shell_needs_ops", "ops", "pending", "2026-11-25T07:00:00Z"}; !slices.Equal(row[:7], want) {
		t.Errorf("row %q, want it to begin %q", lines[1], want)
	}
	if strings.Contains(out, "\x1b") || !strings.Contains(lines[2], `"carol\x1b[31m"`) {
		t.Errorf("a requester with a terminal escape is not quoted:\n%q", lines[2])
	}
	if got := f.lists[0].GetState(); got != "pending" {
		t.Errorf("state sent %q, want pending", got)
	}

	out, _, code = runCLI(t, nil, "approvals", "ls", "--state", "all", "--tool", "workspace.shell", "--addr", addr)
	if code != exitOK || strings.Count(out, "\n") != 3 || !strings.Contains(out, aprThree) || strings.Contains(out, aprTwo) {
		t.Errorf("ls --state all --tool workspace.shell: exit %d\n%s", code, out)
	}
	last := f.lists[len(f.lists)-1]
	if last.GetState() != "all" || last.GetToolId() != "workspace.shell" {
		t.Errorf("filter sent: %v", last)
	}
	if _, _, code = runCLI(t, nil, "approvals", "ls", "--request", "req-bbbb", "--addr", addr); code != exitOK || f.lists[len(f.lists)-1].GetRequestId() != "req-bbbb" {
		t.Errorf("ls --request: exit %d, sent %v", code, f.lists[len(f.lists)-1])
	}
	out, _, code = runCLI(t, nil, "approvals", "ls", "--state", "denied", "--addr", addr)
	if code != exitOK || out != "no approvals (state denied)\n" {
		t.Errorf("ls of nothing: exit %d, %q", code, out)
	}
}

func TestApprovalsLsFollowsPages(t *testing.T) {
	t.Parallel()
	f, addr := newFake(t)
	f.pageSize = 1
	out, _, code := runCLI(t, nil, "approvals", "ls", "--state", "all", "--json", "--addr", addr)
	var resp struct {
		Approvals []struct {
			ApprovalID string `json:"approval_id"`
		} `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(out), &resp); code != exitOK || err != nil {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	var ids []string
	for _, a := range resp.Approvals {
		ids = append(ids, a.ApprovalID)
	}
	if want := []string{aprOne, aprTwo, aprThree}; !slices.Equal(ids, want) || len(f.lists) != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", ids, len(f.lists), want)
	}
	out, _, code = runCLI(t, nil, "approvals", "ls", "--state", "all", "--limit", "2", "--addr", addr)
	if code != exitOK || strings.Count(out, "\n") != 3 || strings.Contains(out, aprThree) {
		t.Fatalf("ls --limit 2: exit %d\n%s", code, out)
	}
}

func TestApprovalsShowPrintsEveryField(t *testing.T) {
	t.Parallel()
	f, addr := newFake(t)
	out, stderr, code := runCLI(t, nil, "approvals", "show", aprOne, "--addr", addr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"approval_id:       " + aprOne, "state:             pending", "request_id:        req-aaaa",
		"tool_id:           workspace.shell", "requester:         alice", "rule_id:           shell_needs_ops",
		"reason:            runs arbitrary commands", "approvers:         ops",
		"requested_at:      2026-11-24T07:00:00Z", "expires_at:        2026-11-25T07:00:00Z",
		"decided_by:        -", "request_hash:      sha256:abab", "policy_set_digest: sha256:cdcd",
		"policy_ref:        policy.default",
		"evidence_refs:\n  requests/req-x/approval_request.json\n  requests/req-x/policy_decision.json\n",
		`"cmd": "rm -rf build"`, `"token": "[REDACTED:secret-key-name]"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if got := f.lists[0]; got.GetApprovalId() != aprOne || got.GetState() != "all" {
		t.Errorf("show asked %v, want approval_id %s in every state", got, aprOne)
	}

	out, _, code = runCLI(t, nil, "approvals", "show", "--json", aprThree, "--addr", addr)
	var a map[string]any
	if err := json.Unmarshal([]byte(out), &a); code != exitOK || err != nil || a["approval_id"] != aprThree || a["state"] != "consumed" || a["args"] == nil {
		t.Errorf("show --json: exit %d, %v:\n%s", code, err, out)
	}

	_, stderr, code = runCLI(t, nil, "approvals", "show", "apr_zzzzzzzzzzzzzzzzzzzzzzzzzz", "--addr", addr)
	if code != exitFailure || !strings.Contains(stderr, "no approval apr_zzzzzzzzzzzzzzzzzzzzzzzzzz") {
		t.Errorf("show of an unknown approval: exit %d, %s", code, stderr)
	}
}

func TestApprovalsApproveAndDeny(t *testing.T) {
	t.Parallel()
	f, addr := newFake(t)
	env := map[string]string{"BOB_KEY": "k-bob-0123456789"}
	out, stderr, code := runCLI(t, env, "approvals", "approve", "--key-env", "BOB_KEY", "--addr", addr, aprOne, "--reason", "checked the build folder")
	if code != exitOK || !strings.Contains(out, "approved "+aprOne+": workspace.shell for alice (request req-aaaa)") {
		t.Fatalf("approve: exit %d\n%s%s", code, out, stderr)
	}
	d := f.decisions[0]
	if d.GetApprovalId() != aprOne || d.GetDecision() != "approve" || d.GetReason() != "checked the build folder" {
		t.Errorf("sent %v", d)
	}
	if f.auth[0] != "Bearer k-bob-0123456789" {
		t.Errorf("authorization sent %q, want the approver's key", f.auth[0])
	}

	out, _, code = runCLI(t, nil, "approvals", "deny", aprTwo, "--reason", "not today", "--addr", addr, "--json")
	var a map[string]any
	if err := json.Unmarshal([]byte(out), &a); code != exitOK || err != nil || a["state"] != "denied" || a["decision_reason"] != "not today" {
		t.Fatalf("deny --json: exit %d, %v\n%s", code, err, out)
	}
	if d := f.decisions[1]; d.GetDecision() != "deny" || d.GetApprovalId() != aprTwo {
		t.Errorf("sent %v", d)
	}
	_, _, code = runCLI(t, nil, "approvals", "deny", aprThree, "--reason", "no", "--addr", addr)
	if code != exitOK || f.decisions[2].GetDecision() != "deny" {
		t.Errorf("deny: exit %d", code)
	}
}

func TestCallExitsThreeWhenTheCallAwaitsApproval(t *testing.T) {
	t.Parallel()
	f, addr := newFake(t)
	expires := time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC)
	f.runReply = &toolgatev1.RunToolResponse{
		PolicyCheck: &toolgatev1.PolicyCheck{
			Decision: "deny", RuleId: "shell_needs_ops",
			Reason: "approval required (approval " + aprOne + ", expires 2026-11-25T07:00:00Z): runs arbitrary commands",
		},
		EvidenceRefs: []string{"requests/r1/approval_request.json", "requests/r1/request.json"},
		EngineRef:    "toolgate/0.1.0@gw/workspace",
		PendingApproval: &toolgatev1.PendingApproval{
			ApprovalId: aprOne, Reason: "runs arbitrary commands", ExpiresAt: timestamppb.New(expires),
			RuleId: "shell_needs_ops", Approvers: "ops", RequestHash: "sha256:" + strings.Repeat("ab", 32),
		},
	}
	out, stderr, code := runCLI(t, nil, "call", "--addr", addr, "--request-id", "r1", "--tool", "workspace.shell", "--args", `{"cmd":"ls"}`)
	if code != exitPending {
		t.Fatalf("exit %d, want 3\n%s%s", code, out, stderr)
	}
	var reply struct {
		OK              bool `json:"ok"`
		PendingApproval struct {
			ApprovalID string    `json:"approval_id"`
			ExpiresAt  time.Time `json:"expires_at"`
			Approvers  string    `json:"approvers"`
		} `json:"pending_approval"`
	}
	if err := json.Unmarshal([]byte(out), &reply); err != nil || reply.OK || reply.PendingApproval.ApprovalID != aprOne ||
		!reply.PendingApproval.ExpiresAt.Equal(expires) || reply.PendingApproval.Approvers != "ops" {
		t.Errorf("stdout %v:\n%s", err, out)
	}
	for _, want := range []string{"not run: waiting for approval " + aprOne + " by a member of ops", "2026-11-25T07:00:00Z", "--request-id r1 again"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	f.runReply = &toolgatev1.RunToolResponse{PolicyCheck: &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "r"}, EvidenceRefs: []string{"x"}}
	if out, _, code := runCLI(t, nil, "call", "--addr", addr, "--request-id", "r2", "--tool", "workspace.shell"); code != exitFailure || strings.Contains(out, "pending_approval") {
		t.Errorf("a plain deny: exit %d\n%s", code, out)
	}
	if _, stderr, _ := runCLI(t, nil, "call", "-h"); !strings.Contains(stderr, "3 when policy holds the call for a human's approval") {
		t.Errorf("call -h does not explain exit 3:\n%s", stderr)
	}
}

func TestServeWarnsWhenApprovalsHaveNoApprovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("shell_needs_ops") @approval("ops") @reason("runs arbitrary commands")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.shell");
`)
	srv := startServer(t, dir)
	if !strings.Contains(srv.log.String(), "approvals need authenticated approvers; calls held for approval will expire") {
		t.Fatalf("no warning at start:\n%s", srv.log.String())
	}
}

func TestApprovalExpiryReadsAsTimeLeft(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		state string
		in    time.Duration
		want  string
	}{
		{"pending", 24 * time.Hour, "2026-11-25T07:00:00Z (in 24h00m)"},
		{"pending", 90*time.Minute + 20*time.Second, "2026-11-24T08:30:20Z (in 1h30m)"},
		{"pending", -time.Minute, "2026-11-24T06:59:00Z (expired)"},
		{"consumed", time.Hour, "2026-11-24T08:00:00Z"},
	}
	for _, tc := range tests {
		a := &toolgatev1.Approval{State: tc.state, ExpiresAt: timestamppb.New(now.Add(tc.in))}
		if got := expiry(a, now); got != tc.want {
			t.Errorf("%s, %v left: %q, want %q", tc.state, tc.in, got, tc.want)
		}
	}
	if got := expiry(&toolgatev1.Approval{State: "pending"}, now); got != "-" {
		t.Errorf("no expiry: %q", got)
	}
}
