package agentspaces

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// agentSecret is a file only the agent may read (rule agent_only_secrets).
const agentSecret = "s3cr3t-only-the-agent-reads"

// pauseSecretBatch pauses, as agent, a batch whose first operation waits
// for approval and whose later ones read secrets/token.txt, which policy
// lets only the agent read.
func pauseSecretBatch(t *testing.T, e *testEnv, runID, turn string) answer {
	t.Helper()
	e.seed("temp/a.txt", "a")
	e.seed("secrets/token.txt", agentSecret)
	a := e.post(agentKey, runID, turn, `{"operations":[
		{"type":"shell","id":"c1","command":"rm -rf temp/*"},
		{"type":"readFile","id":"r1","path":"secrets/token.txt"},
		{"type":"shell","id":"s1","command":"cat secrets/token.txt"}]}`)
	if a.reply.Status != statusAwaitingApproval {
		t.Fatalf("pause: %+v", a.reply)
	}
	return a
}

// Attack: an approver who may not read a file resumes a batch whose later
// operations read it. The approver's reply holds the decision and nothing
// the batch produced; the batch's caller reads the events by re-sending
// the batch under its turn, with its own key.
func TestAnApproverLearnsNothingOfTheBatchTheyResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, opID, want string }{
		{"a structured approval", `{"approval":{"operationId":"c1","decision":"approved"}}`, "c1", "shell"},
		{"a user message", `{"type":"userMessage","content":"approved"}`, "", "shell"},
		{"a denial", `{"approval":{"operationId":"c1","decision":"denied","reason":"no"}}`, "c1", eventPolicyDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t, envOptions{})
			pauseSecretBatch(t, e, "run_leak", "t1")
			// Policy forbids alice the file.
			if own := e.post(aliceKey, "run_alice", "", `{"operations":[{"type":"readFile","path":"secrets/token.txt"}]}`); own.reply.Events[0].Type != eventPolicyDenied {
				t.Fatalf("alice reading the secret herself: %+v", own.reply)
			}

			a := e.post(aliceKey, "run_leak", "", tc.body)
			raw := string(mustJSON(t, a.raw))
			if strings.Contains(raw, agentSecret) || strings.Contains(raw, "secrets/token.txt") {
				t.Fatalf("the approver's reply holds what the batch read or did:\n%s", raw)
			}
			if len(a.reply.Events) != 1 || a.reply.Events[0].Type != opMessage || a.reply.Events[0].OperationID != tc.opID ||
				!approvalIDPattern.MatchString(a.reply.Events[0].ApprovalID) || a.reply.Status != statusCompleted {
				t.Fatalf("the approver's reply %s: want one message event acknowledging the decision", raw)
			}

			// The batch's caller re-sends it and reads its events.
			r := e.post(agentKey, "run_leak", "t1", `{"operations":[
				{"type":"shell","id":"c1","command":"rm -rf temp/*"},
				{"type":"readFile","id":"r1","path":"secrets/token.txt"},
				{"type":"shell","id":"s1","command":"cat secrets/token.txt"}]}`)
			if got := types(r.reply.Events); !slices.Equal(got, []string{tc.want, opReadFile, opShell}) || r.reply.Status != statusCompleted {
				t.Fatalf("the caller's re-send: %+v", r.reply)
			}
			if ev := r.reply.Events[1]; ev.Content == nil || *ev.Content != agentSecret || *r.reply.Events[2].Stdout != agentSecret {
				t.Fatalf("the caller does not read its batch's events: %+v", r.reply.Events)
			}
			if e.calls("readFile") != 1 {
				t.Errorf("readFile ran %d times, want once", e.calls("readFile"))
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// normalised is a reply's raw JSON with the run id and timestamps masked,
// so that replies about two runs can be compared.
func normalised(t *testing.T, a answer, runID string) string {
	t.Helper()
	raw := string(mustJSON(t, a.raw))
	raw = regexp.MustCompile(`"timestamp":"[^"]*"`).ReplaceAllString(raw, `"timestamp":"T"`)
	return strings.ReplaceAll(raw, runID, "RUN")
}

// Attack: a caller who may not decide a run's approval (a stranger, the
// requester itself, a caller without a key) sends decisions to a run that
// waits and to one that never existed. The answers are the same and name
// no approval, no turn, no request id.
func TestADecisionTheSenderMayNotMakeRevealsNothing(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envOptions{})
	paused := pauseSecretBatch(t, e, "run_known", "turn-secret")
	approvalID := paused.reply.Events[0].ApprovalID
	for _, key := range []struct{ name, key string }{
		{"bob, nobody's approver", bobKey},
		{"the requester", agentKey},
		{"no key", ""},
		{"an unknown key", "unknown-key-0123456789abcd"},
	} {
		for _, body := range []struct{ name, known, unknown string }{
			{"structured, by operation id", `{"approval":{"operationId":"c1","decision":"approved"}}`, ""},
			{"structured, denied", `{"approval":{"operationId":"c1","decision":"denied","reason":"x"}}`, ""},
			{"a user message", `{"type":"userMessage","content":"approved"}`, ""},
			{"naming the approval id", `{"approval":{"approvalId":"` + approvalID + `","decision":"approved"}}`,
				`{"approval":{"approvalId":"apr_aaaaaaaaaaaaaaaaaaaaaaaaaa","decision":"approved"}}`},
		} {
			t.Run(key.name+", "+body.name, func(t *testing.T) {
				unknownBody := body.unknown
				if unknownBody == "" {
					unknownBody = body.known
				}
				known := e.post(key.key, "run_known", "", body.known)
				unknown := e.post(key.key, "run_never", "", unknownBody)
				k, u := normalised(t, known, "run_known"), normalised(t, unknown, "run_never")
				k = strings.ReplaceAll(k, approvalID, "APR")
				u = strings.ReplaceAll(u, "apr_aaaaaaaaaaaaaaaaaaaaaaaaaa", "APR")
				if known.code != unknown.code || k != u || known.turn != unknown.turn {
					t.Fatalf("a run that waits and one that never existed are told apart:\n%d %q %s\n%d %q %s",
						known.code, known.turn, k, unknown.code, unknown.turn, u)
				}
				if strings.Contains(k, "APR") || strings.Contains(k, "apr_") || strings.Contains(k, "turn-secret") || known.turn != "" {
					t.Fatalf("the answer names the approval or the turn: %s", k)
				}
			})
		}
	}
	if e.calls("shell") != 0 || e.read("temp/a.txt") != "a" {
		t.Fatal("the held command ran")
	}
	if a := e.post(aliceKey, "run_known", "", `{"approval":{"operationId":"c1","decision":"approved"}}`); a.reply.Status != statusCompleted {
		t.Fatalf("the approver after the refused decisions: %+v", a.reply)
	}
}

// Attack: a caller who knows another caller's run id and turn sends a
// batch of its own under them while the other's batch waits for approval,
// and an approver who read the paused operation's request id claims the
// next operation's id with a RunTool call of their own. Neither touches
// the other's ids, and the paused batch runs to its end once approved.
func TestAnotherCallerCannotClaimAPausedBatchsRequestIDs(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	batch := `{"operations":[
		{"type":"shell","id":"c1","command":"rm -rf temp/*"},
		{"type":"createFile","id":"f1","path":"later.txt","content":"agent"},
		{"type":"createFile","id":"f2","path":"last.txt","content":"agent"}]}`
	if a := e.post(agentKey, "run_claim", "t1", batch); a.reply.Status != statusAwaitingApproval {
		t.Fatalf("pause: %+v", a.reply)
	}

	// bob, under the agent's run and turn.
	e.post(bobKey, "run_claim", "t1", `{"operations":[
		{"type":"createFile","path":"bob0.txt","content":"bob"},
		{"type":"createFile","path":"bob1.txt","content":"bob"}]}`)

	// alice, with the next operation's id derived from what approvals
	// show her.
	list, err := e.gw.ListApprovalsAs(context.Background(), "alice", nil, &toolgatev1.ListApprovalsRequest{State: "pending"})
	if err != nil || len(list.GetApprovals()) != 1 {
		t.Fatalf("approvals %v %v", list, err)
	}
	paused := list.GetApprovals()[0].GetRequestId()
	if !strings.HasSuffix(paused, ":0") {
		t.Fatalf("request id %q", paused)
	}
	next := strings.TrimSuffix(paused, ":0") + ":2"
	args, _ := structpb.NewStruct(map[string]any{"path": "alice.txt", "content": "alice"})
	_, err = e.gw.Run(context.Background(), "alice", gateway.Call{Request: &toolgatev1.RunToolRequest{
		RequestId: next, ToolId: "workspace.createFile", Args: args}})
	if err == nil || status.Code(err) != codes.InvalidArgument {
		t.Errorf("alice claiming %s: %v, want INVALID_ARGUMENT", next, err)
	}
	if slices.Contains(e.requests(), next) && e.read("alice.txt") != "<absent>" {
		t.Errorf("alice's call ran under the agent's request id %s", next)
	}

	if a := e.post(aliceKey, "run_claim", "", `{"approval":{"operationId":"c1","decision":"approved"}}`); a.reply.Status != statusCompleted {
		t.Fatalf("approval: %+v", a.reply)
	}
	r := e.post(agentKey, "run_claim", "t1", batch)
	for i, ev := range r.reply.Events {
		if ev.Success == nil || !*ev.Success {
			t.Errorf("the agent's operation %d failed: %+v", i, ev)
		}
	}
	if r.reply.Status != statusCompleted || len(r.reply.Events) != 3 || e.read("later.txt") != "agent" || e.read("last.txt") != "agent" {
		t.Fatalf("the agent's batch after the claims: %+v; later.txt %q, last.txt %q", r.reply, e.read("later.txt"), e.read("last.txt"))
	}
}
