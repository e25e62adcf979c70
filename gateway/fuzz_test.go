package gateway

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	respwire "github.com/toolgate/toolgate/gateway/wire"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// FuzzParseRequest feeds arbitrary wire bytes through the path a RunTool
// request takes before anything is stored: decoding, validation and
// canonicalization.
func FuzzParseRequest(f *testing.F) {
	seed := func(r *toolgatev1.RunToolRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	args, _ := structpb.NewStruct(map[string]any{"path": "a.txt", "n": 1.5, "l": []any{nil, true, "x"}, "o": map[string]any{"k": 1e300}})
	seed(&toolgatev1.RunToolRequest{RequestId: "r-1", ToolId: "workspace.readFile", Args: args})
	numbers, _ := structpb.NewStruct(map[string]any{"n": []any{1e21, 1e20, 1e-6, 1e-7, 9.999999e-7, -0.0, 5e-324, math.MaxFloat64,
		123456789012345678.0, 0.1, -2.5e-100, 1e100}, "e": []any{}, "m": map[string]any{}})
	seed(&toolgatev1.RunToolRequest{RequestId: "r-3", ToolId: "t", Args: numbers})
	seed(&toolgatev1.RunToolRequest{RequestId: "../x", ToolId: "t"})
	seed(&toolgatev1.RunToolRequest{RequestId: "r:2", ToolId: "t", Ctx: &toolgatev1.RunContext{RunId: "a", PolicyRef: "p"}})
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})

	f.Fuzz(func(t *testing.T, wire []byte) {
		var req toolgatev1.RunToolRequest
		if err := proto.Unmarshal(wire, &req); err != nil {
			if msg := describeDecodeError(wire, err); msg == "" {
				t.Fatal("empty decode error message")
			}
			return
		}
		c, err := parseRequest(&req)
		if err != nil {
			if _, ok := err.(*invalidArgument); !ok {
				t.Fatalf("validation error of unexpected type %T: %v", err, err)
			}
			return
		}
		if !requestIDPattern.MatchString(c.RequestID) || strings.ContainsAny(c.RequestID, "/\\") {
			t.Fatalf("accepted request id %q", c.RequestID)
		}
		if len(c.Args) > maxArgsBytes || !json.Valid(c.Args) {
			t.Fatalf("accepted args that are too large or not JSON: %d bytes", len(c.Args))
		}
		h1, err := canonicalHash("caller", c)
		if err != nil {
			t.Fatal(err)
		}
		// The canonical form must be stable: re-encoding what it decodes to
		// gives the same hash.
		m, err := decodeArgs(c.Args)
		if err != nil {
			t.Fatal(err)
		}
		// What parseRequest builds directly is what decoding gives.
		if !reflect.DeepEqual(c.decodedArgs, m) {
			t.Fatalf("args built from the Struct\n%#v\ndecoded from %s\n%#v", c.decodedArgs, c.Args, m)
		}
		again, err := respwire.MarshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		c2 := c
		c2.Args = bytes.TrimRight(again, "\n")
		if h2, _ := canonicalHash("caller", c2); h1 != h2 {
			t.Fatalf("canonical hash is not stable: %s vs %s for %s", h1, h2, c.Args)
		}
	})
}
