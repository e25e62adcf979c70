package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/console"
)

// The configuration and command-line references under docs/reference are
// generated from the code: the configuration's types and their doc
// comments, and every command's -h. A change to either that is not
// regenerated fails here; -update rewrites them:
//
//	go test ./cmd/toolgate -run TestReference -update
var updateReference = flag.Bool("update", false, "rewrite docs/reference from the code")

func TestReferenceConfiguration(t *testing.T) {
	t.Parallel()
	checkGenerated(t, "docs/reference/configuration.md", configReference(t))
}

func TestReferenceCommandLine(t *testing.T) {
	t.Parallel()
	checkGenerated(t, "docs/reference/command-line.md", commandReference(t))
}

// checkGenerated compares the file at path (from the repository root) with
// want, or writes want there with -update.
func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	full := filepath.Join("../..", path)
	if *updateReference {
		if err := os.WriteFile(full, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(full)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./cmd/toolgate -run TestReference -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the code generates; regenerate it: go test ./cmd/toolgate -run TestReference -update", path)
	}
}

// commandReference is every command's usage, as -h prints it, the groups'
// listings first.
func commandReference(t *testing.T) []byte {
	var b bytes.Buffer
	b.WriteString("# Command-line reference\n\n")
	b.WriteString("Generated from the code by `go test ./cmd/toolgate -run TestReference -update`; the test command\n")
	b.WriteString("fails when it drifts. Exit codes and how the commands fit together are in\n")
	b.WriteString("[Command line](../operators/command-line.md).\n")
	groups := commandGroups()
	var walk func(path []string)
	walk = func(path []string) {
		name := strings.Join(path, " ")
		if g, ok := groups[name]; ok {
			writeUsage(t, &b, name, append(path[1:], "help"))
			for _, sub := range slices.Sorted(mapKeysOf(g.commands)) {
				if aliasOf(g, sub) != "" {
					continue
				}
				walk(append(slices.Clone(path), sub))
			}
			return
		}
		writeUsage(t, &b, name, append(path[1:], "-h"))
	}
	walk([]string{"toolgate"})
	return b.Bytes()
}

// aliasOf returns the name sub is an alias of in g ("list" of "ls"), or "".
func aliasOf(g group, sub string) string {
	aliases := map[string]string{"list": "ls", "check": "validate"}
	if canonical, ok := aliases[sub]; ok {
		if _, ok := g.commands[canonical]; ok {
			return canonical
		}
	}
	return ""
}

func writeUsage(t *testing.T, b *bytes.Buffer, name string, args []string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, stdio{In: strings.NewReader(""), Out: &out, Err: &errb, Getenv: func(string) string { return "" }})
	if code != exitOK {
		t.Fatalf("%s: exit %d:\n%s", strings.Join(args, " "), code, errb.String())
	}
	fmt.Fprintf(b, "\n## %s\n\n```text\n%s%s```\n", name, out.String(), errb.String())
}

