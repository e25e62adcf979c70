package agentspaces

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestResendIsIdempotent(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	first := e.post(agentKey, "run_idem", "k1", example(t, "example1-operations"))
	again := e.post(agentKey, "run_idem", "k1", example(t, "example1-operations"))
	if first.reply.Status != statusCompleted || again.reply.Status != statusCompleted || len(again.reply.Events) != 3 {
		t.Fatalf("first %+v, again %+v", first.reply, again.reply)
	}
	for i := range first.reply.Events {
		f, g := first.reply.Events[i], again.reply.Events[i]
		f.Timestamp, g.Timestamp = "", ""
		fj, _ := json.Marshal(f)
		gj, _ := json.Marshal(g)
		if string(fj) != string(gj) {
			t.Errorf("event %d differs on re-send:\n%s\n%s", i, fj, gj)
		}
	}
	if e.calls("createFile") != 1 || e.calls("shell") != 1 {
		t.Errorf("driver ran createFile %d and shell %d times, want once each", e.calls("createFile"), e.calls("shell"))
	}
	if n := len(e.requests()); n != 2 {
		t.Errorf("%d requests recorded, want 2 (the message is not a call)", n)
	}
}

// Attack: a batch re-sent under its turn with one operation changed. The
// changed operation's request id is taken by the original: it becomes an
// error event, the others are replayed, and nothing runs twice.
func TestResentBatchWithAChangedOperationRunsNothingTwice(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	batch := `{"operations":[{"type":"createFile","path":"a.txt","content":"%s"},{"type":"shell","command":"echo x >> runs.txt"}]}`
	e.post(agentKey, "run_change", "k1", fmt.Sprintf(batch, "one"))
	a := e.post(agentKey, "run_change", "k1", fmt.Sprintf(batch, "two"))
	ev := a.reply.Events
	if len(ev) != 2 || ev[0].Type != eventError || ev[0].Category != categoryValidation || ev[0].Toolgate.Code != "AlreadyExists" {
		t.Fatalf("events %+v: want the changed operation refused", ev)
	}
	if ev[1].Type != "shell" || !*ev[1].Success {
		t.Fatalf("the unchanged operation: %+v", ev[1])
	}
	if e.read("a.txt") != "one" || e.read("runs.txt") != "x\n" || e.calls("createFile") != 1 || e.calls("shell") != 1 {
		t.Fatalf("a.txt %q, runs.txt %q: something ran twice", e.read("a.txt"), e.read("runs.txt"))
	}
}

// Attack: a runId or turn that would escape the request id grammar, or
// make one run's ids another's ("a" turn "b:c" and run "a:b" turn "c"
// would both give "a:b:c:0"). Each is refused before anything is recorded.
func TestRunIDsAndTurnsCannotEscapeTheRequestIDGrammar(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	batch := `{"operations":[{"type":"createFile","path":"x.txt","content":"x"}]}`
	for _, tc := range []struct{ name, runID, turn string }{
		{"a runId with a colon", "a:b", "c"},
		{"a turn with a colon", "a", "b:c"},
		{"a runId with an escaped colon", "a%3Ab", "c"},
		{"a runId with a percent", "a%25b", ""},
		{"a runId with a dot first", ".hidden", ""},
		{"a runId of 65 characters", strings.Repeat("r", 65), ""},
		{"a turn of 41 characters", "run", strings.Repeat("t", 41)},
		{"a turn with a slash", "run", "a/b"},
		{"a turn with a space", "run", "a b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.post(agentKey, tc.runID, tc.turn, batch)
			if a.code != 400 && a.code != 404 {
				t.Fatalf("HTTP %d %+v, want 400", a.code, a.reply)
			}
		})
	}
	if ids := e.requests(); len(ids) != 0 || e.calls("createFile") != 0 {
		t.Fatalf("recorded %v", ids)
	}
	// An operation id shaped like another run's request id changes
	// nothing: operation ids are never request ids.
	e.post(agentKey, "b", "c", `{"operations":[{"type":"createFile","id":"a:b:c:0","path":"y.txt","content":"y"}]}`)
	a := e.post(agentKey, "a", "b", `{"operations":[{"type":"createFile","id":"b:c:0","path":"z.txt","content":"z"}]}`)
	if !*a.reply.Events[0].Success || a.reply.Events[0].Toolgate.RequestID != requestID("agent", "a", "b", 0) {
		t.Fatalf("event %+v", a.reply.Events[0])
	}
}

