package gateway

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/toolgate/toolgate/drivers/tpmjs"
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
	// Env is handed to the tool on every call. Its values come from the
	// gateway's environment and are redacted from all evidence.
	Env map[string]string
	// CallerEnv names the variables a caller may set in args._env.
	CallerEnv []string
}

// callerEnvArg is the argument in which callers pass environment values to
// tools that allow it (ToolConfig.CallerEnv). It is taken out of the
// arguments the tool receives.
const callerEnvArg = "_env"

// attributes returns what Cedar sees of the tool beside its id and driver.
func (t Tool) attributes() policy.ToolAttributes {
	attrs := policy.ToolAttributes{Tags: t.Tags}
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
	for _, name := range sortedKeys(given) {
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

// Registry lets callers name any tool of the TPMJS registry as
// "<package>::<export>", served by one driver at one version.
type Registry struct {
	Driver  string
	Version string // "" means latest
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
	if !ok || tpmjs.ValidatePackageName(pkg) != nil || tpmjs.ValidateExportName(export) != nil {
		return Tool{}, false
	}
	version := g.registry.Version
	if version == "" {
		version = "latest"
	}
	return Tool{Driver: g.registry.Driver, Target: export, Package: pkg, Version: version}, true
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

// inputSchema is the argument schema Catalog shows for tool id.
func (g *Gateway) inputSchema(id string, t Tool) json.RawMessage {
	return openObjectSchema
}
