package gateway

import (
	"context"
	"regexp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// frontDoorPattern bounds a front door's name. It is written into
// request.json and may name log fields and folders, so it is kept to a
// plain identifier: no quote, slash, dot or space can get through.
var frontDoorPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Call is one tool call as a front door hands it to the gateway: the
// RunTool request it translated its own protocol into, and the door's name.
type Call struct {
	// FrontDoor names the door ("tpmjs", "agent_spaces"). It must match
	// ^[a-z][a-z0-9_]{0,31}$, or be empty for a plain RunTool call. It is
	// recorded as request.json's front_door and is not part of the
	// canonical request hash, so a retry through another door, or over
	// gRPC, is the same request.
	FrontDoor string
	// Request is the call itself, validated exactly as RunTool validates
	// it.
	Request *toolgatev1.RunToolRequest
}

// Run runs c for caller, who is already authenticated (RunTool by its
// key, a front door by its own protocol's), through RunTool's pipeline:
// admission against limits.max_concurrent_calls, validation, the claim of
// the request id, the decision, the driver and the evidence. Its answers
// and errors are RunTool's, gRPC statuses included, so every door maps
// one set of outcomes onto its protocol.
func (g *Gateway) Run(ctx context.Context, caller string, c Call) (*toolgatev1.RunToolResponse, error) {
	if c.FrontDoor != "" && !frontDoorPattern.MatchString(c.FrontDoor) {
		return nil, status.Errorf(codes.InvalidArgument, "front door %q: must match %s",
			truncateForMessage(c.FrontDoor), frontDoorPattern)
	}
	if caller == "" {
		// Authentication always names someone (AnonymousCaller when it is
		// off): an empty caller is a door that skipped it.
		return nil, status.Error(codes.Unauthenticated, "caller: missing; authenticate before Run")
	}
	if c.Request == nil {
		return nil, status.Error(codes.InvalidArgument, "request: missing")
	}
	if err := g.admitCall(); err != nil {
		return nil, err
	}
	defer g.releaseCall()
	parsed, err := parseRequest(c.Request)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	parsed.FrontDoor = c.FrontDoor
	return g.run(ctx, caller, parsed)
}
