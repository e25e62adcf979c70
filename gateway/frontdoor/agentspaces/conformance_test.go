package agentspaces

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The conformance tests walk every example of the Agent Spaces protocol
// specification (testdata/examples, copied from it byte for byte) through
// the door, the real front-door plumbing, a gateway with real policy and
// evidence, and the workspace driver. Fields the spec shows as
// illustrations (timestamps, durations, bytesWritten of a file whose
// content the spec mis-counts) are checked for their form.

func TestEveryOperationExampleRunsInOneBatch(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("config/settings.json", `{"theme":"dark"}`)
	e.seed("temp/scratch.txt", "scratch")
	var ops []json.RawMessage
	for _, name := range []string{"op-message", "op-createFile", "op-readFile", "op-editFile", "op-deleteFile", "op-shell"} {
		ops = append(ops, json.RawMessage(example(t, name)))
	}
	body, _ := json.Marshal(map[string]any{"protocolVersion": "1.0", "operations": ops})
	a := e.post(agentKey, "run_ops", "", string(body))

	if a.code != 200 || a.reply.Status != statusCompleted {
		t.Fatalf("reply %d %+v", a.code, a.reply)
	}
	want := []string{"message", "createFile", "readFile", "editFile", "deleteFile", "shell"}
	if got := types(a.reply.Events); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i, id := range []string{"msg-1", "file-1", "read-1", "edit-1", "del-1", "shell-1"} {
		if a.reply.Events[i].OperationID != id {
			t.Errorf("event %d operationId %q, want %q", i, a.reply.Events[i].OperationID, id)
		}
		checkTimestamp(t, a.reply.Events[i])
	}
	ev := a.reply.Events
	content := "const trips = await fetch('https://api.trains.com/schedule');\nconsole.log(trips);"
	if !*ev[1].Success || *ev[1].BytesWritten != int64(len(content)) || *ev[1].Path != "scripts/fetch-schedule.ts" {
		t.Errorf("createFile event %+v, want success and bytesWritten %d", ev[1], len(content))
	}
	if !*ev[2].Success || *ev[2].Content != `{"theme":"dark"}` {
		t.Errorf("readFile event %+v", ev[2])
	}
	if !*ev[3].Success || *ev[3].EditsApplied != 1 {
		t.Errorf("editFile event %+v", ev[3])
	}
	if !*ev[4].Success || e.read("temp/scratch.txt") != "<absent>" {
		t.Errorf("deleteFile event %+v; file %q", ev[4], e.read("temp/scratch.txt"))
	}
	// The script's fetch fails (there is no network): a failing command is
	// not a system error, so the event has no error field.
	if *ev[5].Success || *ev[5].ExitCode == 0 || ev[5].Error != "" || *ev[5].Command != "bun run scripts/fetch-schedule.ts" {
		t.Errorf("shell event %+v, want a failed command and no error", ev[5])
	}
	if !strings.Contains(e.read("scripts/fetch-schedule.ts"), "JSON.stringify(trips, null, 2)") {
		t.Errorf("the edit was not applied: %q", e.read("scripts/fetch-schedule.ts"))
	}
	if a.turn == "" || a.turn != a.reply.Toolgate.Turn || !turnPattern.MatchString(a.turn) {
		t.Errorf("fresh turn %q (reply %q) is not echoed in Idempotency-Key", a.turn, a.reply.Toolgate.Turn)
	}
}

func TestOperationsRunInOrder(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	var msg struct {
		Operations []map[string]any `json:"operations"`
	}
	if err := json.Unmarshal([]byte(example(t, "ordering")), &msg); err != nil {
		t.Fatal(err)
	}
	// The example's "..." becomes a script that writes what the third
	// operation reads.
	msg.Operations[0]["content"] = "import { writeFileSync } from 'node:fs';\nwriteFileSync('output.txt', 'written by a.ts');\n"
	body, _ := json.Marshal(msg)
	a := e.post(agentKey, "run_order", "", string(body))
	ev := a.reply.Events
	if len(ev) != 3 || !*ev[0].Success || !*ev[1].Success || !*ev[2].Success || *ev[2].Content != "written by a.ts" {
		t.Fatalf("events %+v: want the file read after the script that wrote it", ev)
	}
}

