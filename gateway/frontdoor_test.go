package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// permitAll lets every caller run every tool.
const permitAll = `
@id("allow_all")
@reason("tests may run anything")
permit (principal, action, resource);
`

// fixedClock is a clock that never moves, so two gateways write the same
// bytes for the same call.
func fixedClock() time.Time { return time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC) }

// doorEnv is a gateway with a fixed clock and a fake driver whose result
// never varies.
func doorEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": permitAll},
		extra:    map[string]drivers.Driver{"fake": &countingDriver{out: drivers.Result{Stdout: "hello\n", Data: map[string]any{"n": 1}}}},
		now:      fixedClock,
	})
}

func doorRequest(t *testing.T, id string) *toolgatev1.RunToolRequest {
	return &toolgatev1.RunToolRequest{
		RequestId: id, ToolId: "fake.run", Args: mustStruct(t, map[string]any{"b": 2.5, "a": "x"}),
		Ctx: &toolgatev1.RunContext{RunId: "run-1", StepId: "step-1"},
	}
}

// withoutFrontDoor drops request.json's front_door and re-encodes it.
func withoutFrontDoor(t *testing.T, b []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "front_door")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunRecordsTheFrontDoorAndNothingElse(t *testing.T) {
	t.Parallel()
	grpcEnv, doorGW := doorEnv(t), doorEnv(t)
	const id = "same-call-1"
	viaGRPC, err := grpcEnv.client.RunTool(context.Background(), doorRequest(t, id))
	if err != nil {
		t.Fatal(err)
	}
	viaDoor, err := doorGW.gw.Run(context.Background(), AnonymousCaller, Call{FrontDoor: "tpmjs", Request: doorRequest(t, id)})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(viaGRPC, viaDoor) {
		t.Errorf("the door's answer differs from RunTool's:\ngrpc: %v\ndoor: %v", viaGRPC, viaDoor)
	}
	grpcReq := parseRequestJSON(t, grpcEnv.artifact(id, evidence.ArtifactRequest))
	doorReq := parseRequestJSON(t, doorGW.artifact(id, evidence.ArtifactRequest))
	if grpcReq.FrontDoor != "" || doorReq.FrontDoor != "tpmjs" {
		t.Errorf("front_door = %q over gRPC and %q through the door, want \"\" and \"tpmjs\"", grpcReq.FrontDoor, doorReq.FrontDoor)
	}
	if grpcReq.CanonicalRequestHash != doorReq.CanonicalRequestHash {
		t.Errorf("canonical hash %s over gRPC, %s through the door", grpcReq.CanonicalRequestHash, doorReq.CanonicalRequestHash)
	}
	g, d := grpcEnv.artifact(id, evidence.ArtifactRequest), doorGW.artifact(id, evidence.ArtifactRequest)
	if !bytes.Equal(withoutFrontDoor(t, g), withoutFrontDoor(t, d)) {
		t.Errorf("request.json differs beyond front_door:\ngrpc: %s\ndoor: %s", g, d)
	}
	names := grpcEnv.artifactNames(id)
	if got := doorGW.artifactNames(id); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("artifacts %v over gRPC, %v through the door", names, got)
	}
	for _, name := range names {
		if name == evidence.ArtifactRequest || name == evidence.ArtifactManifest {
			continue
		}
		if g, d := grpcEnv.artifact(id, name), doorGW.artifact(id, name); !bytes.Equal(g, d) {
			t.Errorf("%s differs:\ngrpc: %s\ndoor: %s", name, g, d)
		}
	}
	doorGW.checkReplyIsStored(id, viaDoor)

	// A retry over gRPC is the same request: it replays the door's answer.
	replay, err := doorGW.client.RunTool(context.Background(), doorRequest(t, id))
	if err != nil || !proto.Equal(replay, viaDoor) {
		t.Errorf("a gRPC retry of the door's call: %v, %v; want the door's answer replayed", replay, err)
	}
}

