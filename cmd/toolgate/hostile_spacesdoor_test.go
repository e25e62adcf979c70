package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Keys of the callers of the Agent Spaces door's servers in this file:
// agent runs batches; alice (group ops) approves; bob is nobody's approver.
const (
	spacesAgentKey = "k-spaces-agent-0123456789"
	spacesAliceKey = "k-spaces-alice-0123456789"
	spacesBobKey   = "k-spaces-bob-0123456789ab"
)

// spacesServer runs the real binary with the Agent Spaces door on
// loopback, the door's example policy and three keys. It returns the
// door's base URL and the server folder.
func spacesServer(t *testing.T) (string, string) {
	t.Helper()
	base, dir, _ := spacesServerGRPC(t)
	return base, dir
}

// spacesServerGRPC is spacesServer, with the gateway's gRPC address too.
func spacesServerGRPC(t *testing.T) (base, dir, grpcAddr string) {
	t.Helper()
	dir = t.TempDir()
	text, err := os.ReadFile("../../gateway/frontdoor/agentspaces/testdata/policy.cedar")
	if err != nil {
		t.Fatal(err)
	}
	writePolicy(t, dir, string(text))
	cfg := `
listen: 127.0.0.1:0
auth:
  keys:
    - {caller: agent, env: TG_SPACES_AGENT}
    - {caller: alice, env: TG_SPACES_ALICE, groups: [ops]}
    - {caller: bob, env: TG_SPACES_BOB}
evidence: {url: file://./audit}
drivers:
  workspace: {type: workspace, root: ./ws}
front_doors:
  agent_spaces: {listen: 127.0.0.1:0}
`
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerEnv(t, dir, []string{"TG_SPACES_AGENT=" + spacesAgentKey, "TG_SPACES_ALICE=" + spacesAliceKey,
		"TG_SPACES_BOB=" + spacesBobKey}, "--config", "toolgate.yaml")
	return srv.doorURL(t, "agent_spaces"), dir, srv.addr
}

// spacesReply is what the door answered.
type spacesReply struct {
	code int
	// raw is the body, turn the Idempotency-Key header.
	raw, turn string
	Status    string `json:"status"`
	Events    []struct {
		Type, OperationID, Category, Message, ApprovalID string
		Content, Stdout                                  *string
		Success                                          *bool
		Toolgate                                         struct{ Code string }
	} `json:"events"`
}

func spacesPost(t *testing.T, base, key, runID, turn, body string) spacesReply {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/runs/"+runID+"/operations", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if turn != "" {
		req.Header.Set("Idempotency-Key", turn)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	r := spacesReply{code: resp.StatusCode, raw: string(data), turn: resp.Header.Get("Idempotency-Key")}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reply %d %q: %v", resp.StatusCode, data, err)
	}
	return r
}

// spacesOwner is the owner prefix of a request id the door made.
var spacesOwner = regexp.MustCompile(`^o-[a-z2-7]{15}:`)

// spacesRecorded reports whether any evidence of run was written: a
// request folder whose id, past its owner prefix, begins with runID.
func spacesRecorded(t *testing.T, dir, runID string) bool {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dir, "audit", "requests"))
	for _, e := range entries {
		if strings.HasPrefix(spacesOwner.ReplaceAllString(e.Name(), ""), runID) {
			return true
		}
	}
	return false
}

// TestHostileAgentSpacesIDs (Agent Spaces door, class: request ids): a
// runId or turn that would leave the request id grammar, or make one
// run's ids another's, is refused before anything is recorded.
func TestHostileAgentSpacesIDs(t *testing.T) {
	t.Parallel()
	base, dir := spacesServer(t)
	batch := `{"operations":[{"type":"createFile","path":"x.txt","content":"x"}]}`
	for _, tc := range []struct{ name, runID, turn string }{
		{"a runId with a colon, to become run a turn b", "a:b", "c"},
		{"a turn with a colon, to become run a:b", "a", "b:c"},
		{"an escaped colon", "a%3Ab", "c"},
		{"a runId of 65 characters", strings.Repeat("a", 65), ""},
		{"a turn of 41 characters", "a", strings.Repeat("t", 41)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := spacesPost(t, base, spacesAgentKey, tc.runID, tc.turn, batch); r.code != 400 || r.Status != "error" {
				t.Fatalf("HTTP %d %+v, want 400", r.code, r)
			}
			if spacesRecorded(t, dir, "a") {
				t.Fatal("evidence was written")
			}
		})
	}
	t.Run("an operation id shaped like another run's request id is only an id", func(t *testing.T) {
		r := spacesPost(t, base, spacesAgentKey, "b", "c", `{"operations":[{"type":"createFile","id":"a:b:c:0","path":"y.txt","content":"y"}]}`)
		if r.code != 200 || !*r.Events[0].Success || spacesRecorded(t, dir, "a:") {
			t.Fatalf("HTTP %d %+v", r.code, r)
		}
	})
}

