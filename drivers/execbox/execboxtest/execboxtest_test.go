package execboxtest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestMain(m *testing.M) {
	MaybeRunStdioRunner()
	os.Exit(m.Run())
}

// execute is a well-formed execute message with id.
func execute(id string) map[string]any {
	return map[string]any{"type": "execute", "id": id, "code": "1", "providers": []any{},
		"options": map[string]any{"timeoutMs": 1000, "memoryLimitBytes": 1 << 20, "maxLogLines": 10, "maxLogChars": 100}}
}

// dial connects to a WebSocket runner.
func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func send(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// next reads one message, or nil when none arrives within d.
func next(t *testing.T, c *websocket.Conn, d time.Duration) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("runner sent %q: %v", b, err)
	}
	return m
}

// TestScriptRoundTrip checks that a script survives the trip to a stdio
// runner process.
func TestScriptRoundTrip(t *testing.T) {
	t.Parallel()
	script := Script{
		ExitBeforeExecuteOnce(), FreshCallIDs(), Started(), CallTool("c", "p", "t", map[string]any{"n": json.Number("1")}),
		CallToolWithoutInput("d", "p", "t"), AwaitResult("c"), Log("l"), Sleep(time.Millisecond),
		IgnoreCancel(2 * time.Millisecond), Raw(`{"x":1}`), Oversized(10),
		Repeat(2, CallTool("r", "p", "t", "in"), AwaitResult("r")), Fail("code", "message"), Done("r"),
		DoneUndefined(), DoneFromResult("c"), Hang(), Crash(),
	}
	b, err := encodeScript(script)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeScript(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, script) {
		t.Errorf("script after the round trip:\n%#v\nwant\n%#v", got, script)
	}
}

// TestWSSession checks a scripted WebSocket session from the host's side,
// including the rejection of a second execute like a real runner.
func TestWSSession(t *testing.T) {
	t.Parallel()
	r := NewWS(t, Script{Started(), CallTool("c1", "tools", "echo", map[string]any{"a": 1}), DoneFromResult("c1")})
	c := dial(t, r.URL)
	send(t, c, execute("e1"))
	if m := next(t, c, 5*time.Second); m["type"] != "started" || m["id"] != "e1" {
		t.Fatalf("first message %v, want started", m)
	}
	call := next(t, c, 5*time.Second)
	if call["type"] != "tool_call" || call["callId"] != "c1" || !reflect.DeepEqual(call["input"], map[string]any{"a": 1.0}) {
		t.Fatalf("second message %v, want the tool_call", call)
	}
	send(t, c, execute("e2"))
	if m := next(t, c, 5*time.Second); m["type"] != "done" || m["id"] != "e2" || m["ok"] != false {
		t.Fatalf("answer to a second execute %v, want a done rejecting e2", m)
	}
	send(t, c, map[string]any{"type": "tool_result", "callId": "c1", "ok": true, "result": "value"})
	if m := next(t, c, 5*time.Second); m["type"] != "done" || m["id"] != "e1" || m["result"] != "value" {
		t.Fatalf("final message %v, want done with the tool's result", m)
	}
	c.Close(websocket.StatusNormalClosure, "")
	sessions := r.Sessions()
	if len(sessions) != 1 || len(sessions[0]) != 3 || sessions[0][2].Type() != "tool_result" {
		t.Errorf("sessions = %v, want one with execute, execute, tool_result", sessions)
	}
}

// TestFreshCallIDs checks that FreshCallIDs gives the same script's call
// a new id in every session, as a real runner's UUIDs are, and that the
// script's own AwaitResult still finds the answer under it.
func TestFreshCallIDs(t *testing.T) {
	t.Parallel()
	r := NewWS(t, Script{FreshCallIDs(), CallTool("c1", "tools", "echo", nil), DoneFromResult("c1")})
	seen := map[string]bool{}
	for i := range 2 {
		c := dial(t, r.URL)
		send(t, c, execute("e1"))
		call := next(t, c, 5*time.Second)
		id, _ := call["callId"].(string)
		if !strings.HasPrefix(id, "c1-") || len(id) != len("c1-")+16 || seen[id] {
			t.Fatalf("session %d: tool_call %v, want c1- and 16 hex digits new to this session (seen %v)", i, call, seen)
		}
		seen[id] = true
		send(t, c, map[string]any{"type": "tool_result", "callId": id, "ok": true, "result": i})
		if m := next(t, c, 5*time.Second); m["type"] != "done" || m["result"] != float64(i) {
			t.Fatalf("session %d ended with %v, want done with the answer to %s", i, m, id)
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
}

// TestWSExecuteWithoutOptions checks that the fake, like a real runner,
// never answers an execute without options.
func TestWSExecuteWithoutOptions(t *testing.T) {
	t.Parallel()
	r := NewWS(t, Script{Started(), Done(1)})
	c := dial(t, r.URL)
	exec := execute("e1")
	delete(exec, "options")
	send(t, c, exec)
	if m := next(t, c, 200*time.Millisecond); m != nil {
		t.Errorf("runner answered %v to an execute without options", m)
	}
}

// TestWSCancel checks that a waiting step answers cancel with a timeout
// done, and that Hang does not.
func TestWSCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		script   Script
		wantDone bool
	}{
		{"await answers", Script{CallTool("c", "p", "t", nil), AwaitResult("c")}, true},
		{"sleep answers", Script{CallTool("c", "p", "t", nil), Sleep(time.Minute)}, true},
		{"hang does not", Script{CallTool("c", "p", "t", nil), Hang()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, NewWS(t, tc.script).URL)
			send(t, c, execute("e1"))
			next(t, c, 5*time.Second) // the tool_call
			send(t, c, map[string]any{"type": "cancel", "id": "e1"})
			m := next(t, c, 300*time.Millisecond)
			got := m != nil && m["type"] == "done" && m["error"].(map[string]any)["code"] == "timeout"
			if got != tc.wantDone {
				t.Errorf("after cancel the runner sent %v; want a timeout done: %v", m, tc.wantDone)
			}
		})
	}
}

// TestStdioRunner checks the stdio runner from the host's side: a process
// of this test binary playing the script on its stdin and stdout.
func TestStdioRunner(t *testing.T) {
	t.Parallel()
	r := NewStdio(t, Script{Started(), Log("hello"), Oversized(100), Done(map[string]any{"ok": true})})
	cmd := exec.Command(r.Command[0], r.Command[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(execute("e1"))
	stdin.Write(append(b, '\n'))
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("runner: %v", err)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `{"id":"e1","type":"started"}`) || len(lines[1]) != 100 ||
		!strings.Contains(lines[2], `"logs":["hello"]`) || !strings.Contains(lines[2], `"result":{"ok":true}`) {
		t.Errorf("runner wrote:\n%s", strings.Join(lines, "\n"))
	}
	if s := r.Sessions(); len(s) != 1 || s[0][0].Type() != "execute" || r.Starts() != 1 {
		t.Errorf("sessions = %v, starts = %d", s, r.Starts())
	}
}

// TestStdioCrash checks that Crash ends the stdio runner with status 3.
func TestStdioCrash(t *testing.T) {
	t.Parallel()
	r := NewStdio(t, Script{Started(), Crash()})
	cmd := exec.Command(r.Command[0], r.Command[1:]...)
	b, _ := json.Marshal(execute("e1"))
	cmd.Stdin = strings.NewReader(string(b) + "\n")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("runner ended with %v, want status 3", err)
	}
	if !strings.Contains(string(out), `"type":"started"`) {
		t.Errorf("runner wrote %q before crashing, want started", out)
	}
}
