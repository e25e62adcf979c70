package gateway

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/wire"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// sandboxDriver stands for a sandbox whose guest code calls tools back: it
// makes the nested calls it is given and reports their outcomes.
type sandboxDriver struct {
	calls   []nestedStep
	offered []string
}

type nestedStep struct {
	callID, toolID string
	input          any
}

func (d *sandboxDriver) Engine() string { return "sandbox" }

func (d *sandboxDriver) Run(ctx context.Context, c drivers.Call) (drivers.Result, error) {
	d.offered = nil
	for _, t := range c.Tools.Tools() {
		d.offered = append(d.offered, t.ID)
	}
	var outcomes []any
	for _, step := range d.calls {
		r := c.Tools.CallTool(ctx, step.callID, step.toolID, step.input)
		outcomes = append(outcomes, map[string]any{"request_id": r.RequestID, "ok": r.OK, "code": r.Code, "message": r.Message, "result": r.Result})
	}
	return drivers.Result{Data: outcomes, Evidence: map[string]any{"nested": len(outcomes)}}, nil
}

const nestedPolicy = `
@id("run_sandbox") permit (principal, action == Action::"RunTool", resource == Tool::"sandbox.run");
@id("guest_reads") @reason("guest code may read files")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.readFile")
when { context has parentRequestId };
@id("no_guest_shell") @reason("guest code never gets a shell")
forbid (principal, action == Action::"CallTool", resource == Tool::"workspace.shell");
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.shell");
`

func TestNestedCallsAreGatedAndRecorded(t *testing.T) {
	t.Parallel()
	sb := &sandboxDriver{calls: []nestedStep{
		{"call-1", "workspace.readFile", map[string]any{"path": "notes.txt"}},
		{"call-2", "workspace.shell", map[string]any{"command": "touch pwned"}},
		{"call-3", "no.such.tool", nil},
		{"call-4", "sandbox.run", nil},
		{"call-5", "workspace.readFile", []any{"not", "an", "object"}},
	}}
	e := newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": nestedPolicy},
		extra:    map[string]drivers.Driver{"sandbox": sb},
	})
	if err := os.WriteFile(filepath.Join(e.workspace, "notes.txt"), []byte("guest-visible\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp := e.mustCall("parent-1", "sandbox.run", nil)
	if !resp.GetOk() {
		t.Fatalf("parent call: %v", resp)
	}
	if slices.Contains(sb.offered, "sandbox.run") || !slices.Contains(sb.offered, "workspace.readFile") {
		t.Errorf("offered tools %v: want the catalog without the sandbox's own tools", sb.offered)
	}
	outcomes := resp.GetToolResult().GetData().GetListValue().GetValues()
	field := func(i int, name string) string {
		v := outcomes[i].GetStructValue().GetFields()[name]
		if s := v.GetStringValue(); s != "" {
			return s
		}
		if v.GetBoolValue() {
			return "true"
		}
		return ""
	}
	if field(0, "ok") != "true" || field(0, "request_id") != "parent-1:call-1" {
		t.Errorf("allowed nested read: %v", outcomes[0])
	}
	read := outcomes[0].GetStructValue().GetFields()["result"].GetStructValue().GetFields()["stdout"].GetStringValue()
	if read != "guest-visible\n" {
		t.Errorf("the guest got %q, want the file", read)
	}
	if field(1, "code") != "tool_error" || !strings.Contains(field(1, "message"), "no_guest_shell") {
		t.Errorf("denied nested shell: %v", outcomes[1])
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "pwned")); err == nil {
		t.Error("a nested call the policy forbids ran")
	}
	if field(2, "code") != "internal_error" || field(3, "code") != "internal_error" {
		t.Errorf("unknown tool and the sandbox's own tool: %v / %v", outcomes[2], outcomes[3])
	}
	if field(4, "code") != "validation_error" {
		t.Errorf("non-object input: %v", outcomes[4])
	}

	// Each nested call has its own evidence, decided as CallTool with its
	// parent on record.
	for _, id := range []string{"parent-1:call-1", "parent-1:call-2"} {
		dec := decodeJSON(t, e.artifact(id, evidence.ArtifactPolicyDecision))
		if dec["action"] != "CallTool" || dec["parent_request_id"] != "parent-1" {
			t.Errorf("%s decision = %v", id, dec)
		}
		e.checkReplyIsStored(id, mustDecode(t, e.artifact(id, evidence.ArtifactResponse)))
	}
	if _, err := e.store.Get(context.Background(), evidence.Key("parent-1:call-3", evidence.ArtifactRequest)); err == nil {
		t.Error("an unknown nested tool was recorded as a call")
	}
	result := decodeJSON(t, e.artifact("parent-1", evidence.ArtifactToolResult))
	if ev, _ := result["evidence"].(map[string]any); ev["nested"] != float64(5) {
		t.Errorf("tool_result.json evidence = %v", result["evidence"])
	}

	// A retried parent is a replay: no nested call runs again.
	again := e.mustCall("parent-1", "sandbox.run", nil)
	if again.GetToolResult().GetData().GetListValue() == nil {
		t.Fatalf("replay: %v", again)
	}
}

