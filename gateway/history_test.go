package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// historyPolicies label secret reads, forbid writes to public/ after
// them, and cap reads at three per session.
const historyPolicies = `
@id("read-secrets") @label("sensitive")
permit (principal, action, resource == Tool::"workspace.readFile")
when { context.args has path && context.args.path like "secret/*" };

@id("workspace") permit (principal, action, resource in Driver::"workspace");

@id("no-public-after-sensitive") @reason("this session read sensitive data")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.session.labels.contains("sensitive") && context.args has path && context.args.path like "public/*" };

@id("three-reads") @reason("at most 3 reads per session")
forbid (principal, action, resource == Tool::"workspace.readFile")
when { context.session.toolCalls >= 3 };
`

func (e *env) runIn(run, id, tool string, args map[string]any) *toolgatev1.RunToolResponse {
	e.t.Helper()
	resp, err := e.client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: tool, Args: mustStruct(e.t, args), Ctx: &toolgatev1.RunContext{RunId: run},
	})
	if err != nil {
		e.t.Fatalf("RunTool %s: %v", id, err)
	}
	return resp
}

func TestHistoryDecides(t *testing.T) {
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": historyPolicies}})
	if err := os.MkdirAll(filepath.Join(e.workspace, "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.workspace, "secret", "k"), []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		run, id, tool string
		args          map[string]any
		wantRule      string
		wantAllow     bool
	}{
		{"r1", "read-secret", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "write-after", "workspace.createFile", map[string]any{"path": "public/a", "content": "x"}, "no-public-after-sensitive", false},
		{"r2", "write-fresh-run", "workspace.createFile", map[string]any{"path": "public/a", "content": "x"}, "workspace", true},
		{"r1", "read-2", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "read-3", "workspace.readFile", map[string]any{"path": "secret/k"}, "read-secrets", true},
		{"r1", "read-4", "workspace.readFile", map[string]any{"path": "secret/k"}, "three-reads", false},
	}
	for _, s := range steps {
		resp := e.runIn(s.run, s.id, s.tool, s.args)
		pc := resp.GetPolicyCheck()
		if (pc.GetDecision() == "allow") != s.wantAllow || pc.GetRuleId() != s.wantRule {
			t.Fatalf("%s: decision %s by %q (%s), want allow=%v by %q", s.id, pc.GetDecision(), pc.GetRuleId(), pc.GetReason(), s.wantAllow, s.wantRule)
		}
	}
	var rec evidence.DecisionRecord
	if err := json.Unmarshal(e.artifact("write-after", evidence.ArtifactPolicyDecision), &rec); err != nil {
		t.Fatal(err)
	}
	h := rec.History
	if h == nil || h.Slot != 1 || h.Calls != 1 || h.Claimed != 0 || strings.Join(h.Labels, ",") != "sensitive" {
		t.Errorf("the denied write's recorded history = %+v, want the facts at slot 1 with label sensitive", h)
	}
	if err := json.Unmarshal(e.artifact("read-3", evidence.ArtifactPolicyDecision), &rec); err != nil {
		t.Fatal(err)
	}
	if h := rec.History; h == nil || h.Claimed != 4 || h.ToolCalls != 2 || fmt.Sprint(h.LabelsAdded) != "[sensitive]" {
		t.Errorf("the third read's recorded history = %+v, want tool_calls 2, claimed slot 4, labels_added [sensitive]", h)
	}
}

// TestNoHistoryWithoutHistoryRules: policies that never read history
// leave nothing under sessions/.
func TestNoHistoryWithoutHistoryRules(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.mustCall("plain", "workspace.createFile", map[string]any{"path": "a", "content": "x"})
	keys, err := e.store.List(context.Background(), "sessions/")
	if err != nil || len(keys) != 0 {
		t.Fatalf("sessions/ holds %v (%v), want nothing", keys, err)
	}
}
