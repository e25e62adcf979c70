package main

import (
	"strings"
	"testing"
)

// TestMCPNullOptionalArgument: a client in a strict tool-schema mode sends
// null for every optional argument it leaves out. Through the real MCP
// door, such a call runs as the call without them, and a null for a
// required argument is still refused.
func TestMCPNullOptionalArgument(t *testing.T) {
	t.Parallel()
	d := mcpDoorServer(t)
	for _, tc := range []struct {
		name    string
		args    map[string]any
		isError bool
		want    string
	}{
		{"null encoding", map[string]any{"path": "notes.txt", "encoding": nil}, false, "hello from the workspace"},
		{"null path", map[string]any{"path": nil, "encoding": nil}, true, "path is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mcpCall(t, d, mcpDoorAgentKey, "workspace.readFile", tc.args, nil)
			if a.isError() != tc.isError || !strings.Contains(a.text(), tc.want) {
				t.Fatalf("isError %v, text %q; want isError %v and %q\n%.500s", a.isError(), a.text(), tc.isError, tc.want, a.raw)
			}
		})
	}
}