func TestNestedRequestIDs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("p", 120)
	tests := []struct{ parent, callID string }{
		{"r1", "call-1"}, {"r1", "call 1"}, {"r1", "../../x"}, {long, "call-1"}, {"r1", strings.Repeat("c", 40)},
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		id := nestedRequestID(tc.parent, tc.callID)
		if !requestIDPattern.MatchString(id) {
			t.Errorf("nestedRequestID(%q, %q) = %q, not a valid request id", tc.parent, tc.callID, id)
		}
		if id != nestedRequestID(tc.parent, tc.callID) {
			t.Errorf("not deterministic for %q", tc.callID)
		}
		if seen[id] {
			t.Errorf("collision on %q", id)
		}
		seen[id] = true
	}
	if got := nestedRequestID("r1", "call-1"); got != "r1:call-1" {
		t.Errorf("plain call ids stay readable: %q", got)
	}
	// Real runners' call ids are UUIDs: they stay readable too.
	const uuid = "3f2b8c1e-9a4d-4e6f-b7c2-1d0e5a6f7b8c"
	if got := nestedRequestID("sb-1", uuid); got != "sb-1:"+uuid {
		t.Errorf("a runner's UUID call id: %q, want sb-1:%s", got, uuid)
	}
}

func mustDecode(t *testing.T, body []byte) *toolgatev1.RunToolResponse {
	t.Helper()
	r, err := wire.DecodeResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// toolsProbe reports whether its call could call tools back.
type toolsProbe struct{}

func (toolsProbe) Engine() string { return "probe" }

func (toolsProbe) Run(_ context.Context, c drivers.Call) (drivers.Result, error) {
	return drivers.Result{Data: map[string]any{"can_call_tools": c.Tools != nil}}, nil
}

// TestNestingStopsAtOneLevel: a tool reached from guest code cannot call
// tools itself, so sandboxes cannot start each other without end.
func TestNestingStopsAtOneLevel(t *testing.T) {
	t.Parallel()
	sb := &sandboxDriver{calls: []nestedStep{{"c1", "probe.run", nil}}}
	e := newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
		extra:    map[string]drivers.Driver{"sandbox": sb, "probe": toolsProbe{}},
	})
	top := e.mustCall("top-1", "probe.run", nil)
	if !top.GetToolResult().GetData().GetStructValue().GetFields()["can_call_tools"].GetBoolValue() {
		t.Fatal("a top-level call gets no ToolCaller")
	}
	resp := e.mustCall("nest-1", "sandbox.run", nil)
	inner := resp.GetToolResult().GetData().GetListValue().GetValues()[0].GetStructValue().GetFields()["result"]
	data := inner.GetStructValue().GetFields()["data"].GetStructValue().GetFields()
	if data["can_call_tools"].GetBoolValue() {
		t.Fatal("a nested call was handed a ToolCaller")
	}
}
