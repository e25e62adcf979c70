package agentspaces

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// FuzzOperationsMessage sends arbitrary bodies through the door: it never
// panics, every reply encodes as JSON, and a batch that was not stopped
// has exactly one event per operation.
func FuzzOperationsMessage(f *testing.F) {
	files, _ := filepath.Glob("testdata/examples/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		gw := &fakeGateway{run: func(req *toolgatev1.RunToolRequest) (*toolgatev1.RunToolResponse, error) {
			return allowed(map[string]any{"success": true}, 0, ""), nil
		}}
		d, err := New(gw, Options{MaxOperations: 64})
		if err != nil {
			t.Fatal(err)
		}
		reply, code := d.Serve(context.Background(), Request{Caller: "c", RunID: "run", Body: body})
		if _, err := json.Marshal(reply); err != nil {
			t.Fatalf("reply does not encode: %v", err)
		}
		m, perr := parseMessage(body, 64)
		if perr != nil {
			if code != httpMalformed {
				t.Fatalf("malformed body answered %d", code)
			}
			return
		}
		if m.Kind == kindBatch && reply.Status == statusCompleted && len(reply.Events) != len(m.Ops) {
			t.Fatalf("%d operations, %d events", len(m.Ops), len(reply.Events))
		}
	})
}
