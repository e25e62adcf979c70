package gateway

import (
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/policy"
)

// Tool is one entry of the gateway's catalog: which driver serves a tool id,
// what to hand it, and what policy and discovery know about it.
type Tool struct {
	// Driver is the name of a driver in Options.Drivers.
	Driver string
	// Target is handed to the driver as drivers.Call.Target: a workspace
	// operation, or a TPMJS tool's export name.
	Target string
	// Package and Version locate a packaged tool (TPMJS).
	Package, Version string
	// Description and Tags are shown by ListTools; Tags are resource.tags
	// in Cedar.
	Description string
	Tags        []string
	// Labels are added to the session of every dispatched call of the
	// tool (policy.ToolAttributes.Labels).
	Labels []string
	// Env is handed to the tool on every call. Its values come from the
	// gateway's environment and are redacted from all evidence.
	Env map[string]string
	// CallerEnv names the variables a caller may set in args._env.
	CallerEnv []string
	// InputSchema is the configured schema of the tool's arguments
	// (tools.<id>.input_schema, checked by the configuration), or nil.
	InputSchema json.RawMessage
}

// callerEnvArg is the argument in which callers pass environment values to
// tools that allow it (config.ToolConfig.CallerEnv). It is taken out of the
// arguments the tool receives.
const callerEnvArg = "_env"

// attributes returns what Cedar sees of the tool beside its id and driver.
func (t Tool) attributes() policy.ToolAttributes {
	attrs := policy.ToolAttributes{Tags: t.Tags, Labels: t.Labels}
	if t.Package != "" {
		attrs.Package, attrs.Export, attrs.Version = t.Package, t.Target, t.Version
	}
	return attrs
}

// env splits the caller's environment out of args. It returns the
// environment the tool gets (the tool's own, plus what the caller may set),
// the caller's part of it (secrets of the call, see callerSecrets), and the
// arguments without callerEnvArg. A tool that allows no caller environment
// receives args unchanged.
func (t Tool) env(args map[string]any) (env, callerEnv map[string]string, params map[string]any, err error) {
	params = args
	raw, present := args[callerEnvArg]
	if len(t.CallerEnv) == 0 || !present {
		return t.Env, nil, params, nil
	}
	given, ok := raw.(map[string]any)
	if !ok {
		return nil, nil, nil, invalidf("args.%s: want an object of strings", callerEnvArg)
	}
	env = make(map[string]string, len(t.Env)+len(given))
	callerEnv = make(map[string]string, len(given))
	for k, v := range t.Env {
		env[k] = v
	}
	for _, name := range slices.Sorted(maps.Keys(given)) {
		value, ok := given[name].(string)
		if !ok {
			return nil, nil, nil, invalidf("args.%s.%s: want a string", callerEnvArg, name)
		}
		if !slices.Contains(t.CallerEnv, name) {
			return nil, nil, nil, invalidf("args.%s.%s: this tool lets callers set only %v", callerEnvArg, name, t.CallerEnv)
		}
		env[name] = value
		callerEnv[name] = value
	}
	params = make(map[string]any, len(args)-1)
	for k, v := range args {
		if k != callerEnvArg {
			params[k] = v
		}
	}
	return env, callerEnv, params, nil
}

// Registry lets callers name any tool of a package registry as
// "<package>::<export>", served by one driver at one version.
type Registry struct {
	Driver  string
	Version string // "" means latest
	// Bind checks a registry id's package and export as the driver's
	// section checks a tools entry (drivers.ToolBinder) and says what it
	// binds to; nil refuses every registry id.
	Bind func(drivers.ToolSpec) (drivers.Binding, error)
}

// lookupTool finds the catalog entry for a tool id, or the registry tool it
// names.
func (g *Gateway) lookupTool(id string) (Tool, bool) {
	if t, ok := g.tools[id]; ok {
		return t, true
	}
	if g.registry == nil {
		return Tool{}, false
	}
	// npm package names cannot contain "::", so the split is unambiguous.
	pkg, export, ok := strings.Cut(id, "::")
	if !ok || g.registry.Bind == nil {
		return Tool{}, false
	}
	version := g.registry.Version
	if version == "" {
		version = "latest"
	}
	b, err := g.registry.Bind(drivers.ToolSpec{Package: pkg, Export: export, Version: version})
	if err != nil {
		return Tool{}, false
	}
	return Tool{Driver: g.registry.Driver, Target: b.Target, Package: b.Package, Version: b.Version}, true
}

