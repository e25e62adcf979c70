package gateway

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/internal/ownedid"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Attack: a caller claims a request id owned by another (one a front
// door derived for that caller from a run id and turn anyone may know),
// over gRPC and through a door. The claim is refused before anything is
// recorded, and the owner's own call under that id runs.
func TestAnotherCallersOwnedRequestIDIsRefusedBeforeItIsClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	args := map[string]any{"path": "a.txt", "content": "x"}
	agents := ownedid.New("agent", "run:turn:0")
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"over gRPC", func() error {
			_, err := e.call(context.Background(), agents, "workspace.createFile", args)
			return err
		}},
		{"through a door", func() error {
			_, err := e.gw.Run(context.Background(), "bob", Call{FrontDoor: "agent_spaces", Request: &toolgatev1.RunToolRequest{
				RequestId: agents, ToolId: "workspace.createFile", Args: mustStruct(t, args)}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.run(), codes.InvalidArgument, "belong to the caller whose tag they carry")
			if names := e.artifactNames(agents); len(names) != 0 {
				t.Fatalf("the refused claim recorded %v", names)
			}
		})
	}
	resp, err := e.gw.Run(context.Background(), "agent", Call{FrontDoor: "agent_spaces", Request: &toolgatev1.RunToolRequest{
		RequestId: agents, ToolId: "workspace.createFile", Args: mustStruct(t, args)}})
	if err != nil || resp.GetPolicyCheck().GetDecision() != "allow" {
		t.Fatalf("the owner's call: %v %v", resp, err)
	}
	// The anonymous caller's own owned ids are its own.
	e.mustCall(ownedid.New(AnonymousCaller, "run:turn:1"), "workspace.createFile", map[string]any{"path": "b.txt", "content": "x"})
}