func TestOneFailedOperationDoesNotStopTheBatch(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := e.post(agentKey, "run_pf", "", example(t, "partial-failure"))
	var want struct{ Events []map[string]any }
	if err := json.Unmarshal([]byte(example(t, "partial-failure.events")), &want); err != nil {
		t.Fatal(err)
	}
	got := a.raw["events"].([]any)
	if a.reply.Status != statusCompleted || len(got) != len(want.Events) {
		t.Fatalf("reply %+v", a.reply)
	}
	for i, w := range want.Events {
		g := got[i].(map[string]any)
		for k, v := range w {
			gv := g[k]
			if k == "error" {
				if s, _ := gv.(string); !strings.Contains(strings.ToLower(s), "not found") {
					t.Errorf("event %d error %q, want a not-found message", i, s)
				}
				continue
			}
			if gv != v {
				t.Errorf("event %d %s = %v, want %v", i, k, gv, v)
			}
		}
	}
}

func TestExampleOneSimpleScript(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := e.post(agentKey, "run_abc123", "", example(t, "example1-usermessage"))
	if len(a.reply.Events) != 1 || a.reply.Events[0].Type != eventError || a.reply.Events[0].Category != categoryValidation {
		t.Fatalf("a user message that is no decision: %+v, want one validation error event", a.reply)
	}
	if ids := e.requests(); len(ids) != 0 {
		t.Fatalf("a user message recorded %v", ids)
	}

	a = e.post(agentKey, "run_abc123", "", example(t, "example1-operations"))
	if a.code != 200 || a.reply.RunID != "run_abc123" || a.reply.Status != statusCompleted {
		t.Fatalf("reply %d %+v", a.code, a.reply)
	}
	if got := types(a.reply.Events); !slices.Equal(got, []string{"message", "createFile", "shell"}) {
		t.Fatalf("events %v", got)
	}
	ev := a.reply.Events
	if ev[0].OperationID != "" || !*ev[0].Success {
		t.Errorf("message event %+v", ev[0])
	}
	if *ev[1].BytesWritten != int64(len("console.log(new Date().toISOString());")) {
		t.Errorf("bytesWritten %d", *ev[1].BytesWritten)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT[\d:.]+Z\n$`).MatchString(*ev[2].Stdout) || *ev[2].ExitCode != 0 ||
		*ev[2].Stderr != "" || ev[2].DurationMs == nil || !*ev[2].Success {
		t.Errorf("shell event %+v", ev[2])
	}
	for _, k := range []string{"exitCode", "stdout", "stderr", "durationMs", "command", "success", "timestamp"} {
		if _, ok := a.raw["events"].([]any)[2].(map[string]any)[k]; !ok {
			t.Errorf("shell event lacks %s", k)
		}
	}
}

func TestExampleTwoTrainSchedule(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	var rules struct{ Events []map[string]any }
	if err := json.Unmarshal([]byte(example(t, "example2-usermessage")), &rules); err != nil {
		t.Fatal(err)
	}
	e.seed("rules.txt", rules.Events[1]["content"].(string))
	for _, f := range []string{"package.json", "index.js"} {
		b, err := os.ReadFile(filepath.Join("testdata/sdk", f))
		if err != nil {
			t.Fatal(err)
		}
		e.seed("node_modules/@company/sdk/"+f, string(b))
	}
	a := e.post(agentKey, "run_xyz789", "", `{"protocolVersion":"1.0","operations":[{"type":"readFile","path":"rules.txt"}]}`)
	if *a.reply.Events[0].Content != rules.Events[1]["content"] {
		t.Errorf("rules.txt read back as %q", *a.reply.Events[0].Content)
	}
	a = e.post(agentKey, "run_xyz789", "", example(t, "example2-operations"))
	ev := a.reply.Events
	if a.reply.Status != statusCompleted || len(ev) != 3 || *ev[2].Stdout != "Reminder created\n" || *ev[2].ExitCode != 0 {
		t.Fatalf("reply %+v", a.reply)
	}
	var ops struct{ Operations []map[string]any }
	_ = json.Unmarshal([]byte(example(t, "example2-operations")), &ops)
	if *ev[1].BytesWritten != int64(len(ops.Operations[1]["content"].(string))) {
		t.Errorf("bytesWritten %d", *ev[1].BytesWritten)
	}
	if got := e.read("notes.txt"); got != "Train at 8:00 - Boston\n" {
		t.Errorf("notes.txt %q", got)
	}
	a = e.post(agentKey, "run_xyz789", "", example(t, "example2-final"))
	if len(a.reply.Events) != 1 || a.reply.Events[0].Type != opMessage || !*a.reply.Events[0].Success {
		t.Errorf("final message: %+v", a.reply)
	}
}

var approvalIDPattern = regexp.MustCompile(`^apr_[a-z2-7]{26}$`)

// pauseExampleThree sends Example 3 as agent under turn and checks the
// paused reply.
func pauseExampleThree(t *testing.T, e *testEnv, runID, turn string) Event {
	t.Helper()
	a := e.post(agentKey, runID, turn, example(t, "example3-operations"))
	if a.code != 200 || a.reply.Status != statusAwaitingApproval {
		t.Fatalf("reply %d %+v, want awaiting_approval", a.code, a.reply)
	}
	if got := types(a.reply.Events); !slices.Equal(got, []string{"message", "approvalRequired"}) {
		t.Fatalf("events %v", got)
	}
	ev := a.reply.Events[1]
	if ev.OperationID != "cleanup-1" || ev.OperationType != "shell" || ev.Reason != "Destructive command requires approval" ||
		ev.Details["command"] != "rm -rf temp/*" || ev.Details["policy"] != "destructive_commands_approval" ||
		!approvalIDPattern.MatchString(ev.ApprovalID) {
		t.Fatalf("approvalRequired event %+v", ev)
	}
	if e.calls("shell") != 0 || e.read("temp/a.txt") != "a" {
		t.Fatal("the held command ran before approval")
	}
	return ev
}

func TestExampleThreeApprovalEndToEnd(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	e.seed("temp/a.txt", "a")
	pauseExampleThree(t, e, "run_del456", "turn-1")

	// alice approves: she is told her decision, not the batch's events.
	a := e.post(aliceKey, "run_del456", "", example(t, "example3-approval"))
	if a.code != 200 || a.reply.Status != statusCompleted || len(a.reply.Events) != 1 || a.turn != "" {
		t.Fatalf("approval %d %+v", a.code, a.reply)
	}
	if ev := a.reply.Events[0]; ev.Type != opMessage || ev.OperationID != "cleanup-1" || !*ev.Success || !approvalIDPattern.MatchString(ev.ApprovalID) {
		t.Fatalf("the approver's event %+v", ev)
	}
	if e.calls("shell") != 0 {
		t.Fatal("the approval ran the caller's batch on the approver's request")
	}

	// The agent re-sends its batch under its turn: the message is
	// replayed, and the approved command runs, once, with the spec's
	// resumed event.
	a = e.post(agentKey, "run_del456", "turn-1", example(t, "example3-operations"))
	if a.reply.Status != statusCompleted || len(a.reply.Events) != 2 || a.turn != "turn-1" {
		t.Fatalf("re-sent batch %+v", a.reply)
	}
	ev := a.reply.Events[1]
	if ev.Type != "shell" || ev.OperationID != "cleanup-1" || *ev.Command != "rm -rf temp/*" || !*ev.Success ||
		*ev.ExitCode != 0 || *ev.Stdout != "" || *ev.Stderr != "" || ev.DurationMs == nil {
		t.Fatalf("resumed event %+v", ev)
	}
	if e.read("temp/a.txt") != "<absent>" || e.calls("shell") != 1 {
		t.Fatalf("after approval: temp/a.txt %q, shell calls %d", e.read("temp/a.txt"), e.calls("shell"))
	}
	rid := requestID("agent", "run_del456", "turn-1", 1)
	if appr := e.artifact(rid, "approval.json"); appr["approver"] != "alice" {
		t.Errorf("approval.json %v", appr)
	}
	if req := e.artifact(rid, "request.json"); req["front_door"] != Name || req["caller"] != "agent" {
		t.Errorf("request.json %v: want the agent's call through the door", req)
	}

	// Re-sending it again replays it: the command ran once.
	a = e.post(agentKey, "run_del456", "turn-1", example(t, "example3-operations"))
	if a.reply.Status != statusCompleted || len(a.reply.Events) != 2 || !*a.reply.Events[1].Success {
		t.Fatalf("re-sent batch %+v", a.reply)
	}
	if e.calls("shell") != 1 {
		t.Fatalf("the approved command ran %d times", e.calls("shell"))
	}
}
