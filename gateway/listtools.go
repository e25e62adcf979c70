package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Limits of ListTools answers.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// ListTools implements the ToolGateway service: the catalog's tools that
// match the query and that policy could allow this caller to run. Each tool
// is decided as a RunTool call with empty arguments; a rule about arguments
// can still deny the real call.
func (g *Gateway) ListTools(ctx context.Context, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	caller, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return g.ListToolsAs(ctx, caller, req)
}

// ListToolsAs is ListTools for a caller a front door authenticated: the
// same query, the same policy filter, the same answer.
func (g *Gateway) ListToolsAs(ctx context.Context, caller string, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	if caller == "" {
		return nil, status.Error(codes.Unauthenticated, "caller: missing; authenticate before ListToolsAs")
	}
	if err := validatePrintable(req.GetQuery(), maxToolIDBytes); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "query: %v", err)
	}
	if err := validatePrintable(req.GetPolicyRef(), maxCtxFieldSize); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "policy_ref: %v", err)
	}
	limit := int(req.GetLimit())
	switch {
	case limit < 0:
		return nil, status.Error(codes.InvalidArgument, "limit: must not be negative")
	case limit == 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		limit = maxListLimit
	}
	policyRef := req.GetPolicyRef()
	if policyRef == "" {
		policyRef = defaultPolicy
	}
	resp := &toolgatev1.ListToolsResponse{}
	attrs := g.auth.Attributes(caller)
	if _, ok := g.selection.allows(caller, attrs, policyRef); !ok {
		// Every call under this set would be denied, so no tool is listed.
		return resp, nil
	}
	for _, id := range g.catalogIDs() {
		if len(resp.Tools) == limit {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		t := g.tools[id]
		if !t.matches(id, req.GetQuery()) {
			continue
		}
		d := g.decider.Decide(ctx, policy.Request{
			Caller: caller, CallerAttrs: attrs, Action: policy.ActionRunTool, ToolID: id, Driver: t.Driver,
			Tool: t.attributes(), PolicyRef: policyRef, Args: map[string]any{},
		})
		if !d.Allow && !d.ApprovalRequired {
			// A call that needs approval could still be allowed.
			continue
		}
		resp.Tools = append(resp.Tools, &toolgatev1.ToolInfo{
			ToolId: id, Description: t.Description, Driver: t.Driver, Tags: t.Tags,
		})
	}
	return resp, nil
}