func mapKeysOf[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// configReference is every key of the configuration file, section by
// section, with its type and the doc comment of the field behind it.
func configReference(t *testing.T) []byte {
	docs := newFieldDocs(t)
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Every key of the configuration file, generated from the code by `go test ./cmd/toolgate -run\n")
	b.WriteString("TestReference -update` (the test command fails when it drifts). Every key is optional; an absent\n")
	b.WriteString("key takes its default. A guide with examples is [Configuration](../operators/configuration.md);\n")
	b.WriteString("`toolgate check config FILE` checks a file against these keys.\n")
	w := &refWriter{b: &b, docs: docs}
	w.section("top level", "", reflect.TypeOf(config.Config{}))
	for _, typ := range drivers.KindTypes() {
		kind, _ := drivers.LookupKind(typ)
		w.section("drivers.<name> with type: "+typ, "drivers.<name>.", reflect.TypeOf(kind.New()).Elem())
	}
	w.section("console", "console.", reflect.TypeOf(console.Config{}))
	for _, name := range frontdoor.Kinds() {
		cfg, _ := frontdoor.NewConfig(name)
		w.section("front_doors."+name, "front_doors."+name+".", reflect.TypeOf(cfg).Elem())
	}
	return b.Bytes()
}

// refWriter writes the reference's sections: a table of a struct's plain
// keys, then a section of its own for each struct-valued key.
type refWriter struct {
	b    *bytes.Buffer
	docs fieldDocs
}

type refKey struct {
	key, typ, doc string
	nested        reflect.Type // a struct the key opens, written as a section of its own
}

func (w *refWriter) section(title, prefix string, t reflect.Type) {
	keys := w.keys(prefix, t)
	fmt.Fprintf(w.b, "\n## %s\n\n| key | type | description |\n| --- | --- | --- |\n", title)
	for _, k := range keys {
		fmt.Fprintf(w.b, "| `%s` | %s | %s |\n", k.key, k.typ, refCell(k.doc))
	}
	for _, k := range keys {
		if k.nested != nil {
			w.section(k.key, k.key+".", k.nested)
		}
	}
}

// keys lists t's keys under prefix, embedded and inline structs' keys
// among them.
func (w *refWriter) keys(prefix string, t reflect.Type) []refKey {
	var keys []refKey
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous || strings.Contains(opts, "inline") {
			keys = append(keys, w.keys(prefix, derefType(f.Type))...)
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		k := refKey{key: prefix + tag, doc: w.docs.of(t, f.Name)}
		k.typ, k.nested = w.describe(f.Type, &k)
		if k.doc == "" && k.nested != nil {
			k.doc = w.docs.ofType(k.nested)
		}
		keys = append(keys, k)
	}
	return keys
}

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

// describe names t as the reference shows it and returns the struct a key
// of that type opens, if any; a map of structs opens "<key>.<name>".
func (w *refWriter) describe(t reflect.Type, k *refKey) (string, reflect.Type) {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration", nil
	case t == reflect.TypeFor[config.DriverSection]():
		return "driver section (below, by type)", nil
	case t == reflect.TypeFor[config.RawSection]():
		return "section, decoded by its own package (below)", nil
	case reflect.PointerTo(t).Implements(yamlUnmarshaler) || t.Implements(yamlUnmarshaler):
		if k.doc == "" {
			k.doc = w.docs.ofType(t)
		}
		return "see description", nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return w.describe(t.Elem(), k)
	case reflect.Struct:
		return "section", t
	case reflect.Slice:
		elem, nested := w.describe(t.Elem(), k)
		if nested != nil {
			k.key += "[]"
			return "list of sections", nested
		}
		return "list of " + elem, nil
	case reflect.Map:
		elem, nested := w.describe(t.Elem(), k)
		if nested != nil {
			k.key += ".<name>"
			return "map of sections", nested
		}
		return "map of " + elem, nil
	case reflect.Interface:
		return "any", nil
	}
	return t.Kind().String(), nil
}

func derefType(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// refCell is doc as one table cell.
func refCell(doc string) string {
	doc = strings.Join(strings.Fields(doc), " ")
	return strings.ReplaceAll(doc, "|", `\|`)
}

// fieldDocs are the doc comments of the module's struct fields and types,
// read from its source.
type fieldDocs struct {
	fields map[string]string // "pkgpath.Type.Field"
	types  map[string]string // "pkgpath.Type"
	root   string            // the module's folder
	fset   *token.FileSet
	seen   map[string]bool
}

const modulePath = "github.com/toolgate/toolgate"

func newFieldDocs(t *testing.T) fieldDocs {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return fieldDocs{fields: map[string]string{}, types: map[string]string{}, root: root, fset: token.NewFileSet(), seen: map[string]bool{}}
}

func (d fieldDocs) of(t reflect.Type, field string) string {
	d.load(t.PkgPath())
	return d.fields[t.PkgPath()+"."+t.Name()+"."+field]
}

func (d fieldDocs) ofType(t reflect.Type) string {
	d.load(t.PkgPath())
	return d.types[t.PkgPath()+"."+t.Name()]
}

// load parses the package at pkg once, if it is the module's.
func (d fieldDocs) load(pkg string) {
	if d.seen[pkg] || !strings.HasPrefix(pkg, modulePath) {
		return
	}
	d.seen[pkg] = true
	dir := filepath.Join(d.root, strings.TrimPrefix(pkg, modulePath))
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(d.fset, name, nil, parser.ParseComments)
		if err != nil {
			continue
		}
		for _, decl := range f.Decls {
			if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
				d.addTypes(pkg, gd)
			}
		}
	}
}

