package mcpdoor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestListIsThePolicyFilteredCatalog(t *testing.T) {
	e := newTestEnv(t, nil)
	for _, legacy := range []bool{false, true} {
		cs := e.connect(clientOptions{key: agentKey, legacy: legacy})
		want := "2026-07-28"
		if legacy {
			want = legacyVersion
		}
		if got := cs.InitializeResult().ProtocolVersion; got != want {
			t.Fatalf("negotiated %s, want %s", got, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := cs.ListTools(ctx, nil)
		cancel()
		must(t, err)
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		// held is listed: policy may allow it (after an approval);
		// hidden is denied to everyone; bad:id is no MCP name.
		if want := []string{"echo", "held", "workspace.readFile"}; !slices.Equal(names, want) {
			t.Errorf("%s client: tools/list = %v, want %v", want, names, want)
		}
	}
}

func TestAllowedCallReturnsOutputAndEvidence(t *testing.T) {
	e := newTestEnv(t, nil)
	cs := e.connect(clientOptions{key: agentKey})
	res := call(t, cs, "echo", map[string]any{"text": "hello"}, mcp.Meta{MetaIdempotencyKey: "allowed-1"})
	if res.IsError || text(res) != "hello" {
		t.Fatalf("result: isError %v, text %q", res.IsError, text(res))
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["length"] != float64(5) {
		t.Errorf("structuredContent = %v, want the driver's data", res.StructuredContent)
	}
	if got := res.Meta[MetaRequestID]; got != "allowed-1" {
		t.Errorf("_meta requestId = %v", got)
	}
	refs, _ := res.Meta[MetaEvidenceRefs].([]any)
	if !slices.Contains(refs, any("requests/allowed-1/manifest.json")) {
		t.Errorf("_meta evidenceRefs = %v, want the manifest among them", refs)
	}
	if rj := e.requestJSON("allowed-1"); rj["front_door"] != Name || rj["caller"] != "agent" {
		t.Errorf("request.json: front_door %v caller %v", rj["front_door"], rj["caller"])
	}
	if n := e.driver.runs.Load(); n != 1 {
		t.Errorf("the driver ran %d times, want 1", n)
	}
}
