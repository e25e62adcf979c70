package mcpdoor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/gateway"
)

// listed lists the tools caller key sees, by name.
func (e *testEnv) listed(o clientOptions) map[string]*mcp.Tool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.connect(o).ListTools(ctx, nil)
	must(e.t, err)
	out := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func TestToolsCarrySchemasDescriptionsAndAnnotations(t *testing.T) {
	e := newTestEnv(t, nil)
	tools := e.listed(clientOptions{key: agentKey})
	read := tools["workspace.readFile"]
	if read == nil {
		t.Fatal("workspace.readFile is not listed")
	}
	var schema map[string]any
	b, _ := json.Marshal(read.InputSchema)
	must(t, json.Unmarshal(b, &schema))
	if schema["additionalProperties"] != false || schema["required"] == nil {
		t.Errorf("readFile schema %s: want the workspace driver's", b)
	}
	if a := read.Annotations; a == nil || !a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint {
		t.Errorf("readFile annotations %+v: want read-only, not destructive", read.Annotations)
	}
	echo := tools["echo"]
	if echo.Title != "Echoes its text" || echo.Description != "Echoes its text. Harmless."+descriptionSuffix {
		t.Errorf("echo title %q, description %q", echo.Title, echo.Description)
	}
	if !echo.Annotations.ReadOnlyHint {
		t.Error("echo's read-only tag is not a readOnlyHint")
	}
	if held := tools["held"]; held.Annotations != nil {
		t.Errorf("held claims hints it has no ground for: %+v", held.Annotations)
	}
}

func TestAnnotationsFollowTheCatalogHints(t *testing.T) {
	yes, no := true, false
	a := annotations(gateway.CatalogEntry{Hints: gateway.ToolHints{Destructive: &yes, Idempotent: &yes, OpenWorld: &no}})
	b, _ := json.Marshal(a)
	if string(b) != `{"destructiveHint":true,"idempotentHint":true,"openWorldHint":false,"readOnlyHint":false}` {
		t.Errorf("annotations %s", b)
	}
}

func TestToolsListIsCacheablePrivately(t *testing.T) {
	cfg := newConfig()
	cfg.ListTTL = 1500 * time.Millisecond
	e := newTestEnv(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.connect(clientOptions{key: agentKey}).ListTools(ctx, nil)
	must(t, err)
	if res.CacheScope != "private" || res.TTLMs != 1500 {
		t.Errorf("cacheScope %q ttlMs %d: want private, 1500", res.CacheScope, res.TTLMs)
	}
}

func TestApprovalToolsLetPolicyDecideWhoApproves(t *testing.T) {
	cfg := newConfig()
	cfg.ApprovalTools = true
	e := newTestEnv(t, cfg)
	agent := e.connect(clientOptions{key: agentKey})
	alice := e.connect(clientOptions{key: aliceKey})
	if _, ok := e.listed(clientOptions{key: agentKey})[ToolApprovalsDecide]; !ok {
		t.Fatal("the approval tools are not listed")
	}
	held := call(t, agent, "held", map[string]any{"text": "approve me"}, mcp.Meta{MetaIdempotencyKey: "tool-approved"})
	aid := approvalOf(t, held)

	// The caller who asked may not approve its own call.
	self := call(t, agent, ToolApprovalsDecide, map[string]any{"approvalId": aid, "decision": "approve"}, nil)
	if !self.IsError || !strings.Contains(text(self), "may not decide") {
		t.Fatalf("self-approval: isError %v, text %q", self.IsError, text(self))
	}
	list := call(t, alice, ToolApprovalsList, map[string]any{}, nil)
	if list.IsError || !strings.Contains(text(list), aid) {
		t.Fatalf("alice's list: isError %v, text %q", list.IsError, text(list))
	}
	ok := call(t, alice, ToolApprovalsDecide, map[string]any{"approvalId": aid, "decision": "approve", "reason": "fine"}, nil)
	if ok.IsError || !strings.Contains(text(ok), `"approved"`) {
		t.Fatalf("alice's approval: isError %v, text %q", ok.IsError, text(ok))
	}
	done := call(t, agent, "held", map[string]any{"text": "approve me"}, mcp.Meta{MetaIdempotencyKey: "tool-approved"})
	if done.IsError || text(done) != "approve me" || e.driver.runs.Load() != 1 {
		t.Errorf("after the approval: isError %v, text %q, runs %d", done.IsError, text(done), e.driver.runs.Load())
	}
	bad := call(t, alice, ToolApprovalsDecide, map[string]any{"approvalId": aid, "decision": "approve", "force": true}, nil)
	if !bad.IsError {
		t.Error("an unknown argument to the decide tool was accepted")
	}
}

func TestURLOnlyClientsAreSentToTheApprovalPage(t *testing.T) {
	for _, withURL := range []bool{true, false} {
		cfg := newConfig()
		if withURL {
			cfg.ApprovalURL = "https://gw.example.com/approvals/{approval_id}"
		}
		e := newTestEnv(t, cfg)
		cs := e.connect(clientOptions{key: agentKey, urlOnly: true, elicit: acceptAll, rawMRTR: true})
		res := call(t, cs, "held", map[string]any{"text": "x"}, nil)
		aid := approvalOf(t, res)
		if !withURL {
			if res.NeedsInput() || !res.IsError {
				t.Errorf("without approval_url a URL-only client got needs input %v, isError %v", res.NeedsInput(), res.IsError)
			}
			continue
		}
		ask, ok := res.InputRequests[approvalInputID].(*mcp.ElicitParams)
		if !res.NeedsInput() || !ok || ask.Mode != "url" || ask.URL != "https://gw.example.com/approvals/"+aid {
			t.Errorf("input requests %+v: want a url elicitation of the approval page", res.InputRequests)
		}
	}
}
