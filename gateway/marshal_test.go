package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/wire"
)

// TestMarshalJSONKeepsTheStoredLayout pins the bytes of stored artifacts:
// they are what an Encoder with SetEscapeHTML(false) and a two-space
// SetIndent writes, as every artifact already stored was written, so
// digests and diffs of old and new evidence compare like with like.
func TestMarshalJSONKeepsTheStoredLayout(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]any{
		"a request with HTML characters and raw arguments": evidence.RequestRecord{
			RequestID: "r1", Caller: "alice<&>", ToolID: "fs.read",
			Args:       json.RawMessage(`{ "path" : "a<b>&c", "n": [1, 2, {}], "q": "say \"hi\"" }`),
			ReceivedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), CanonicalRequestHash: "sha256:00",
		},
		"a response with empty lists": evidence.ResponseRecord{OK: true, EvidenceRefs: []string{}},
		"a plain map":                 map[string]any{"z": []any{}, "a": map[string]any{"b": "\u2028"}},
	} {
		t.Run(name, func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
			got, err := wire.MarshalJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("marshalJSON =\n%s\nwant\n%s", got, want.Bytes())
			}
		})
	}
}