// catalogIDs returns the catalog's tool ids, sorted.
func (g *Gateway) catalogIDs() []string {
	ids := make([]string, 0, len(g.tools))
	for id := range g.tools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// matches reports whether a catalog entry matches a discovery query: every
// word of the query appears, case-insensitively, in the id, the target
// (a TPMJS export name, which registry clients search by), the
// description, a tag or the package.
func (t Tool) matches(id, query string) bool {
	hay := strings.ToLower(strings.Join(append([]string{id, t.Target, t.Description, t.Package, t.Driver}, t.Tags...), " "))
	for _, word := range strings.Fields(strings.ToLower(query)) {
		if !strings.Contains(hay, word) {
			return false
		}
	}
	return true
}

// openObjectSchema is the schema of a tool whose arguments nothing
// describes: any object.
var openObjectSchema = json.RawMessage(`{"type":"object"}`)

// inputSchema is the argument schema Catalog shows for tool id: the
// configured one, else its driver's, else any object; with an "_env"
// property when callers may set environment variables.
func (g *Gateway) inputSchema(id string, t Tool) json.RawMessage {
	schema := t.InputSchema
	if schema == nil {
		schema = g.describe(t).InputSchema
	}
	if schema == nil || config.CheckSchemaJSON(schema) != nil {
		if schema != nil {
			g.log.Warn("catalog: the driver's input schema of a tool is not an object schema; showing any object",
				"tool", id, "driver", t.Driver)
		}
		schema = openObjectSchema
	}
	if len(t.CallerEnv) == 0 {
		return schema
	}
	return withEnvProperty(schema, t.CallerEnv)
}

// withEnvProperty adds the "_env" argument to an object schema: an object
// of the named strings.
func withEnvProperty(schema json.RawMessage, names []string) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil {
		return schema
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	envProps := make(map[string]any, len(names))
	for _, n := range names {
		envProps[n] = map[string]any{"type": "string"}
	}
	props[callerEnvArg] = map[string]any{
		"type": "object", "properties": envProps, "additionalProperties": false,
		"description": "environment variables of the call",
	}
	m["properties"] = props
	out, err := json.Marshal(m)
	if err != nil {
		return schema
	}
	return out
}

// ToolHints say what a tool does to the world, for clients that tell a
// model (MCP annotations). A nil field is unknown.
type ToolHints struct {
	ReadOnly, Destructive, Idempotent, OpenWorld *bool
}

// describe is what the tool's driver knows of its target
// (drivers.Describer), the zero Target when nothing.
func (g *Gateway) describe(t Tool) drivers.Target {
	if d, ok := g.drivers[t.Driver].(drivers.Describer); ok {
		return d.Describe(t.Target)
	}
	return drivers.Target{}
}

// toolHints are a tool's hints: its driver's knowledge of the target
// first, then its tags, which a catalog author writes and so override.
func (g *Gateway) toolHints(t Tool) ToolHints {
	var h ToolHints
	yes, no := true, false
	d := g.drivers[t.Driver]
	dh := g.describe(t).Hints
	if dh.ReadOnly {
		h.ReadOnly, h.Destructive = &yes, &no
	}
	if dh.Destructive {
		h.Destructive = &yes
	}
	if s, ok := d.(drivers.Sealed); ok && s.Sealed() {
		h.OpenWorld = &no
	}
	for _, tag := range t.Tags {
		switch tag {
		case "read-only":
			h.ReadOnly, h.Destructive = &yes, &no
		case "destructive":
			h.Destructive = &yes
		case "idempotent":
			h.Idempotent = &yes
		case "open-world", "network":
			h.OpenWorld = &yes
		}
	}
	return h
}