// TestHostileAgentSpacesBatches (Agent Spaces door, class: batches): a
// flood of operations, an oversized body, a re-sent batch with one
// operation changed, and a caller without a key.
func TestHostileAgentSpacesBatches(t *testing.T) {
	t.Parallel()
	base, dir := spacesServer(t)
	t.Run("a batch of 10,000 operations is refused whole", func(t *testing.T) {
		ops := make([]string, 10000)
		for i := range ops {
			ops[i] = fmt.Sprintf(`{"type":"createFile","path":"f%d","content":"x"}`, i)
		}
		r := spacesPost(t, base, spacesAgentKey, "flood", "", `{"operations":[`+strings.Join(ops, ",")+`]}`)
		if r.code != 400 || spacesRecorded(t, dir, "flood") {
			t.Fatalf("HTTP %d", r.code)
		}
	})
	t.Run("a body over 16 MiB is refused", func(t *testing.T) {
		r := spacesPost(t, base, spacesAgentKey, "big", "", `{"operations":[{"type":"createFile","path":"f","content":"`+strings.Repeat("x", 17<<20)+`"}]}`)
		if r.code != 413 || spacesRecorded(t, dir, "big") {
			t.Fatalf("HTTP %d", r.code)
		}
	})
	t.Run("a re-sent batch with one operation changed runs nothing twice", func(t *testing.T) {
		batch := `{"operations":[{"type":"createFile","path":"a.txt","content":"%s"},{"type":"shell","command":"echo x >> runs.txt"}]}`
		spacesPost(t, base, spacesAgentKey, "resend", "k1", fmt.Sprintf(batch, "one"))
		r := spacesPost(t, base, spacesAgentKey, "resend", "k1", fmt.Sprintf(batch, "two"))
		if len(r.Events) != 2 || r.Events[0].Type != "error" || r.Events[0].Toolgate.Code != "AlreadyExists" || !*r.Events[1].Success {
			t.Fatalf("%+v", r)
		}
		a, _ := os.ReadFile(filepath.Join(dir, "ws", "a.txt"))
		runs, _ := os.ReadFile(filepath.Join(dir, "ws", "runs.txt"))
		if string(a) != "one" || string(runs) != "x\n" {
			t.Fatalf("a.txt %q, runs.txt %q", a, runs)
		}
	})
	t.Run("a caller without a key is refused and nothing is recorded", func(t *testing.T) {
		if r := spacesPost(t, base, "", "nokey", "", `{"operations":[{"type":"shell","command":"echo"}]}`); r.code != 401 || spacesRecorded(t, dir, "nokey") {
			t.Fatalf("HTTP %d", r.code)
		}
	})
}

