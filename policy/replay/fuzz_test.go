package replay

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/policy"
)

// FuzzParseCall: whatever bytes the store hands back as a request, a
// decision and a redaction path, ParseCall returns a call that names the
// request asked for with a decision word policy writes, or says why not;
// it never panics.
func FuzzParseCall(f *testing.F) {
	base := recorded{id: "r1", caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read", groups: []string{"dev"}}
	req, d := mustJSON(f, base.requestRecord()), mustJSON(f, base.decisionRecord())
	f.Add(req, d, "$.args.token")
	f.Add(req, d, `$.args["a\"b"].c`)
	f.Add(req, []byte(`{"request_id":"r1","caller":"alice","caller":"bob"}`), "$.caller")
	f.Add([]byte(`{"request_id":"r1","args":{"path":1e999}}`), d, "")
	f.Add([]byte(`{"request_id":"r1","args":null}`), d, "$.args")
	f.Fuzz(func(t *testing.T, request, decision []byte, path string) {
		c, err := ParseCall("r1", request, decision, []evidence.Redaction{{Rule: "x", Artifact: evidence.ArtifactRequest, Path: path}})
		if err != nil {
			var nr *NotReplayable
			if !errors.As(err, &nr) || nr.Why == "" {
				t.Fatalf("ParseCall: %v, want a *NotReplayable with a reason", err)
			}
			return
		}
		switch {
		case c.RequestID != "r1" || c.Request.RequestID != "r1":
			t.Fatalf("a call of request %q from the records of r1", c.RequestID)
		case c.From != policy.WordAllow && c.From != policy.WordDeny && c.From != policy.WordApprovalRequired:
			t.Fatalf("from %q", c.From)
		case c.Request.Action != policy.ActionRunTool && c.Request.Action != policy.ActionCallTool:
			t.Fatalf("action %q", c.Request.Action)
		}
		if _, err := json.Marshal(c.Request.Args); err != nil {
			t.Fatalf("arguments that are not JSON: %v", err)
		}
	})
}
