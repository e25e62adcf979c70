package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNullArgumentIsAnAbsentOne: clients in strict tool-schema modes send
// null for every optional argument they leave out. Such a call runs as
// the call without them, is recorded and hashed as that call (a retry
// spelled either way replays it), while a null for a required argument is
// refused as a missing one.
func TestNullArgumentIsAnAbsentOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`}})
	if err := os.WriteFile(filepath.Join(e.workspace, "notes.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := e.call(ctx, "null-1", "workspace.readFile", map[string]any{"path": "notes.txt", "encoding": nil})
	if err != nil || !resp.GetOk() || resp.GetToolResult().GetStdout() != "hello\n" {
		t.Fatalf("readFile with null optional arguments: %v, %v", resp, err)
	}
	var rec struct{ Args map[string]any }
	if err := json.Unmarshal(e.artifact("null-1", "request.json"), &rec); err != nil || len(rec.Args) != 1 {
		t.Errorf("request.json records args %v (%v), want the path alone", rec.Args, err)
	}
	again, err := e.call(ctx, "null-1", "workspace.readFile", map[string]any{"path": "notes.txt"})
	if err != nil || again.GetToolResult().GetStdout() != "hello\n" {
		t.Fatalf("the same call without the nulls is not its replay: %v, %v", again, err)
	}
	resp, err = e.call(ctx, "null-2", "workspace.readFile", map[string]any{"path": nil})
	if err != nil || resp.GetOk() || !strings.Contains(resp.String(), "path is required") {
		t.Fatalf("a null required argument: %v, %v; want it refused as missing", resp, err)
	}
}
