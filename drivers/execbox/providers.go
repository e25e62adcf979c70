package execbox

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/drivers"
)

// defaultNamespace holds the tools whose id has no namespace part.
const defaultNamespace = "tools"

// maxTypeComment bounds a tool description quoted in a provider's types.
const maxTypeComment = 200

// maxDescription bounds a tool description in a provider manifest.
const maxDescription = 4 << 10

// Provider manifests as the runner receives them in execute.
type (
	providerManifest struct {
		Name  string                  `json:"name"`
		Tools map[string]toolManifest `json:"tools"`
		Types string                  `json:"types"`
	}
	toolManifest struct {
		SafeName     string `json:"safeName"`
		OriginalName string `json:"originalName"`
		Description  string `json:"description,omitempty"`
	}
)

// toolEntry is one tool as guest code sees it.
type toolEntry struct {
	toolID      string
	description string
	// namespace is the id's namespace as written in the catalog ("tools"
	// when the id has none); provider and safeName are the guest-visible
	// identifiers.
	namespace, provider, safeName string
}

// mapTools gives every tool a guest-visible provider and tool name. The
// mapping depends only on the set of tool ids: tools are taken in id
// order, a namespace keeps the provider name it was first given, and a name
// already taken gets the first free suffix _2, _3, … So the same catalog
// always yields the same names, and no two tools share one.
func mapTools(infos []drivers.ToolInfo) []toolEntry {
	infos = slices.Clone(infos)
	slices.SortStableFunc(infos, func(a, b drivers.ToolInfo) int { return strings.Compare(a.ID, b.ID) })
	infos = slices.CompactFunc(infos, func(a, b drivers.ToolInfo) bool { return a.ID == b.ID })

	providerOf := map[string]string{}          // namespace → provider
	providersTaken := map[string]bool{}        // provider names in use
	toolsTaken := map[string]map[string]bool{} // provider → safe names in use
	entries := make([]toolEntry, 0, len(infos))
	for _, info := range infos {
		ns, rest, found := strings.Cut(info.ID, ".")
		if !found {
			ns, rest = defaultNamespace, info.ID
		} else if ns == "" {
			ns = defaultNamespace
		}
		provider, ok := providerOf[ns]
		if !ok {
			provider = unique(identifier(ns, true), providersTaken)
			providerOf[ns] = provider
			toolsTaken[provider] = map[string]bool{}
		}
		entries = append(entries, toolEntry{
			toolID:      info.ID,
			description: info.Description,
			namespace:   ns,
			provider:    provider,
			safeName:    unique(identifier(rest, false), toolsTaken[provider]),
		})
	}
	return entries
}

// unique returns name, or name with the first free suffix _2, _3, …, and
// marks the result as taken.
func unique(name string, taken map[string]bool) string {
	candidate := name
	for i := 2; taken[candidate]; i++ {
		candidate = name + "_" + strconv.Itoa(i)
	}
	taken[candidate] = true
	return candidate
}

// identifier turns s into a JavaScript identifier that is safe both as a
// global (global is true: a provider namespace) and as a property and
// function name in a TypeScript namespace declaration: only ASCII letters,
// digits and '_', never starting with a digit, never a reserved word, and
// never shadowing a global guest code relies on.
func identifier(s string, global bool) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 && (r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	id := b.String()
	if id == "" || id[0] >= '0' && id[0] <= '9' {
		id = "_" + id
	}
	if reservedWord(id) || global && guestGlobal(id) || !global && objectProperty(id) {
		id += "_"
	}
	return id
}

// reservedWord reports whether id is reserved in JavaScript or TypeScript
// declarations, or is one of the literal-like globals that cannot be
// rebound.
func reservedWord(id string) bool {
	switch id {
	case "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete",
		"do", "else", "enum", "export", "extends", "false", "finally", "for", "function", "if",
		"import", "in", "instanceof", "new", "null", "return", "super", "switch", "this", "throw",
		"true", "try", "typeof", "var", "void", "while", "with", "yield", "let", "static",
		"implements", "interface", "package", "private", "protected", "public", "await", "async",
		"arguments", "eval", "undefined", "NaN", "Infinity", "declare", "namespace", "module",
		"type", "of", "as", "any", "unknown", "never":
		return true
	}
	return false
}

