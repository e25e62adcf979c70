package workspace_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/workspace"
)

// A driver is what the gateway hands an allowed call to. Here the
// workspace driver writes a file and reads it back, and refuses a path
// that leaves its folder; the gateway would have asked policy first.
func ExampleDriver_Run() {
	root, err := os.MkdirTemp("", "workspace")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	// File operations need no sandbox; shell commands run in one by
	// default.
	d, err := workspace.New(workspace.Config{Root: root, Sandbox: workspace.SandboxNone, Network: workspace.NetworkHost})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	calls := []drivers.Call{
		{RequestID: "ex-1", ToolID: "workspace.createFile", Target: "createFile",
			Args: map[string]any{"path": "notes/todo.txt", "content": "ship it\n"}},
		{RequestID: "ex-2", ToolID: "workspace.readFile", Target: "readFile",
			Args: map[string]any{"path": "notes/todo.txt"}},
		{RequestID: "ex-3", ToolID: "workspace.readFile", Target: "readFile",
			Args: map[string]any{"path": "../outside.txt"}},
	}
	for _, c := range calls {
		res, err := d.Run(ctx, c)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s exit=%d stdout=%q stderr=%q\n", c.Target, res.ExitCode, res.Stdout, res.Stderr)
	}
	// Output:
	// createFile exit=0 stdout="" stderr=""
	// readFile exit=0 stdout="ship it\n" stderr=""
	// readFile exit=2 stdout="" stderr="path must not contain a '..' element (it cannot be resolved without following links)\n"
}
