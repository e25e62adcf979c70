package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// capsPolicy lets callers edit, create and read workspace files and run
// sandboxed code whose guest may read files.
const capsPolicy = `
@id("edit") @reason("callers may edit files")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.editFile");
@id("create") @reason("callers may create files")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile");
@id("read") @reason("callers may read files")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");
@id("run_code") @reason("callers may run sandboxed code")
permit (principal, action == Action::"RunTool", resource == Tool::"code.run");
@id("guest_reads") @reason("guest code may read files")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.readFile")
when { context has parentRequestId };
`

// capsServer starts the real binary with a file evidence store, a
// workspace and, when runnerURL is set, an execbox driver for code.run
// with the given extra driver keys.
func capsServer(t *testing.T, runnerURL, execboxKeys string) (*server, string) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, capsPolicy)
	if err := os.MkdirAll(filepath.Join(dir, "ws"), 0o750); err != nil {
		t.Fatal(err)
	}
	cfg := "instance: caps\nevidence: {url: file://./audit, spool_dir: none}\ndrivers:\n  workspace: {type: workspace, root: ./ws}\n"
	if runnerURL != "" {
		cfg += fmt.Sprintf("  sandbox: {type: execbox, url: %q%s}\ntools:\n  code.run: {driver: sandbox, description: Run code}\n", runnerURL, execboxKeys)
	}
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServer(t, dir, "--config", "toolgate.yaml"), dir
}

// capsCall makes one call and fails the test on a gRPC error.
func capsCall(t *testing.T, c toolgatev1.ToolGatewayClient, id, tool string, args map[string]any) *toolgatev1.RunToolResponse {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.RunTool(context.Background(), &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
	if err != nil {
		t.Fatalf("%s %s: %v", tool, id, err)
	}
	return resp
}

// sameEdits is n edits replacing old with repl, as tool arguments.
func sameEdits(n int, old, repl string) []any {
	edits := make([]any, n)
	for i := range edits {
		edits[i] = map[string]any{"oldContent": old, "newContent": repl}
	}
	return edits
}

func TestHostileEditFile(t *testing.T) {
	t.Parallel()
	srv, dir := capsServer(t, "", "")
	c := dial(t, srv.addr)
	big := strings.Repeat("a", 10<<20-1) + "M"
	if err := os.WriteFile(filepath.Join(dir, "ws", "big.txt"), []byte(big), 0o640); err != nil {
		t.Fatal(err)
	}
	bigUnchanged := func(t *testing.T) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(dir, "ws", "big.txt")); err != nil || string(b) != big {
			t.Errorf("big.txt changed (%d bytes, %v)", len(b), err)
		}
	}

	t.Run("a thousand edits on a 10 MB file are refused at once", func(t *testing.T) {
		start := time.Now()
		resp := capsCall(t, c, "edit-1000", "workspace.editFile", map[string]any{"path": "big.txt", "edits": sameEdits(1000, "M", "N")})
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the refusal took %v", took)
		}
		want := "edit budget exceeded: 1000 edits on a file of 10485760 bytes exceed the budget of 268435456 bytes"
		if tr := resp.GetToolResult(); tr.GetExitCode() != 2 || !strings.Contains(tr.GetStderr(), want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", tr.GetExitCode(), tr.GetStderr(), want)
		}
		bigUnchanged(t)
	})
	t.Run("more than a thousand edits never run", func(t *testing.T) {
		// Refused by the driver's limit, or before it by the gateway's
		// bound on what policy is shown; either way nothing is written.
		resp := capsCall(t, c, "edit-1001", "workspace.editFile", map[string]any{"path": "big.txt", "edits": sameEdits(1001, "M", "N")})
		refused := resp.GetToolResult().GetExitCode() == 2 && strings.Contains(resp.GetToolResult().GetStderr(), "edits must contain at most 1000 edits")
		if resp.GetOk() || !(refused || resp.GetPolicyCheck().GetDecision() == "deny") {
			t.Errorf("1001 edits answered %v", resp)
		}
		bigUnchanged(t)
	})

	t.Run("writes and reads go on while callers hammer the file with edits", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "ws", "small.txt"), []byte("hello"), 0o640); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w, edits := range [][]any{sameEdits(1000, "M", "M"), sameEdits(25, "M", "M")} {
			args, _ := structpb.NewStruct(map[string]any{"path": "big.txt", "edits": edits})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					c.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("hammer-%d-%d", w, i), ToolId: "workspace.editFile", Args: args})
				}
			}()
		}
		defer func() {
			cancel()
			wg.Wait()
		}()
		time.Sleep(300 * time.Millisecond)
		for i := range 3 {
			start := time.Now()
			created := capsCall(t, c, "create-"+strconv.Itoa(i), "workspace.createFile", map[string]any{"path": "new.txt", "content": "x", "overwrite": true})
			read := capsCall(t, c, "read-"+strconv.Itoa(i), "workspace.readFile", map[string]any{"path": "small.txt"})
			// At most one edit within budget is ahead in the queue; the
			// race detector makes it take a few seconds.
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("round %d: createFile and readFile took %v during the attack", i, took)
			}
			if !created.GetOk() || read.GetToolResult().GetStdout() != "hello" {
				t.Errorf("round %d: create %v, read %v", i, created.GetToolResult(), read.GetToolResult())
			}
		}
	})
}

