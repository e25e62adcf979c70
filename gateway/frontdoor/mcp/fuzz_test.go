package mcpdoor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
)

// FuzzOpenState: whatever a client echoes as requestState, openState
// never panics, and it opens a state only if this door sealed exactly
// that state, for this caller and tool, and it has not expired.
func FuzzOpenState(f *testing.F) {
	d := &Door{stateKey: []byte("0123456789abcdef0123456789abcdef")}
	now := time.Unix(1_800_000_000, 0)
	good := approvalState{RequestID: "mcp-abc", Tool: "held", Caller: "agent", Hash: "h", ApprovalID: "apr_x", Expires: now.Unix() + 60}
	sealed := d.sealState(good)
	f.Add(sealed)
	f.Add(sealed[:len(sealed)-1])
	f.Add("v1..")
	f.Add("v1.e30." + strings.Repeat("A", 43))
	f.Add("v2." + sealed[3:])
	f.Add(strings.Repeat(".", 5000))
	f.Fuzz(func(t *testing.T, s string) {
		st, err := d.openState(s, "agent", "held", now)
		if err != nil {
			return
		}
		if st != good || s != sealed {
			t.Fatalf("opened %q as %+v, which this door did not seal", s, st)
		}
		if _, err := d.openState(s, "alice", "held", now); err == nil {
			t.Fatal("another caller opened the state")
		}
		if _, err := d.openState(s, "agent", "echo", now); err == nil {
			t.Fatal("the state opened for another tool")
		}
		if _, err := d.openState(s, "agent", "held", now.Add(time.Minute)); err == nil {
			t.Fatal("an expired state opened")
		}
	})
}

// FuzzRunRequest: any arguments and _meta a client sends either become a
// RunTool request for the named tool whose arguments are the object sent,
// or a tool error; never a panic.
func FuzzRunRequest(f *testing.F) {
	d := &Door{}
	f.Add([]byte(`{"text":"x","n":1.50,"big":12345678901234567890}`), `{"io.github.toolgate/runId":"r"}`)
	f.Add([]byte(`[1,2]`), `{}`)
	f.Add([]byte(`null`), `{"io.github.toolgate/policyRef":7}`)
	f.Add([]byte(`{"a":{"b":[true,null,"\u0000"]}} {}`), `{"io.github.toolgate/stepId":["s"]}`)
	f.Add([]byte(``), `null`)
	f.Fuzz(func(t *testing.T, raw []byte, metaJSON string) {
		var meta map[string]any
		_ = json.Unmarshal([]byte(metaJSON), &meta)
		req, err := d.runRequest("echo", raw, meta, "rid-1")
		if err != nil {
			if _, ok := err.(*toolError); !ok {
				t.Fatalf("error %v (%T) is no tool error", err, err)
			}
			return
		}
		if req.GetToolId() != "echo" || req.GetRequestId() != "rid-1" {
			t.Fatalf("request %v names another tool or id", req)
		}
		var sent map[string]any
		if len(strings.TrimSpace(string(raw))) > 0 && strings.TrimSpace(string(raw)) != "null" {
			if err := json.Unmarshal(raw, &sent); err != nil {
				t.Fatalf("accepted arguments %q that are not a JSON object: %v", raw, err)
			}
		}
		got, err := protojson.Marshal(req.GetArgs())
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if len(back) != len(sent) {
			t.Fatalf("arguments %q became %s", raw, got)
		}
	})
}