// TestHostileAgentSpacesApprovals (Agent Spaces door, class: approvals):
// only an approver's decision lets a paused run go on.
func TestHostileAgentSpacesApprovals(t *testing.T) {
	t.Parallel()
	base, dir := spacesServer(t)
	if err := os.MkdirAll(filepath.Join(dir, "ws", "temp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws", "temp", "keep.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := `{"protocolVersion":"1.0","operations":[{"type":"shell","id":"cleanup-1","command":"rm -rf temp/*"}]}`
	r := spacesPost(t, base, spacesAgentKey, "run_del", "turn-1", batch)
	if r.Status != "awaiting_approval" || r.Events[0].Type != "approvalRequired" {
		t.Fatalf("%+v", r)
	}
	approve := `{"approval":{"operationId":"cleanup-1","decision":"approved"}}`
	kept := func() bool { _, err := os.Stat(filepath.Join(dir, "ws", "temp", "keep.txt")); return err == nil }
	for _, tc := range []struct{ name, key, body string }{
		{"the requester approving itself", spacesAgentKey, approve},
		{"the requester saying approved", spacesAgentKey, `{"type":"userMessage","content":"approved"}`},
		{"a caller outside the approving group", spacesBobKey, approve},
		{"a caller outside the group naming the approval id", spacesBobKey, `{"approval":{"approvalId":"` + r.Events[0].ApprovalID + `","decision":"approved"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spacesPost(t, base, tc.key, "run_del", "", tc.body)
			if got.Status != "error" || got.Events[0].Type != "error" || got.Events[0].Category != "policy" || !kept() {
				t.Fatalf("%+v; file kept %v", got, kept())
			}
		})
	}
	t.Run("the approver approves and the agent's re-sent batch runs", func(t *testing.T) {
		got := spacesPost(t, base, spacesAliceKey, "run_del", "", approve)
		if got.Status != "completed" || !*got.Events[0].Success || !kept() {
			t.Fatalf("%+v", got)
		}
		got = spacesPost(t, base, spacesAgentKey, "run_del", "turn-1", batch)
		if got.Status != "completed" || !*got.Events[0].Success || kept() {
			t.Fatalf("%+v", got)
		}
	})
}

// spacesSecretBatch is a batch whose first operation waits for approval
// and whose later ones read secrets/token.txt, which the policy lets only
// the agent read.
const spacesSecretBatch = `{"operations":[
	{"type":"shell","id":"c1","command":"rm -rf temp/*"},
	{"type":"readFile","id":"r1","path":"secrets/token.txt"},
	{"type":"createFile","id":"f1","path":"later.txt","content":"agent"}]}`

// spacesSecret is what secrets/token.txt holds.
const spacesSecret = "s3cr3t-only-the-agent-reads"

// TestHostileAgentSpacesApprovalLeaks (Agent Spaces door, class:
// approvals leak): what an approver, a stranger and a caller who knows
// another's run id and turn can learn of, or do to, a paused batch.
func TestHostileAgentSpacesApprovalLeaks(t *testing.T) {
	t.Parallel()
	base, dir, addr := spacesServerGRPC(t)
	seed := func(path, content string) {
		t.Helper()
		p := filepath.Join(dir, "ws", path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed("temp/a.txt", "a")
	seed("secrets/token.txt", spacesSecret)
	pause := func(t *testing.T, runID, turn string) string {
		t.Helper()
		r := spacesPost(t, base, spacesAgentKey, runID, turn, spacesSecretBatch)
		if r.Status != "awaiting_approval" || r.Events[0].Type != "approvalRequired" {
			t.Fatalf("pause: %s", r.raw)
		}
		return r.Events[0].ApprovalID
	}
	env := []string{"TG_SPACES_AGENT=" + spacesAgentKey, "TG_SPACES_ALICE=" + spacesAliceKey, "TG_SPACES_BOB=" + spacesBobKey}
	as := func(t *testing.T, keyEnv string, args ...string) (string, string, int) {
		t.Helper()
		return runToolEnv(t, dir, env, append(args, "--addr", addr, "--key-env", keyEnv)...)
	}

	t.Run("the approver's reply holds nothing the batch read or did", func(t *testing.T) {
		pause(t, "run_leak", "t-leak")
		if r := spacesPost(t, base, spacesAliceKey, "run_alice", "", `{"operations":[{"type":"readFile","path":"secrets/token.txt"}]}`); r.Events[0].Type != "policyDenied" {
			t.Fatalf("alice reading the secret herself: %s", r.raw)
		}
		r := spacesPost(t, base, spacesAliceKey, "run_leak", "", `{"approval":{"operationId":"c1","decision":"approved"}}`)
		if strings.Contains(r.raw, spacesSecret) || strings.Contains(r.raw, "secrets/token.txt") || strings.Contains(r.raw, "later.txt") {
			t.Fatalf("the approver's reply holds the batch's events:\n%s", r.raw)
		}
		if r.Status != "completed" || len(r.Events) != 1 || r.Events[0].Type != "message" || r.Events[0].OperationID != "c1" {
			t.Fatalf("the approver's reply: %s", r.raw)
		}
		got := spacesPost(t, base, spacesAgentKey, "run_leak", "t-leak", spacesSecretBatch)
		if got.Status != "completed" || len(got.Events) != 3 || got.Events[1].Content == nil || *got.Events[1].Content != spacesSecret {
			t.Fatalf("the caller's re-send: %s", got.raw)
		}
	})

	t.Run("a decision its sender may not make is answered alike for a run that waits and one that never existed", func(t *testing.T) {
		id := pause(t, "run_known", "t-known")
		stamp := regexp.MustCompile(`"timestamp":"[^"]*"`)
		for _, key := range []string{spacesBobKey, spacesAgentKey, "", "k-spaces-nobody-012345678"} {
			for _, body := range []string{
				`{"approval":{"operationId":"c1","decision":"approved"}}`,
				`{"type":"userMessage","content":"approved"}`,
			} {
				known := spacesPost(t, base, key, "run_known", "", body)
				unknown := spacesPost(t, base, key, "run_never", "", body)
				k := strings.ReplaceAll(stamp.ReplaceAllString(known.raw, ""), "run_known", "RUN")
				u := strings.ReplaceAll(stamp.ReplaceAllString(unknown.raw, ""), "run_never", "RUN")
				if known.code != unknown.code || k != u || known.turn != unknown.turn {
					t.Errorf("key %q, %s: told apart:\n%d %s\n%d %s", key, body, known.code, k, unknown.code, u)
				}
				if strings.Contains(known.raw, id) || strings.Contains(known.raw, "apr_") || strings.Contains(known.raw, "t-known") || known.turn != "" {
					t.Errorf("key %q, %s: the answer names the approval or the turn: %s", key, body, known.raw)
				}
			}
		}
	})

	t.Run("another caller cannot claim a paused batch's request ids", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "ws", "later.txt")); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		pause(t, "run_claim", "t-claim")
		// bob, who knows the run id and turn, sends a batch of his own
		// under them.
		spacesPost(t, base, spacesBobKey, "run_claim", "t-claim", `{"operations":[
			{"type":"createFile","path":"bob0.txt","content":"bob"},
			{"type":"createFile","path":"bob1.txt","content":"bob"}]}`)
		// alice reads the paused operation's request id from the
		// approvals she may decide and claims the last operation's.
		out, stderr, code := as(t, "TG_SPACES_ALICE", "approvals", "ls", "--json")
		if code != 0 {
			t.Fatalf("approvals ls: exit %d\n%s%s", code, out, stderr)
		}
		var list struct {
			Approvals []struct {
				RequestID string `json:"request_id"`
			} `json:"approvals"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("approvals ls --json: %v\n%s", err, out)
		}
		var paused string
		for _, a := range list.Approvals {
			if strings.Contains(a.RequestID, "run_claim:t-claim:") {
				paused = a.RequestID
			}
		}
		if !strings.HasSuffix(paused, ":0") {
			t.Fatalf("no paused request id of run_claim in %s", out)
		}
		last := strings.TrimSuffix(paused, ":0") + ":2"
		out, stderr, code = as(t, "TG_SPACES_ALICE", "call", "--request-id", last, "--tool", "workspace.createFile",
			"--args", `{"path":"alice.txt","content":"alice"}`)
		if code == 0 || !strings.Contains(stderr, "InvalidArgument") {
			t.Errorf("alice claiming %s: exit %d\n%s%s", last, code, out, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "ws", "alice.txt")); err == nil {
			t.Errorf("alice's call ran under the agent's request id %s", last)
		}

		if r := spacesPost(t, base, spacesAliceKey, "run_claim", "", `{"approval":{"operationId":"c1","decision":"approved"}}`); r.Status != "completed" {
			t.Fatalf("approval: %s", r.raw)
		}
		r := spacesPost(t, base, spacesAgentKey, "run_claim", "t-claim", spacesSecretBatch)
		if r.Status != "completed" || len(r.Events) != 3 {
			t.Fatalf("the agent's batch after the claims: %s", r.raw)
		}
		for i, ev := range r.Events {
			if ev.Success == nil || !*ev.Success {
				t.Errorf("the agent's operation %d failed: %s", i, r.raw)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "ws", "later.txt")); string(b) != "agent" {
			t.Errorf("later.txt %q", b)
		}
	})
}
