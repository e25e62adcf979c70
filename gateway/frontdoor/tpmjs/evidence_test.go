package tpmjsdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// TestEvidenceIsThatOfRunToolExceptFrontDoor: a call through the door and
// the same call over RunTool record the same request.json but for the
// request id, the time and front_door; and because front_door is outside
// the canonical hash, RunTool with the door's request id is a replay of
// the door's call, not a second run.
func TestEvidenceIsThatOfRunToolExceptFrontDoor(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	url := e.serve(nil)
	params := `{"greeting":"hi","n":12345678901234567890,"f":1.5,"list":[true,null,"x"]}`
	body := `{"packageName":"` + tpmjstest.Package + `","name":"echoTool","version":"1.2.3","params":` + params + `,"env":{}}`
	h := map[string]string{"Authorization": "Bearer " + testKey, "Toolgate-Run-Id": "run-7", "Toolgate-Step-Id": "step-3"}
	for _, id := range []string{"door-1", "same-1"} {
		h["Idempotency-Key"] = id
		if a := do(t, "POST", url+"/execute-tool", body, h); a.body["success"] != true {
			t.Fatalf("door call %s: %s", id, a.raw)
		}
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(params)))
	dec.UseNumber()
	var args map[string]any
	must(t, dec.Decode(&args))
	s, err := structpb.NewStruct(args)
	must(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+testKey))
	run := func(id string) *toolgatev1.RunToolResponse {
		resp, err := e.gw.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: "hello", Args: s,
			Ctx: &toolgatev1.RunContext{RunId: "run-7", StepId: "step-3"}})
		must(t, err)
		return resp
	}
	if !run("grpc-1").GetOk() {
		t.Fatal("the gRPC call failed")
	}
	door, grpc := e.requestJSON("door-1"), e.requestJSON("grpc-1")
	if door["front_door"] != "tpmjs" || grpc["front_door"] != nil {
		t.Fatalf("front_door: door %v, gRPC %v", door["front_door"], grpc["front_door"])
	}
	for _, k := range []string{"request_id", "received_at", "front_door", "canonical_request_hash"} {
		delete(door, k)
		delete(grpc, k)
	}
	if !reflect.DeepEqual(door, grpc) {
		t.Fatalf("request.json differs beyond id, time and front_door:\ndoor %v\ngRPC %v", door, grpc)
	}
	before := e.executions()
	if !run("same-1").GetOk() || e.executions() != before {
		t.Fatalf("RunTool with the door's request id ran again (executions %d → %d)", before, e.executions())
	}
}
