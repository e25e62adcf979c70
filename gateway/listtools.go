package gateway

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/internal/ident"
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
	return g.ListToolsAs(ctx, caller, nil, req)
}

// ListToolsAs is ListTools for a caller a front door authenticated: the
// same query, the same policy filter, the same answer. identity, when the
// door authenticated caller by a token (nil otherwise), adds its groups
// and roles to what Cedar sees.
func (g *Gateway) ListToolsAs(ctx context.Context, caller string, identity *Identity, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	if caller == "" {
		return nil, status.Error(codes.Unauthenticated, "caller: missing; authenticate before ListToolsAs")
	}
	if err := ident.ValidatePrintable(req.GetQuery(), maxToolIDBytes); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "query: %v", err)
	}
	attrs := g.callerAttrs(caller, identity)
	policyRef, listed, err := g.listScope(caller, attrs, req.GetPolicyRef())
	if err != nil {
		return nil, err
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
	resp := &toolgatev1.ListToolsResponse{}
	if !listed {
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
		if !t.matches(id, req.GetQuery()) || !g.mayList(ctx, caller, attrs, policyRef, id, t) {
			continue
		}
		resp.Tools = append(resp.Tools, &toolgatev1.ToolInfo{
			ToolId: id, Description: t.Description, Driver: t.Driver, Tags: t.Tags,
		})
	}
	return resp, nil
}

// listScope checks the policy_ref a listing names and returns the set it
// means. listed is false when the caller may not pick that set: every call
// under it would be denied, so no tool is listed.
func (g *Gateway) listScope(caller string, attrs policy.CallerAttributes, policyRef string) (ref string, listed bool, err error) {
	if err := ident.ValidatePrintable(policyRef, maxCtxFieldSize); err != nil {
		return "", false, status.Errorf(codes.InvalidArgument, "policy_ref: %v", err)
	}
	if policyRef == "" {
		policyRef = defaultPolicy
	}
	_, listed = g.selection.allows(caller, attrs, policyRef)
	return policyRef, listed, nil
}

// mayList decides whether catalog tool id is listed for caller: whether a
// call of it with empty arguments could be allowed. A rule about arguments
// can still deny the real call; a call that needs approval could still be
// allowed, so it is listed.
func (g *Gateway) mayList(ctx context.Context, caller string, attrs policy.CallerAttributes, policyRef, id string, t Tool) bool {
	d := g.decider.Decide(ctx, policy.Request{
		Caller: caller, CallerAttrs: attrs, Action: policy.ActionRunTool, ToolID: id, Driver: t.Driver,
		Tool: t.attributes(), PolicyRef: policyRef, Args: map[string]any{},
	})
	return d.Allow || d.ApprovalRequired
}
