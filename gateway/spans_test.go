package gateway

import (
	"os"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// TestNestedCallSpansAreChildrenOfTheDriverStage: a call guest code makes
// through the sandbox's CallTool is an execute_tool span of its own under
// the parent's driver stage, in the parent's trace, which both
// request.json files name.
func TestNestedCallSpansAreChildrenOfTheDriverStage(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tel, err := telemetry.New(telemetry.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandboxDriver{calls: []nestedStep{{"call-1", "workspace.readFile", map[string]any{"path": "notes.txt"}}}}
	e := newEnv(t, envOptions{
		policies:  map[string]string{"policy.default.cedar": nestedPolicy},
		extra:     map[string]drivers.Driver{"sandbox": sb},
		telemetry: tel,
	})
	if err := os.WriteFile(filepath.Join(e.workspace, "notes.txt"), []byte("guest-visible\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if resp := e.mustCall("parent-1", "sandbox.run", nil); !resp.GetOk() {
		t.Fatalf("parent call: %v", resp)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	parent, nested := byName["execute_tool sandbox.run"], byName["execute_tool workspace.readFile"]
	if parent == nil || nested == nil {
		t.Fatalf("spans %v: want the parent's and the nested call's", len(rec.Ended()))
	}
	var driver sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "toolgate.driver" && s.Parent().SpanID() == parent.SpanContext().SpanID() {
			driver = s
		}
	}
	if driver == nil || nested.Parent().SpanID() != driver.SpanContext().SpanID() {
		t.Fatal("the nested call's span is not a child of the parent's driver stage")
	}
	nestedAttrs := map[string]string{}
	for _, kv := range nested.Attributes() {
		nestedAttrs[string(kv.Key)] = kv.Value.Emit()
	}
	if nestedAttrs["toolgate.nested"] != "true" || nestedAttrs["gen_ai.tool.call.id"] != "parent-1:call-1" || nestedAttrs["toolgate.decision"] != "allow" {
		t.Errorf("nested span attributes %v", nestedAttrs)
	}
	want := parent.SpanContext().TraceID().String()
	for _, id := range []string{"parent-1", "parent-1:call-1"} {
		if got := decodeJSON(t, e.artifact(id, evidence.ArtifactRequest))["trace_id"]; got != want {
			t.Errorf("%s request.json trace_id %v, want the parent span's trace %s", id, got, want)
		}
	}
}