// guestGlobal reports whether a provider named id would shadow a global
// that guest code or the runner's own prelude uses.
func guestGlobal(id string) bool {
	switch id {
	case "globalThis", "console", "JSON", "Math", "Object", "Array", "Promise", "Error", "String",
		"Number", "Boolean", "Symbol", "Date", "RegExp", "Map", "Set", "WeakMap", "WeakSet",
		"Reflect", "Proxy", "Function", "BigInt", "TypeError", "RangeError", "SyntaxError",
		"setTimeout", "clearTimeout", "queueMicrotask":
		return true
	}
	return false
}

// objectProperty reports whether a tool named id would collide with a
// property every plain JavaScript object already has.
func objectProperty(id string) bool {
	switch id {
	case "__proto__", "constructor", "prototype", "hasOwnProperty", "isPrototypeOf",
		"propertyIsEnumerable", "toLocaleString", "toString", "valueOf",
		"__defineGetter__", "__defineSetter__", "__lookupGetter__", "__lookupSetter__":
		return true
	}
	return false
}

// catalog is what one execution offers to guest code.
type catalog struct {
	entries   []toolEntry // the offered tools, in id order
	manifests []providerManifest
	byName    map[[2]string]string // {provider, safe name} → tool id
}

// buildCatalog offers the tools of infos, restricted to the providers named
// in only unless all is set. A name in only may be the guest-visible
// provider name or the namespace as written in the tool ids; a name that
// matches nothing is an error.
func buildCatalog(infos []drivers.ToolInfo, only []string, all bool) (catalog, error) {
	entries := mapTools(infos)
	if !all {
		wanted := map[string]bool{}
		for _, name := range only {
			if !slices.ContainsFunc(entries, func(e toolEntry) bool { return e.provider == name || e.namespace == name }) {
				return catalog{}, fmt.Errorf("args.providers: unknown provider %q (%s)", cleanName(name), offeredProviders(entries))
			}
			wanted[name] = true
		}
		entries = slices.DeleteFunc(entries, func(e toolEntry) bool { return !wanted[e.provider] && !wanted[e.namespace] })
	}

	c := catalog{entries: entries, byName: make(map[[2]string]string, len(entries))}
	var current *providerManifest
	var types strings.Builder
	flush := func() {
		if current != nil {
			types.WriteString("}\n")
			current.Types = types.String()
			c.manifests = append(c.manifests, *current)
		}
	}
	// Entries of one provider are not necessarily adjacent in id order
	// ("a-b.x" sorts between "a.x" and "a.y" while both "a-b" and "a"
	// keep their own providers), so group them first.
	grouped := slices.Clone(entries)
	slices.SortStableFunc(grouped, func(a, b toolEntry) int { return strings.Compare(a.provider, b.provider) })
	for _, e := range grouped {
		if current == nil || current.Name != e.provider {
			flush()
			current = &providerManifest{Name: e.provider, Tools: map[string]toolManifest{}}
			types.Reset()
			fmt.Fprintf(&types, "declare namespace %s {\n", e.provider)
		}
		current.Tools[e.safeName] = toolManifest{
			SafeName:     e.safeName,
			OriginalName: e.toolID,
			Description:  cleanText(e.description, maxDescription),
		}
		fmt.Fprintf(&types, "  /** %s */\n  function %s(input?: unknown): Promise<unknown>;\n", typeComment(e), e.safeName)
		c.byName[[2]string{e.provider, e.safeName}] = e.toolID
	}
	flush()
	if c.manifests == nil {
		c.manifests = []providerManifest{}
	}
	return c, nil
}

// offeredProviders lists the provider names for an error message.
func offeredProviders(entries []toolEntry) string {
	var names []string
	for _, e := range entries {
		if !slices.Contains(names, e.provider) {
			names = append(names, e.provider)
		}
	}
	if len(names) == 0 {
		return "no tools are offered"
	}
	if len(names) > 10 {
		return "offered: " + strings.Join(names[:10], ", ") + ", …"
	}
	return "offered: " + strings.Join(names, ", ")
}

// typeComment is the doc comment of a tool in its provider's declaration:
// the tool id and the start of its description, on one line and unable to
// end the comment early.
func typeComment(e toolEntry) string {
	text := e.toolID
	if e.description != "" {
		text += ": " + e.description
	}
	text = strings.Join(strings.Fields(cleanText(text, maxTypeComment)), " ")
	return strings.ReplaceAll(text, "*/", "*\\/")
}
