package agentspaces

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/gateway"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

func TestApprovalByUserMessage(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	pauseExampleThree(t, e, "run_um", "turn-1")
	a := e.post(aliceKey, "run_um", "", example(t, "approval-usermessage"))
	if a.reply.Status != statusCompleted || len(a.reply.Events) != 1 || !*a.reply.Events[0].Success {
		t.Fatalf("reply %+v", a.reply)
	}
	if a = e.post(agentKey, "run_um", "turn-1", example(t, "example3-operations")); a.reply.Status != statusCompleted {
		t.Fatalf("re-sent batch %+v", a.reply)
	}
	if e.read("temp/a.txt") != "<absent>" {
		t.Fatal("the approved command did not run")
	}
}

func TestStructuredApprovalWithReason(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	// The spec's paused example: a createFile, then shell-1.
	a := e.post(agentKey, "run_af", "t1", `{"protocolVersion":"1.0","operations":[
		{"type":"createFile","path":"x.txt","content":"x"},
		{"type":"shell","id":"shell-1","command":"rm -rf temp/"}]}`)
	if a.reply.Status != statusAwaitingApproval || len(a.reply.Events) != 2 || a.reply.Events[1].OperationID != "shell-1" {
		t.Fatalf("reply %+v", a.reply)
	}
	a = e.post(aliceKey, "run_af", "", example(t, "approval-structured"))
	if a.reply.Status != statusCompleted || len(a.reply.Events) != 1 || !*a.reply.Events[0].Success {
		t.Fatalf("resume %+v", a.reply)
	}
	a = e.post(agentKey, "run_af", "t1", `{"protocolVersion":"1.0","operations":[
		{"type":"createFile","path":"x.txt","content":"x"},
		{"type":"shell","id":"shell-1","command":"rm -rf temp/"}]}`)
	if a.reply.Status != statusCompleted || len(a.reply.Events) != 2 || !*a.reply.Events[1].Success || e.read("temp/a.txt") != "<absent>" {
		t.Fatalf("re-sent batch %+v", a.reply)
	}
	list, err := e.gw.ListApprovalsAs(context.Background(), "alice", nil, &toolgatev1.ListApprovalsRequest{State: "all"})
	if err != nil || len(list.GetApprovals()) != 1 {
		t.Fatalf("approvals %v %v", list, err)
	}
	if ap := list.GetApprovals()[0]; ap.GetDecisionReason() != "User approved file cleanup" || ap.GetDecidedBy() != "alice" {
		t.Errorf("approval %+v: want alice's reason recorded", ap)
	}
}

func TestDeniedApprovalIsPolicyDeniedAndTheBatchGoesOn(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	batch := `{"operations":[
		{"type":"shell","id":"c1","command":"rm -rf temp/*"},
		{"type":"createFile","id":"after","path":"after.txt","content":"after"}]}`
	a := e.post(agentKey, "run_deny", "t1", batch)
	if a.reply.Status != statusAwaitingApproval {
		t.Fatalf("reply %+v", a.reply)
	}
	a = e.post(aliceKey, "run_deny", "", `{"approval":{"operationId":"c1","decision":"denied","reason":"not today"}}`)
	if got := types(a.reply.Events); a.reply.Status != statusCompleted || len(got) != 1 || got[0] != opMessage {
		t.Fatalf("decision %+v", a.reply)
	}
	a = e.post(agentKey, "run_deny", "t1", batch)
	if got := types(a.reply.Events); a.reply.Status != statusCompleted || len(got) != 2 || got[0] != eventPolicyDenied || got[1] != "createFile" {
		t.Fatalf("re-sent batch %+v", a.reply)
	}
	if ev := a.reply.Events[0]; ev.OperationID != "c1" || ev.OperationType != "shell" || !strings.Contains(ev.Reason, "not today") {
		t.Errorf("policyDenied event %+v: want the approver's reason", ev)
	}
	if e.read("temp/a.txt") != "a" || e.read("after.txt") != "after" || e.calls("shell") != 0 {
		t.Error("a denied command ran, or the batch did not go on")
	}
}

// Attack: the requester, or a caller outside the approving group, tries to
// resume a paused run. The decision is refused as a policy error event,
// the run stays paused, and nothing runs.
func TestOnlyAnApproverCanResumeARun(t *testing.T) {
	for _, tc := range []struct {
		name, key, body string
	}{
		{"the requester approving itself with the structured form", agentKey, `{"approval":{"operationId":"cleanup-1","decision":"approved"}}`},
		{"the requester approving itself with a user message", agentKey, `{"type":"userMessage","content":"approved"}`},
		{"a caller outside the group", bobKey, `{"approval":{"operationId":"cleanup-1","decision":"approved"}}`},
		{"a caller outside the group naming the approval", bobKey, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, envOptions{})
			e.seed("temp/a.txt", "a")
			ev := pauseExampleThree(t, e, "run_self", "turn-1")
			body := tc.body
			if body == "" {
				body = `{"approval":{"approvalId":"` + ev.ApprovalID + `","decision":"approved"}}`
			}
			a := e.post(tc.key, "run_self", "", body)
			if a.reply.Status != statusError || len(a.reply.Events) != 1 || a.reply.Events[0].Type != eventError ||
				a.reply.Events[0].Category != categoryPolicy {
				t.Fatalf("reply %+v, want the refusal", a.reply)
			}
			if e.read("temp/a.txt") != "a" || e.calls("shell") != 0 {
				t.Fatal("the held command ran")
			}
			// The real approver still can.
			a = e.post(aliceKey, "run_self", "", example(t, "example3-approval"))
			if a.reply.Status != statusCompleted {
				t.Fatalf("alice's approval after the refused one: %+v", a.reply)
			}
			if a = e.post(agentKey, "run_self", "turn-1", example(t, "example3-operations")); a.reply.Status != statusCompleted || e.read("temp/a.txt") != "<absent>" {
				t.Fatalf("the re-sent batch after alice's approval: %+v", a.reply)
			}
		})
	}
}