// peakRSS returns the peak resident set of process pid, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	return int64(memoryKiB(t, pid, "VmHWM")) << 10
}

// nestedFolders counts the evidence folders of parent's nested calls.
func nestedFolders(t *testing.T, dir, parent string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "audit", "requests"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), parent+":") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestHostileNestedCalls(t *testing.T) {
	t.Parallel()
	// The gateway-level test (gateway/nested_caps_test.go) sends the full
	// 40,000; through the race-built binary a quarter of that shows the same
	// cap in a quarter of the time.
	t.Run("a guest fanning out 10,000 tool calls gets max_nested_calls of them", func(t *testing.T) {
		const fanOut = 10000
		runner := execboxtest.NewWS(t, execboxtest.Script{
			execboxtest.Started(),
			execboxtest.Repeat(fanOut, execboxtest.CallTool("c", "workspace", "readFile", map[string]any{"path": "notes.txt"})),
			execboxtest.Repeat(fanOut, execboxtest.AwaitResult("c")),
			execboxtest.Done("fanned out"),
		})
		srv, dir := capsServer(t, runner.URL, ", timeout: 60s")
		if err := os.WriteFile(filepath.Join(dir, "ws", "notes.txt"), []byte("notes"), 0o640); err != nil {
			t.Fatal(err)
		}
		c := dial(t, srv.addr)
		start := time.Now()
		resp := capsCall(t, c, "flood", "code.run", map[string]any{"code": "await Promise.all(calls)"})
		took := time.Since(start)
		rss := peakRSS(t, srv.cmd.Process.Pid)
		t.Logf("%d tool calls through the binary: %v, peak RSS %d MiB (race build)", fanOut, took, rss>>20)
		if !resp.GetOk() {
			t.Fatalf("flood: %v", resp)
		}
		if got := len(nestedFolders(t, dir, "flood")); got != 256 {
			t.Errorf("%d nested evidence folders, want exactly the default max_nested_calls of 256", got)
		}
		refused := 0
		for _, session := range runner.Sessions() {
			for _, m := range session {
				if e, ok := m["error"].(map[string]any); ok && strings.Contains(fmt.Sprint(e["message"]), "limit of 256 nested tool calls (max_nested_calls)") {
					refused++
				}
			}
		}
		if refused != fanOut-256 {
			t.Errorf("%d calls were refused naming the limit, want %d", refused, fanOut-256)
		}
		tr, err := os.ReadFile(filepath.Join(dir, "audit", "requests", "flood", "tool_result.json"))
		if err != nil || !strings.Contains(string(tr), fmt.Sprintf(`"nested_calls_refused": %d`, fanOut-256)) {
			t.Errorf("the parent's tool_result.json does not count the refusals (%v)", err)
		}
		if rss > 768<<20 {
			t.Errorf("the gateway's peak RSS reached %d MiB", rss>>20)
		}
	})

	t.Run("a guest that keeps calling after its timeout starts nothing past it", func(t *testing.T) {
		runner := execboxtest.NewWS(t, execboxtest.Script{
			execboxtest.Started(),
			execboxtest.Repeat(300,
				execboxtest.CallTool("c", "workspace", "readFile", map[string]any{"path": "notes.txt"}),
				execboxtest.IgnoreCancel(10*time.Millisecond)),
			execboxtest.Done("too late"),
		})
		srv, dir := capsServer(t, runner.URL, ", timeout: 500ms, max_nested_calls: 1000")
		if err := os.WriteFile(filepath.Join(dir, "ws", "notes.txt"), []byte("notes"), 0o640); err != nil {
			t.Fatal(err)
		}
		c := dial(t, srv.addr)
		start := time.Now()
		resp := capsCall(t, c, "late", "code.run", map[string]any{"code": "for (;;) await workspace.readFile({path: 'notes.txt'})"})
		took := time.Since(start)
		if resp.GetToolResult().GetExitCode() != 124 {
			t.Fatalf("exit %d (%s), want the timeout", resp.GetToolResult().GetExitCode(), resp.GetToolResult().GetStderr())
		}
		// 500 ms, the host's 100 ms and the 250 ms cancel grace, with
		// slack for a race-enabled binary on a loaded machine; a guest
		// whose calls went on would take its 300 calls' time, seconds more.
		if took > 4*time.Second {
			t.Errorf("the parent returned after %v", took)
		}
		folders := nestedFolders(t, dir, "late")
		if len(folders) == 0 || len(folders) >= 300 {
			t.Fatalf("%d nested calls ran, want those before the deadline only", len(folders))
		}
		// The limit runs from started, which came before the first nested
		// call: none may be claimed more than 600 ms (the limit and the
		// host's grace) after the first, give or take a loaded scheduler's
		// second; calls that went on would spread over the 300 calls' time.
		claimed := make([]time.Time, len(folders))
		for i, f := range folders {
			fi, err := os.Stat(filepath.Join(dir, "audit", "requests", f, "request.json"))
			if err != nil {
				t.Fatal(err)
			}
			claimed[i] = fi.ModTime()
		}
		first := slices.MinFunc(claimed, time.Time.Compare)
		for i, at := range claimed {
			if at.After(first.Add(600*time.Millisecond + time.Second)) {
				t.Errorf("nested call %s was claimed %v after the first, past the parent's deadline", folders[i], at.Sub(first))
			}
		}
	})
}
