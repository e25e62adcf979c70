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
	"time"
)

// Keys of the callers of the Agent Spaces door's servers in this file:
// agent runs batches; alice (group ops) approves; bob is nobody's approver.
const (
	spacesAgentKey = "k-spaces-agent-0123456789"
	spacesAliceKey = "k-spaces-alice-0123456789"
	spacesBobKey   = "k-spaces-bob-0123456789ab"
)

var spacesDoorAddr = regexp.MustCompile(`msg="front door serving" door=agent_spaces addr=(\S+)`)

// spacesServer runs the real binary with the Agent Spaces door on
// loopback, the door's example policy and three keys. It returns the
// door's base URL and the server folder.
func spacesServer(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
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
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := spacesDoorAddr.FindStringSubmatch(srv.log.String()); m != nil {
			return "http://" + m[1], dir
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the door's address is not in the log:\n%s", srv.log.String())
	return "", ""
}

// spacesReply is what the door answered.
type spacesReply struct {
	code   int
	Status string `json:"status"`
	Events []struct {
		Type, OperationID, Category, Message, ApprovalID string
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
	r := spacesReply{code: resp.StatusCode}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("reply %d %q: %v", resp.StatusCode, data, err)
	}
	return r
}

// spacesRecorded reports whether any evidence of run was written.
func spacesRecorded(t *testing.T, dir, runID string) bool {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, "audit", "requests", runID+"*"))
	return len(matches) > 0
}

// TestHostileAgentSpacesIDs (Agent Spaces door, class: request ids): a
// runId or turn that would leave the request id grammar, or make one
// run's ids another's, is refused before anything is recorded.
func TestHostileAgentSpacesIDs(t *testing.T) {
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
// only an approver's decision resumes a paused run.
func TestHostileAgentSpacesApprovals(t *testing.T) {
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
			if got.Status != "awaiting_approval" || got.Events[0].Type != "error" || !kept() {
				t.Fatalf("%+v; file kept %v", got, kept())
			}
		})
	}
	t.Run("the approver resumes the run", func(t *testing.T) {
		got := spacesPost(t, base, spacesAliceKey, "run_del", "", approve)
		if got.Status != "completed" || !*got.Events[0].Success || kept() {
			t.Fatalf("%+v", got)
		}
	})
}