// An instance that no longer holds the batch (a restart, another replica)
// answers an approver as the one that held it would: the decision is
// recorded, and the batch's caller re-sends it under its turn.
func TestAnApprovalAfterARestartIsAnsweredAlike(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	pauseExampleThree(t, e, "run_restart", "turn-9")
	door, err := New(e.gw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	reply, code := door.Serve(context.Background(), Request{Caller: "alice", RunID: "run_restart", Body: []byte(example(t, "example3-approval"))})
	if code != 200 || reply.Status != statusCompleted || len(reply.Events) != 1 || reply.Events[0].Type != opMessage || reply.Toolgate.Turn != "" {
		t.Fatalf("reply %d %+v", code, reply)
	}
	if e.calls("shell") != 0 {
		t.Fatal("the command ran without its batch")
	}
	reply, _ = door.Serve(context.Background(), Request{Caller: "agent", RunID: "run_restart", Turn: "turn-9", Body: []byte(example(t, "example3-operations"))})
	if reply.Status != statusCompleted || len(reply.Events) != 2 || !*reply.Events[1].Success || e.calls("shell") != 1 {
		t.Fatalf("re-sent batch %+v (shell calls %d)", reply, e.calls("shell"))
	}
}

// selfApprovalPolicy is the test policy with the agent allowed to approve
// its own held commands.
func selfApprovalPolicy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/policy.cedar")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + `
@id("agent_approves_itself")
@self_approval("allowed")
permit (principal == Caller::"agent", action == Action::"Approve", resource == Tool::"workspace.shell");
`
}

// A caller whom policy lets approve its own calls resumes its batch as
// the protocol has it: the reply carries the resumed events, which are its
// own. After a restart it is told to re-send the batch under its turn.
func TestACallerApprovingItsOwnBatchResumesIt(t *testing.T) {
	e := newTestEnv(t, envOptions{policy: selfApprovalPolicy(t)})
	e.seed("temp/a.txt", "a")
	e.seed("secrets/token.txt", "mine")
	// The agent, signed in with a token that makes it one of ops.
	serve := func(door *Door, runID, turn, body string) (Reply, int) {
		return door.Serve(context.Background(), Request{Caller: "agent", Identity: &gateway.Identity{Method: "oauth", Groups: []string{"ops"}},
			RunID: runID, Turn: turn, Body: []byte(body)})
	}
	reply, _ := serve(e.door, "run_own", "turn-1", `{"operations":[
		{"type":"shell","id":"cleanup-1","command":"rm -rf temp/*"},
		{"type":"readFile","id":"r1","path":"secrets/token.txt"}]}`)
	if reply.Status != statusAwaitingApproval {
		t.Fatalf("pause %+v", reply)
	}
	reply, _ = serve(e.door, "run_own", "", example(t, "example3-approval"))
	if got := types(reply.Events); reply.Status != statusCompleted || !slices.Equal(got, []string{opShell, opReadFile}) ||
		*reply.Events[1].Content != "mine" || reply.Toolgate.Turn != "turn-1" {
		t.Fatalf("resume %+v", reply)
	}

	e.seed("temp/a.txt", "a")
	if reply, _ = serve(e.door, "run_own_restart", "turn-9", example(t, "example3-operations")); reply.Status != statusAwaitingApproval {
		t.Fatalf("pause %+v", reply)
	}
	door, err := New(e.gw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	reply, code := serve(door, "run_own_restart", "", example(t, "example3-approval"))
	if code != 200 || reply.Status != statusError || len(reply.Events) != 1 || reply.Events[0].Category != categorySystem ||
		!strings.Contains(reply.Events[0].Message, "re-send it with Idempotency-Key turn-9") || reply.Toolgate.Turn != "turn-9" {
		t.Fatalf("reply %d %+v", code, reply)
	}
}

func TestAResumeForAnotherRunIsRefused(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	ev := pauseExampleThree(t, e, "run_one", "turn-1")
	a := e.post(aliceKey, "run_two", "", `{"approval":{"approvalId":"`+ev.ApprovalID+`","decision":"approved"}}`)
	if a.reply.Status != statusError || a.reply.Events[0].Category != categoryPolicy || e.calls("shell") != 0 {
		t.Fatalf("reply %+v: run_two's endpoint decided run_one's approval", a.reply)
	}
}