func (d fieldDocs) addTypes(pkg string, gd *ast.GenDecl) {
	for _, spec := range gd.Specs {
		ts := spec.(*ast.TypeSpec)
		doc := ts.Doc
		if doc == nil && len(gd.Specs) == 1 {
			doc = gd.Doc
		}
		d.types[pkg+"."+ts.Name.Name] = doc.Text()
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		prev := ""
		for _, field := range st.Fields.List {
			text := field.Doc.Text()
			if text == "" {
				text = field.Comment.Text()
			}
			for _, name := range field.Names {
				// "CertFile and KeyFile are …" documents both fields.
				if text == "" && strings.Contains(prev, name.Name) {
					text = prev
				}
				d.fields[pkg+"."+ts.Name.Name+"."+name.Name] = text
			}
			prev = text
		}
	}
}

// commandGroups returns every command group by its full name.
func commandGroups() map[string]group {
	groups := map[string]group{}
	for _, g := range []group{rootGroup(), approvalsGroup(), checkGroup(), evidenceGroup(), policyGroup()} {
		groups[g.name] = g
	}
	return groups
}

// TestDocLinks: every relative link of the README, the changelog and the
// pages under docs/ leads to a file of the repository and, where it names
// one, to a heading of that file.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	files := append([]string{"CHANGELOG.md"}, docFiles(t)...)
	anchors := map[string]map[string]bool{}
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join("../..", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(data) {
			target, frag, _ := strings.Cut(l, "#")
			path := file
			if target != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(file), target))
				if _, err := os.Stat(filepath.Join("../..", path)); err != nil {
					t.Errorf("%s: link %q: %v", file, l, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if anchors[path] == nil {
				anchors[path] = headingAnchors(t, path)
			}
			if !anchors[path][frag] {
				t.Errorf("%s: link %q: %s has no such heading", file, l, path)
			}
		}
	}
}

// markdownLinks returns the relative link targets of a markdown text,
// outside code.
func markdownLinks(data []byte) []string {
	var links []string
	fenced := false
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		for rest := line; !fenced; {
			_, after, ok := strings.Cut(rest, "](")
			if !ok {
				break
			}
			target, tail, ok := strings.Cut(after, ")")
			if !ok {
				break
			}
			rest = tail
			if !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				links = append(links, target)
			}
		}
	}
	return links
}

// headingAnchors returns the anchors a markdown renderer gives the
// headings of path: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(t *testing.T, path string) map[string]bool {
	data, err := os.ReadFile(filepath.Join("../..", path))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, b := range fencedHeadings(data) {
		var a strings.Builder
		for _, r := range strings.ToLower(b) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchors[a.String()] = true
	}
	return anchors
}

// fencedHeadings returns the text of a markdown file's headings, outside
// code.
func fencedHeadings(data []byte) []string {
	var heads []string
	fenced := false
	for line := range strings.SplitSeq(string(data), "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			fenced = !fenced
		case !fenced && strings.HasPrefix(line, "#"):
			heads = append(heads, strings.TrimSpace(strings.TrimLeft(line, "#")))
		}
	}
	return heads
}
