package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// toolNamePattern is MCP's rule for tool names (2025-11-25 and later):
// 1 to 128 of letters, digits, "_", "-" and ".". A catalog id outside it
// is not served; registry ids ("pkg::export") never are.
var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// descriptionSuffix tells a model, in every description, what stands
// between it and the tool.
const descriptionSuffix = " (Toolgate: Cedar-gated; evidence recorded)"

// principalOf is the caller the plumbing authenticated for ctx's request.
func principalOf(ctx context.Context) (frontdoor.Principal, error) {
	return frontdoor.PrincipalFrom(ctx)
}

// addTools registers the catalog's tools with the SDK server once, and
// the approval tools when configured. Ids MCP cannot name are skipped
// with one warning.
func (d *Door) addTools() error {
	var skipped []string
	for _, e := range d.gw.Catalog() {
		if !toolNamePattern.MatchString(e.ID) {
			skipped = append(skipped, e.ID)
			continue
		}
		t, err := catalogTool(e)
		if err != nil {
			return err
		}
		d.tools[e.ID] = e
		d.srv.AddTool(t, d.callTool)
		if d.announce == nil {
			d.announce = func() { d.srv.AddTool(t, d.callTool) }
		}
	}
	if len(skipped) > 0 {
		d.log.Warn("mcp door: catalog tools not served: their ids are not MCP tool names (1-128 of A-Z a-z 0-9 _ - .)",
			"count", len(skipped), "ids", truncateList(skipped, 10))
	}
	if d.cfg.ApprovalTools {
		return d.addApprovalTools()
	}
	return nil
}

// catalogTool is the MCP description of one catalog tool.
func catalogTool(e gateway.CatalogEntry) (*mcp.Tool, error) {
	schema := e.InputSchema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	var probe struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(schema, &probe); err != nil || probe.Type != "object" {
		// The SDK panics on such a schema; the catalog validates it, so
		// this is a gateway bug, reported rather than served.
		return nil, fmt.Errorf("mcpdoor: tool %s: its input schema is not an object schema", e.ID)
	}
	return &mcp.Tool{
		Name:        e.ID,
		Title:       firstSentence(e.Description),
		Description: strings.TrimSpace(e.Description + descriptionSuffix),
		InputSchema: schema,
		Annotations: annotations(e),
	}, nil
}

// annotations are the catalog's hints (its tags, then what the driver
// knows of its target) as MCP's.
func annotations(e gateway.CatalogEntry) *mcp.ToolAnnotations {
	h := e.Hints
	if h == (gateway.ToolHints{}) {
		// Nothing known: MCP's defaults (not read-only, may destroy,
		// open world) are the safe reading.
		return nil
	}
	a := &mcp.ToolAnnotations{DestructiveHint: h.Destructive, OpenWorldHint: h.OpenWorld}
	if h.ReadOnly != nil {
		a.ReadOnlyHint = *h.ReadOnly
	}
	if h.Idempotent != nil {
		a.IdempotentHint = *h.Idempotent
	}
	return a
}

// firstSentence is the description up to its first ". ", without a
// final "."; "" when that is longer than 120 bytes, too long for a title.
func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSuffix(s, ".")
	if len(s) > 120 {
		return ""
	}
	return s
}

// listTools serves tools/list: the SDK's page of the whole catalog,
// filtered through policy for this caller. The door's own tools stay:
// Cedar decides their calls.
func (d *Door) listTools(ctx context.Context, next mcp.MethodHandler, req mcp.Request) (mcp.Result, error) {
	res, err := next(ctx, "tools/list", req)
	if err != nil {
		return nil, err
	}
	lr, ok := res.(*mcp.ListToolsResult)
	if !ok {
		return nil, fmt.Errorf("mcpdoor: tools/list answered %T", res)
	}
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	var meta map[string]any
	if lreq, ok := req.(*mcp.ListToolsRequest); ok && lreq.Params != nil {
		meta = lreq.Params.Meta
	}
	ref, err := d.policyRef(meta)
	if err != nil {
		return nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	ids := make([]string, 0, len(lr.Tools))
	for _, t := range lr.Tools {
		if !d.doorTools[t.Name] {
			ids = append(ids, t.Name)
		}
	}
	allowed, err := d.gw.ToolsAllowedAs(ctx, p.Caller, p.Identity, ref, ids)
	if err != nil {
		return nil, d.listError(err)
	}
	keep := make(map[string]bool, len(allowed))
	for _, id := range allowed {
		keep[id] = true
	}
	out := *lr
	out.Tools = slices.DeleteFunc(slices.Clone(lr.Tools), func(t *mcp.Tool) bool {
		return !keep[t.Name] && !d.doorTools[t.Name]
	})
	return &out, nil
}

// listError maps a failure to decide a list: a bad policy_ref is the
// caller's, anything else a retryable server error.
func (d *Door) listError(err error) error {
	if isInvalidArgument(err) {
		return rpcError(codeInvalidParams, statusMessage(err), nil)
	}
	d.log.Warn("mcp door: tools/list could not be decided", "err", err)
	return rpcError(codeGatewayUnavailable, "the gateway could not decide the list; retry", map[string]any{"retryable": true})
}

// watchPolicies re-announces the list after each policy reload that
// changed the sets: re-adding one tool is how the SDK sends
// notifications/tools/list_changed to the open subscriptions/listen
// streams.
func (d *Door) watchPolicies(ctx context.Context) {
	changes, unsubscribe := d.gw.SubscribePolicyChanges()
	defer unsubscribe()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			d.announceListChanged()
		}
	}
}

// announceListChanged re-adds one served tool, unchanged.
func (d *Door) announceListChanged() {
	if d.announce == nil {
		d.log.Debug("mcp door: a policy change with no tool to announce it by")
		return
	}
	d.announce()
}

// truncateList is at most n items of list, for a log line.
func truncateList(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(slices.Clone(list[:n]), fmt.Sprintf("… %d more", len(list)-n))
}