func parseRequestJSON(t *testing.T, b []byte) evidence.RequestRecord {
	t.Helper()
	r, err := evidence.ParseRequestRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRequestJSONUnchangedWithoutFrontDoor pins the bytes of a gRPC call's
// request.json: adding front doors must not change what every existing
// verifier and reader of the evidence sees.
func TestRequestJSONUnchangedWithoutFrontDoor(t *testing.T) {
	t.Parallel()
	e := doorEnv(t)
	if _, err := e.client.RunTool(context.Background(), doorRequest(t, "golden-1")); err != nil {
		t.Fatal(err)
	}
	got := e.artifact("golden-1", evidence.ArtifactRequest)
	want, err := os.ReadFile(filepath.Join("testdata", "request_grpc.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("request.json changed:\ngot:  %s\nwant: %s", got, want)
	}
	if bytes.Contains(got, []byte("front_door")) {
		t.Errorf("a gRPC call's request.json names a front door: %s", got)
	}
}

func TestRunRefusesABadFrontDoorName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, door string }{
		{"a capital letter is refused", "TPMJS"},
		{"a leading digit is refused", "1door"},
		{"a dash is refused", "agent-spaces"},
		{"a quote cannot smuggle JSON into request.json", `tpmjs","caller":"root`},
		{"a slash cannot name a path", "../../evidence"},
		{"a dot cannot name a path", "tpmjs.door"},
		{"white space is refused", "tpmjs door"},
		{"a newline cannot forge a log line", "tpmjs\nlevel=ERROR"},
		{"a NUL byte is refused", "tpmjs\x00"},
		{"33 characters are too many", "a" + strings.Repeat("b", 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := doorEnv(t)
			id := "bad-door-1"
			_, err := e.gw.Run(context.Background(), AnonymousCaller, Call{FrontDoor: tc.door, Request: doorRequest(t, id)})
			wantCode(t, err, codes.InvalidArgument, "front door")
			if names := e.artifactNames(id); len(names) != 0 {
				t.Errorf("a refused call left evidence: %v", names)
			}
		})
	}
	t.Run("32 characters are enough", func(t *testing.T) {
		t.Parallel()
		e := doorEnv(t)
		door := "a" + strings.Repeat("b", 31)
		if _, err := e.gw.Run(context.Background(), AnonymousCaller, Call{FrontDoor: door, Request: doorRequest(t, "ok-door-1")}); err != nil {
			t.Fatal(err)
		}
		if got := parseRequestJSON(t, e.artifact("ok-door-1", evidence.ArtifactRequest)).FrontDoor; got != door {
			t.Errorf("front_door = %q, want %q", got, door)
		}
	})
}

func TestRunRefusesAMissingRequestOrCaller(t *testing.T) {
	t.Parallel()
	e := doorEnv(t)
	_, err := e.gw.Run(context.Background(), AnonymousCaller, Call{FrontDoor: "tpmjs"})
	wantCode(t, err, codes.InvalidArgument, "request")
	_, err = e.gw.Run(context.Background(), "", Call{FrontDoor: "tpmjs", Request: doorRequest(t, "no-caller-1")})
	wantCode(t, err, codes.Unauthenticated, "caller")
	if names := e.artifactNames("no-caller-1"); len(names) != 0 {
		t.Errorf("a call without a caller left evidence: %v", names)
	}
}

// suggestionPolicy denies curl with a suggestion and allows the rest.
const suggestionPolicy = `
@id("allow_workspace") permit (principal, action, resource in Driver::"workspace");
@id("no_curl") @reason("network tools are not allowed") @suggestion("use the fetch tool instead")
forbid (principal, action == Action::"RunTool", resource == Tool::"workspace.shell")
when { context.args has command && context.args.command like "curl*" };
`

func TestSuggestionIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{policies: map[string]string{"policy.default.cedar": suggestionPolicy}})
	resp := e.mustCall("curl-1", "workspace.shell", map[string]any{"command": "curl https://example.com"})
	if pc := resp.GetPolicyCheck(); pc.GetDecision() != "deny" || pc.GetRuleId() != "no_curl" || pc.GetSuggestion() != "use the fetch tool instead" {
		t.Errorf("policy_check %v, want a deny by no_curl with its suggestion", pc)
	}
	decision := decodeJSON(t, e.artifact("curl-1", evidence.ArtifactPolicyDecision))
	if decision["suggestion"] != "use the fetch tool instead" {
		t.Errorf("policy_decision.json suggestion = %v", decision["suggestion"])
	}
	stored := decodeJSON(t, e.artifact("curl-1", evidence.ArtifactResponse))
	if pc, _ := stored["policy_check"].(map[string]any); pc["suggestion"] != "use the fetch tool instead" {
		t.Errorf("response.json policy_check = %v", stored["policy_check"])
	}
	e.checkReplyIsStored("curl-1", resp)
	replay := e.mustCall("curl-1", "workspace.shell", map[string]any{"command": "curl https://example.com"})
	if !proto.Equal(replay, resp) {
		t.Errorf("the replay lost the suggestion: %v", replay)
	}

	// A rule without one leaves both records as they were.
	e.mustCall("ls-1", "workspace.readFile", map[string]any{"path": "missing.txt"})
	for _, name := range []string{evidence.ArtifactPolicyDecision, evidence.ArtifactResponse} {
		if b := e.artifact("ls-1", name); bytes.Contains(b, []byte("suggestion")) {
			t.Errorf("%s of a rule without @suggestion names one: %s", name, b)
		}
	}
}
