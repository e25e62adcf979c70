package policy

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	schemaast "github.com/cedar-policy/cedar-go/x/exp/schema/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema/resolved"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"github.com/toolgate/toolgate/internal/regularfile"
)

// builtinSchema is the gateway's own model. Every policy is validated
// against it, so a folder without a schema of its own is no longer a folder
// whose rules go unchecked.
//
//go:embed toolgate.cedarschema
var builtinSchema []byte

// builtinSchemaName is how messages name the embedded schema.
const builtinSchemaName = "the gateway's built-in schema"

// Schema returns the gateway's built-in Cedar schema, the model every policy
// is validated against. A folder's toolgate.cedarschema may only add to it.
func Schema() []byte { return bytes.Clone(builtinSchema) }

// loadSchema returns a checker for the built-in schema, extended by the
// folder's toolgate.cedarschema when there is one.
func loadSchema(fsys fs.FS, dir string) (*schemaCheck, error) {
	var base schema.Schema
	base.SetFilename(builtinSchemaName)
	if err := base.UnmarshalCedar(builtinSchema); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	baseResolved, err := base.Resolve()
	if err != nil {
		return nil, fmt.Errorf("policy: %s: %w", builtinSchemaName, err)
	}
	res := baseResolved

	path := filepath.Join(dir, SchemaFile)
	src, err := regularfile.ReadFS(fsys, SchemaFile, MaxPolicyFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	default:
		var extra schema.Schema
		extra.SetFilename(path)
		if err := extra.UnmarshalCedar(src); err != nil {
			// The schema parser's messages already start with path:line:col.
			return nil, err
		}
		merged, err := mergeSchemas(base.AST(), extra.AST())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if res, err = schema.NewSchemaFromAST(merged).Resolve(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if conflicts := extensionConflicts(baseResolved, res); len(conflicts) > 0 {
			return nil, fmt.Errorf("%s: a policy folder's schema may only add to %s: %s",
				path, builtinSchemaName, strings.Join(conflicts, "; "))
		}
	}
	v := validate.New(res)
	if err := checkModel(v); err != nil {
		return nil, fmt.Errorf("%s: the schema does not describe the requests the gateway sends: %w", path, err)
	}
	attrs := make(map[types.String]bool)
	for _, a := range res.Actions {
		if a.AppliesTo != nil {
			for name := range a.AppliesTo.Context {
				attrs[name] = true
			}
		}
	}
	return &schemaCheck{v: v, contextAttrs: attrs}, nil
}

// mergeSchemas returns base with extra's declarations added. A declaration
// of extra that repeats a name of base replaces it here; extensionConflicts
// then checks, once both are resolved, that the replacement only adds.
func mergeSchemas(base, extra *schemaast.Schema) (*schemaast.Schema, error) {
	kinds := func(s *schemaast.Schema) map[schemaast.Ident]string {
		out := map[schemaast.Ident]string{}
		for n := range s.Entities {
			out[n] = "an entity type"
		}
		for n := range s.Enums {
			out[n] = "an enum entity type"
		}
		for n := range s.CommonTypes {
			out[n] = "a common type"
		}
		return out
	}
	baseKinds, extraKinds := kinds(base), kinds(extra)
	var conflicts []string
	for _, n := range sortedIdents(extraKinds) {
		if k, ok := baseKinds[n]; ok && k != extraKinds[n] {
			conflicts = append(conflicts, fmt.Sprintf("%s is %s in %s, %s here", n, k, builtinSchemaName, extraKinds[n]))
		}
	}
	if len(conflicts) > 0 {
		return nil, fmt.Errorf("a policy folder's schema may only add to %s: %s", builtinSchemaName, strings.Join(conflicts, "; "))
	}
	out := &schemaast.Schema{
		Entities:    schemaast.Entities{},
		Enums:       schemaast.Enums{},
		Actions:     schemaast.Actions{},
		CommonTypes: schemaast.CommonTypes{},
		Namespaces:  schemaast.Namespaces{},
	}
	for _, s := range []*schemaast.Schema{base, extra} {
		for n, e := range s.Entities {
			out.Entities[n] = e
		}
		for n, e := range s.Enums {
			out.Enums[n] = e
		}
		for n, a := range s.Actions {
			out.Actions[n] = a
		}
		for n, c := range s.CommonTypes {
			out.CommonTypes[n] = c
		}
		for n, ns := range s.Namespaces {
			out.Namespaces[n] = ns
		}
	}
	return out, nil
}

// extensionConflicts lists what merged removes from or changes in base:
// an entity type must keep its parents, tags and every attribute with its
// type and optionality (it may gain attributes), and an action must stay
// exactly as base declares it. Annotations are documentation and ignored.
func extensionConflicts(base, merged *resolved.Schema) []string {
	var out []string
	for _, name := range sortedKeysOf(base.Entities) {
		be := base.Entities[name]
		me, ok := merged.Entities[name]
		if !ok {
			out = append(out, fmt.Sprintf("entity %s is no longer an entity type", name))
			continue
		}
		if !sameEntityTypes(be.ParentTypes, me.ParentTypes) {
			out = append(out, fmt.Sprintf("entity %s: changes its parent types", name))
		}
		if !sameType(be.Tags, me.Tags) {
			out = append(out, fmt.Sprintf("entity %s: changes its tags", name))
		}
		for _, attr := range sortedKeysOf(be.Shape) {
			ba := be.Shape[attr]
			ma, ok := me.Shape[attr]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("entity %s: drops attribute `%s`", name, attr))
			case ba.Optional != ma.Optional || !sameType(ba.Type, ma.Type):
				out = append(out, fmt.Sprintf("entity %s: changes the type of attribute `%s`", name, attr))
			}
		}
	}
	for _, uid := range sortedKeysOf(base.Actions) {
		ba := base.Actions[uid]
		ma, ok := merged.Actions[uid]
		if !ok || !sameAction(ba, ma) {
			out = append(out, fmt.Sprintf("action %s: declared differently from the gateway's (its principals, resources, context and parents cannot change)", uid))
		}
	}
	return out
}

