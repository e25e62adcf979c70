package agentspaces

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/gateway"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// fakeGateway answers every call with run's answer.
type fakeGateway struct {
	run   func(req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error)
	calls int
}

func (f *fakeGateway) Run(_ context.Context, _ string, c gateway.Call) (*toolgatev1.RunToolResponse, error) {
	f.calls++
	return f.run(c.Request)
}

func (f *fakeGateway) DecideApprovalAs(context.Context, string, *gateway.Identity, string, string, string) (*toolgatev1.Approval, error) {
	return nil, status.Error(codes.NotFound, "no approval")
}

func (f *fakeGateway) ListApprovalsAs(context.Context, string, *gateway.Identity, *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error) {
	return &toolgatev1.ListApprovalsResponse{}, nil
}

func allowed(data map[string]any, exit int32, stdout string) *toolgatev1.RunToolResponse {
	v, _ := structpb.NewValue(data)
	return &toolgatev1.RunToolResponse{
		Ok: exit == 0, PolicyCheck: &toolgatev1.PolicyCheck{Decision: "allow", RuleId: "r"},
		ToolResult: &toolgatev1.ToolResult{ExitCode: exit, Stdout: stdout, Data: v}, EvidenceRefs: []string{"requests/x/request.json"},
	}
}

func TestEventsFromOutcomes(t *testing.T) {
	shell := operation{Type: opShell, ID: "s", Args: map[string]any{"command": "sleep 9"}}
	read := operation{Type: opReadFile, Args: map[string]any{"path": "a.txt"}}
	for _, tc := range []struct {
		name  string
		op    operation
		resp  *toolgatev1.RunToolResponse
		err   error
		check func(t *testing.T, o outcome)
	}{
		{"a read file carries its content and size", read, allowed(map[string]any{"type": "readFile", "path": "a.txt", "success": true, "size": 2.0, "encoding": "utf-8"}, 0, "hi"),
			nil, func(t *testing.T, o outcome) {
				if *o.event.Content != "hi" || *o.event.Size != 2 || o.event.Encoding != "utf-8" || o.stop {
					t.Errorf("%+v", o.event)
				}
			}},
		{"a failed read has its error and no content", read, allowed(map[string]any{"type": "readFile", "path": "a.txt", "success": false, "error": "file not found: a.txt", "category": "execution"}, 1, ""),
			nil, func(t *testing.T, o outcome) {
				if o.event.Content != nil || o.event.Error != "file not found: a.txt" || o.event.Toolgate.Category != "execution" {
					t.Errorf("%+v", o.event)
				}
			}},
		{"a timed out command says so", shell, allowed(map[string]any{"type": "shell", "command": "sleep 9", "success": false, "exitCode": 124.0, "timedOut": true, "error": "command timed out", "category": "timeout", "sandbox": "none"}, 124, ""),
			nil, func(t *testing.T, o outcome) {
				if !o.event.TimedOut || *o.event.ExitCode != 124 || o.event.Error == "" || o.event.Toolgate.Driver["sandbox"] != "none" || o.stop {
					t.Errorf("%+v", o.event)
				}
			}},
		{"a deny is policyDenied and the batch goes on", shell, &toolgatev1.RunToolResponse{PolicyCheck: &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "no_sleep", Reason: "no sleeping"}},
			nil, func(t *testing.T, o outcome) {
				if o.event.Type != eventPolicyDenied || o.event.Reason != "no sleeping (rule no_sleep)" || o.event.OperationType != opShell || o.stop {
					t.Errorf("%+v", o)
				}
			}},
		{"a held call is approvalRequired and stops the batch", shell, &toolgatev1.RunToolResponse{
			PolicyCheck:     &toolgatev1.PolicyCheck{Decision: "deny", RuleId: "needs_ops"},
			PendingApproval: &toolgatev1.PendingApproval{ApprovalId: "apr_x", RuleId: "needs_ops", Reason: "risky", ExpiresAt: timestamppb.New(time.Unix(2e9, 0))},
		}, nil, func(t *testing.T, o outcome) {
			if o.event.Type != eventApprovalRequired || o.event.ApprovalID != "apr_x" || o.event.Details["policy"] != "needs_ops" ||
				o.event.Details["command"] != "sleep 9" || !o.stop || o.status != statusAwaitingApproval || o.event.ExpiresAt == "" {
				t.Errorf("%+v", o)
			}
		}},
		{"an invalid argument is a validation event", read, nil, status.Error(codes.InvalidArgument, "args.path: bidi"),
			func(t *testing.T, o outcome) {
				if o.event.Category != categoryValidation || o.stop {
					t.Errorf("%+v", o)
				}
			}},
		{"a reused request id is a validation event", read, nil, status.Error(codes.AlreadyExists, "other content"),
			func(t *testing.T, o outcome) {
				if o.event.Category != categoryValidation || o.stop || o.event.Toolgate.Code != "AlreadyExists" {
					t.Errorf("%+v", o)
				}
			}},
		{"an unavailable store stops the batch", read, nil, status.Error(codes.Unavailable, "store down"),
			func(t *testing.T, o outcome) {
				if o.event.Category != categorySystem || !o.stop || o.status != statusError {
					t.Errorf("%+v", o)
				}
			}},
		{"a deadline stops the batch as a timeout", read, nil, status.Error(codes.DeadlineExceeded, "late"),
			func(t *testing.T, o outcome) {
				if o.event.Category != categoryTimeout || !o.stop {
					t.Errorf("%+v", o)
				}
			}},
		{"a plain error stops the batch", read, nil, errors.New("boom"),
			func(t *testing.T, o outcome) {
				if o.event.Category != categorySystem || !o.stop {
					t.Errorf("%+v", o)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			if tc.err != nil {
				tc.check(t, failureOutcome(now, tc.op, "r:t:0", tc.err))
				return
			}
			tc.check(t, callOutcome(now, tc.op, "r:t:0", tc.resp))
		})
	}
}

func TestAHaltIs503OrAborted409(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		http int
	}{{codes.Unavailable, 503}, {codes.Aborted, 409}, {codes.ResourceExhausted, 503}} {
		f := &fakeGateway{run: func(*toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
			return nil, status.Error(tc.code, "halt")
		}}
		d, _ := New(f, Options{})
		reply, code := d.Serve(context.Background(), Request{Caller: "c", RunID: "r", Body: []byte(`{"operations":[
			{"type":"readFile","path":"a"},{"type":"readFile","path":"b"}]}`)})
		if code != tc.http || reply.Status != statusError || len(reply.Events) != 1 || f.calls != 1 {
			t.Errorf("%v: HTTP %d %+v after %d calls", tc.code, code, reply, f.calls)
		}
	}
}
