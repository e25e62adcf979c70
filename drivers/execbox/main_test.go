package execbox

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
)

func TestMain(m *testing.M) {
	// Stdio runner processes of these tests are this test binary.
	execboxtest.MaybeRunStdioRunner()
	os.Exit(m.Run())
}

// execID is the execution id of the calls made by newCall: the request id.
const execID = "req-1"

// fakeTools is a ToolCaller that records its calls. By default a call
// succeeds with {"echo": input}; handle replaces that.
type fakeTools struct {
	tools  []drivers.ToolInfo
	handle func(ctx context.Context, callID, toolID string, input any) drivers.NestedResult

	mu    sync.Mutex
	calls []toolCall
}

// toolCall is one call a fakeTools received.
type toolCall struct {
	callID, toolID string
	input          any
}

// newTools returns a fakeTools offering a small catalog.
func newTools() *fakeTools {
	return &fakeTools{tools: []drivers.ToolInfo{
		{ID: "echo", Description: "Echo the input"},
		{ID: "github.issues.list", Description: "List issues"},
		{ID: "search.web", Description: "Search the web"},
	}}
}

func (f *fakeTools) Tools() []drivers.ToolInfo { return slices.Clone(f.tools) }

func (f *fakeTools) CallTool(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
	f.mu.Lock()
	f.calls = append(f.calls, toolCall{callID, toolID, input})
	f.mu.Unlock()
	if f.handle != nil {
		return f.handle(ctx, callID, toolID, input)
	}
	return drivers.NestedResult{RequestID: execID + ":" + callID, OK: true, Result: map[string]any{"echo": input}}
}

// Calls returns the calls received so far.
func (f *fakeTools) Calls() []toolCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// newCall returns a call of the code tool with args, the code included.
func newCall(tools drivers.ToolCaller, args map[string]any) drivers.Call {
	if args == nil {
		args = map[string]any{}
	}
	if _, ok := args["code"]; !ok {
		args["code"] = "return 1"
	}
	return drivers.Call{RequestID: execID, ToolID: "code.run", Target: "run", Args: args, Tools: tools}
}

// transportCase starts a fake runner playing a script and a driver using it.
type transportCase struct {
	name  string
	start func(t *testing.T, script execboxtest.Script, cfg Config) (*Driver, *execboxtest.Runner)
}

// transports are the driver's two transports.
var transports = []transportCase{
	{"ws", func(t *testing.T, script execboxtest.Script, cfg Config) (*Driver, *execboxtest.Runner) {
		r := execboxtest.NewWS(t, script)
		cfg.URL = r.URL
		return newDriver(t, cfg), r
	}},
	{"stdio", func(t *testing.T, script execboxtest.Script, cfg Config) (*Driver, *execboxtest.Runner) {
		r := execboxtest.NewStdio(t, script)
		cfg.Command = r.Command
		return newDriver(t, cfg), r
	}},
}

// newDriver returns a driver closed when the test ends.
func newDriver(t testing.TB, cfg Config) *Driver {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// runCtx is the context of test calls: long enough for any of them, short
// enough to end a test that went wrong.
func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// onlySession returns the messages of the runner's only session.
func onlySession(t *testing.T, r *execboxtest.Runner) []execboxtest.Message {
	t.Helper()
	sessions := r.Sessions()
	if len(sessions) != 1 {
		t.Fatalf("runner saw %d sessions, want 1: %v", len(sessions), sessions)
	}
	return sessions[0]
}

// ofType returns the messages of one type.
func ofType(msgs []execboxtest.Message, typ string) []execboxtest.Message {
	var out []execboxtest.Message
	for _, m := range msgs {
		if m.Type() == typ {
			out = append(out, m)
		}
	}
	return out
}