func sameAction(a, b resolved.Action) bool {
	if !slices.Equal(sortedUIDs(a.Entity.Parents), sortedUIDs(b.Entity.Parents)) {
		return false
	}
	if (a.AppliesTo == nil) != (b.AppliesTo == nil) {
		return false
	}
	if a.AppliesTo == nil {
		return true
	}
	return sameEntityTypes(a.AppliesTo.Principals, b.AppliesTo.Principals) &&
		sameEntityTypes(a.AppliesTo.Resources, b.AppliesTo.Resources) &&
		sameType(a.AppliesTo.Context, b.AppliesTo.Context)
}

// sameType compares two resolved types, ignoring annotations.
func sameType(a, b resolved.IsType) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case resolved.RecordType:
		b, ok := b.(resolved.RecordType)
		if !ok || len(a) != len(b) {
			return false
		}
		for name, aa := range a {
			ba, ok := b[name]
			if !ok || aa.Optional != ba.Optional || !sameType(aa.Type, ba.Type) {
				return false
			}
		}
		return true
	case resolved.SetType:
		b, ok := b.(resolved.SetType)
		return ok && sameType(a.Element, b.Element)
	default:
		// StringType, LongType, BoolType, ExtensionType and EntityType are
		// comparable values.
		return a == b
	}
}

func sameEntityTypes(a, b []types.EntityType) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func sortedUIDs(set types.EntityUIDSet) []string {
	var out []string
	for uid := range set.All() {
		out = append(out, uid.String())
	}
	slices.Sort(out)
	return out
}

func sortedIdents(m map[schemaast.Ident]string) []schemaast.Ident {
	out := make([]schemaast.Ident, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedKeysOf[K interface {
	~string | types.EntityUID
}, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b K) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return out
}
