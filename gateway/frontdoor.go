package gateway

import (
	"context"
	"encoding/json"
	"path"
	"slices"

	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/internal/ident"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// frontDoorPattern bounds a front door's name. It is written into
// request.json and may name log fields and folders, so it is kept to a
// plain identifier: no quote, slash, dot or space can get through.
const frontDoorPattern = ident.Word

// CatalogEntry is one catalog tool as a front door may show it: what a
// registry listing needs, and never the values of the tool's environment
// (Tool.Env holds the gateway's secrets).
type CatalogEntry struct {
	ID     string `json:"id"`
	Driver string `json:"driver"`
	// Target is the driver's name for the tool: a TPMJS export name, a
	// workspace operation.
	Target string `json:"target"`
	// Package and Version are a packaged tool's (TPMJS); empty otherwise.
	Package string `json:"package,omitempty"`
	Version string `json:"version,omitempty"`
	// Description and Tags are ListTools'.
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	// CallerEnv names the variables a caller may set in args._env; the
	// names only.
	CallerEnv []string `json:"caller_env,omitempty"`
	// InputSchema is a JSON Schema (2020-12, "type":"object") of the
	// tool's arguments, as advice for a model: the gateway validates
	// arguments its own way. Never nil.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Hints say what the tool does to the world, from its tags and its
	// driver; a nil field is unknown.
	Hints ToolHints `json:"-"`
}

// Catalog returns every catalog tool, sorted by id, whether or not any
// caller may run it: a door maps its protocol's names onto tool ids with
// it, and filters what it lists through ListToolsAs. Registry ids are not
// listed; there is no end to them.
func (g *Gateway) Catalog() []CatalogEntry {
	ids := g.catalogIDs()
	out := make([]CatalogEntry, len(ids))
	for i, id := range ids {
		t := g.tools[id]
		out[i] = CatalogEntry{
			ID: id, Driver: t.Driver, Target: t.Target, Package: t.Package, Version: t.Version,
			Description: t.Description, Tags: slices.Clone(t.Tags), CallerEnv: slices.Clone(t.CallerEnv),
			InputSchema: g.inputSchema(id, t), Hints: g.toolHints(t),
		}
	}
	return out
}

// Caller returns the caller the gRPC transport authenticated for a call
// on the gateway's server, or authenticates ctx's metadata itself: the
// caller of a gRPC method a front door registers there.
func (g *Gateway) Caller(ctx context.Context) (string, error) {
	return g.authenticate(ctx)
}

// DriverHealth reports what each driver last knew of its downstream, by
// driver name. It never contacts a downstream: drivers that implement
// drivers.HealthReporter answer from cached state, and the others are
// reported healthy with their engine name, since nothing is known against
// them until a call fails.
func (g *Gateway) DriverHealth() map[string]drivers.Health {
	out := make(map[string]drivers.Health, len(g.drivers))
	for name, d := range g.drivers {
		if r, ok := d.(drivers.HealthReporter); ok {
			out[name] = r.Health()
			continue
		}
		out[name] = drivers.Health{Healthy: true, Engine: d.Engine(), Detail: "the driver reports no health"}
	}
	return out
}

// Authenticator returns the gateway's authenticator: a front door checks
// a key its protocol carries with CallerForKey, and asks Enabled whether
// callers are anonymous.
func (g *Gateway) Authenticator() *callerauth.Authenticator { return g.auth }

// Telemetry is the gateway's telemetry (nil when it records nothing): a
// front door starts its own protocol's span with it, the parent of the
// call's, through the one pipeline.
func (g *Gateway) Telemetry() *telemetry.Telemetry { return g.telemetry }

// CallerForKey is g.Authenticator().CallerForKey.
func (g *Gateway) CallerForKey(key string) (string, bool) { return g.auth.CallerForKey(key) }

// telemetryCall describes c for telemetry, with a tool label from a
// bounded set: the catalog's ids, and telemetry.OtherTool for any other.
func (g *Gateway) telemetryCall(c Call) telemetry.Call {
	tc := telemetry.Call{Tool: telemetry.OtherTool, FrontDoor: c.FrontDoor}
	if c.Request != nil {
		if id := c.Request.GetRequestId(); requestIDPattern.MatchString(id) {
			tc.RequestID = id
		}
		if _, ok := g.tools[c.Request.GetToolId()]; ok {
			tc.Tool = c.Request.GetToolId()
		}
	}
	return tc
}

// callResult is how a call ended, for telemetry.
func callResult(resp *toolgatev1.RunToolResponse, err error) telemetry.Result {
	if err != nil || resp == nil {
		return telemetry.Result{Outcome: telemetry.OutcomeError, ErrorType: status.Code(err).String()}
	}
	r := telemetry.Result{
		Decision: resp.GetPolicyCheck().GetDecision(),
		RuleID:   resp.GetPolicyCheck().GetRuleId(),
		Outcome:  telemetry.OutcomeDenied,
	}
	if len(resp.EvidenceRefs) > 0 {
		r.EvidencePrefix = path.Dir(resp.EvidenceRefs[0]) + "/"
	}
	switch tr := resp.GetToolResult(); {
	case tr == nil:
	case tr.GetExitCode() == 0:
		r.Outcome = telemetry.OutcomeRan
	default:
		r.Outcome = telemetry.OutcomeToolError
	}
	return r
}