// Attack: a batch of 10,000 operations. It is refused whole before any
// operation runs or is recorded.
func TestAHugeBatchIsRefusedWhole(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	ops := make([]string, 10000)
	for i := range ops {
		ops[i] = fmt.Sprintf(`{"type":"createFile","path":"f%d.txt","content":"x"}`, i)
	}
	a := e.post(agentKey, "run_huge", "", `{"operations":[`+strings.Join(ops, ",")+`]}`)
	if a.code != 400 || a.reply.Status != statusError || !strings.Contains(a.reply.Events[0].Message, "at most 256") {
		t.Fatalf("HTTP %d %+v", a.code, a.reply)
	}
	if ids := e.requests(); len(ids) != 0 || e.calls("createFile") != 0 {
		t.Fatalf("recorded %d requests", len(ids))
	}
}

func TestABodyOverTheCapIs413(t *testing.T) {
	e := newTestEnv(t, envOptions{door: Options{MaxBodyBytes: 1 << 10}})
	a := e.post(agentKey, "run_big", "", `{"operations":[{"type":"createFile","path":"f","content":"`+strings.Repeat("x", 2<<10)+`"}]}`)
	if a.code != 413 || e.calls("createFile") != 0 {
		t.Fatalf("HTTP %d", a.code)
	}
}

func TestAMissingOrUnknownKeyIs401(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	for _, key := range []string{"", "not-a-key-0123456789abcdef"} {
		a := e.post(key, "run_auth", "", example(t, "example1-operations"))
		if a.code != 401 || a.reply.Status != statusError {
			t.Fatalf("key %q: HTTP %d %+v", key, a.code, a.reply)
		}
	}
	if ids := e.requests(); len(ids) != 0 {
		t.Fatalf("recorded %v", ids)
	}
}

func TestValidationErrorsAreEventsAndTheBatchGoesOn(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	bad := []string{
		`{"type":"launchMissiles"}`,
		`{"type":"createFile","path":"/etc/passwd","content":"x"}`,
		`{"type":"readFile","path":"a/../../etc/passwd"}`,
		`{"type":"shell","command":"echo","timeout":10}`,
		`{"type":"shell","command":"` + strings.Repeat("x", 4097) + `"}`,
		`{"type":"createFile","path":"x","content":"x","mode":"0777"}`,
		`{"type":"readFile","path":"caf\u00e9\u202e.txt"}`,
	}
	body := `{"operations":[` + strings.Join(bad, ",") + `,{"type":"createFile","path":"ok.txt","content":"ok"}]}`
	a := e.post(agentKey, "run_val", "", body)
	ev := a.reply.Events
	if a.reply.Status != statusCompleted || len(ev) != len(bad)+1 {
		t.Fatalf("reply %+v", a.reply)
	}
	for i := range bad {
		if ev[i].Type != eventError || ev[i].Category != categoryValidation {
			t.Errorf("operation %d: %+v, want a validation error event", i, ev[i])
		}
	}
	if last := ev[len(bad)]; last.Type != "createFile" || !*last.Success || e.read("ok.txt") != "ok" {
		t.Fatalf("the valid operation after them: %+v", last)
	}
	// The door refused all but the last bad one (the driver's canonical
	// path rule) without a call; nothing was read.
	if e.calls("readFile") != 0 {
		t.Errorf("readFile ran %d times", e.calls("readFile"))
	}
}

func TestDenyCarriesTheRulesSuggestion(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	a := e.post(agentKey, "run_curl", "", `{"operations":[{"type":"shell","id":"net","command":"curl x"},{"type":"shell","command":"echo after"}]}`)
	ev := a.reply.Events
	if a.reply.Status != statusCompleted || len(ev) != 2 {
		t.Fatalf("reply %+v", a.reply)
	}
	if ev[0].Type != eventPolicyDenied || ev[0].OperationID != "net" || ev[0].OperationType != opShell ||
		ev[0].Reason != "network tools are not allowed (rule no_curl)" || ev[0].Suggestion != "use the fetch tool instead" {
		t.Errorf("policyDenied event %+v", ev[0])
	}
	if ev[1].Type != opShell || *ev[1].Stdout != "after\n" || e.calls("shell") != 1 {
		t.Errorf("the batch did not go on after the deny: %+v", ev[1])
	}
}
