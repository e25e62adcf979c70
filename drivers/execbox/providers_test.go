package execbox

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers"
)

// jsIdentifier is what every provider and tool name must look like.
var jsIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func TestIdentifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           string
		global, prop string // as a provider, as a tool
	}{
		{"issues.list", "issues_list", "issues_list"},
		{"scrape-url", "scrape_url", "scrape_url"},
		{"2fa", "_2fa", "_2fa"},
		{"", "_", "_"},
		{"héllo wörld", "h_llo_w_rld", "h_llo_w_rld"},
		{"$x", "_x", "_x"},
		{"delete", "delete_", "delete_"},
		{"await", "await_", "await_"},
		{"NaN", "NaN_", "NaN_"},
		{"console", "console_", "console"},
		{"globalThis", "globalThis_", "globalThis"},
		{"constructor", "constructor", "constructor_"},
		{"__proto__", "__proto__", "__proto___"},
		{"Ünïcode", "_n_code", "_n_code"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := identifier(tc.in, true); got != tc.global {
				t.Errorf("identifier(%q) as a provider = %q, want %q", tc.in, got, tc.global)
			}
			if got := identifier(tc.in, false); got != tc.prop {
				t.Errorf("identifier(%q) as a tool = %q, want %q", tc.in, got, tc.prop)
			}
		})
	}
}

// names lists mapTools' result as "id provider.safeName".
func names(entries []toolEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.toolID+" "+e.provider+"."+e.safeName)
	}
	return out
}

// infos makes ToolInfos from ids.
func infos(ids ...string) []drivers.ToolInfo {
	out := make([]drivers.ToolInfo, len(ids))
	for i, id := range ids {
		out[i] = drivers.ToolInfo{ID: id}
	}
	return out
}

func TestMapTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ids  []string
		want []string
	}{
		{"plain", []string{"github.issues.list", "search.web"},
			[]string{"github.issues.list github.issues_list", "search.web search.web"}},
		{"tool names that clean to the same identifier", []string{"a.x_y_2", "a.x-y", "a.x_y"},
			[]string{"a.x-y a.x_y", "a.x_y a.x_y_2", "a.x_y_2 a.x_y_2_2"}},
		{"namespaces that clean to the same identifier", []string{"my_ns.b", "my-ns.a"},
			[]string{"my-ns.a my_ns.a", "my_ns.b my_ns_2.b"}},
		{"ids without a namespace join the tools namespace", []string{"tools.echo", "echo", ".echo"},
			[]string{".echo tools.echo", "echo tools.echo_2", "tools.echo tools.echo_3"}},
		{"duplicate ids", []string{"a.b", "a.b"}, []string{"a.b a.b"}},
		{"reserved words", []string{"class.new", "x.constructor"}, []string{"class.new class_.new_", "x.constructor x.constructor_"}},
		{"guest globals", []string{"console.log", "JSON.parse"}, []string{"JSON.parse JSON_.parse", "console.log console_.log"}},
		{"empty tool name", []string{"ns."}, []string{"ns. ns._"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(mapTools(infos(tc.ids...))); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mapTools(%q) =\n%q\nwant\n%q", tc.ids, got, tc.want)
			}
		})
	}
}

// TestMapToolsDeterministic checks that the order in which the catalog
// lists its tools never changes their names.
func TestMapToolsDeterministic(t *testing.T) {
	t.Parallel()
	ids := []string{"a.x", "a.x-y", "a.x_y", "a-b.x", "a_b.x", "echo", "tools.echo", "1.2", "class.delete", "é.ü"}
	want := names(mapTools(infos(ids...)))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		if got := names(mapTools(infos(ids...))); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %q gives\n%q\nwant\n%q", ids, got, want)
		}
	}
	seen := map[string]bool{}
	for _, e := range mapTools(infos(ids...)) {
		key := e.provider + "." + e.safeName
		if seen[key] || !jsIdentifier.MatchString(e.provider) || !jsIdentifier.MatchString(e.safeName) {
			t.Errorf("tool %s maps to %s: duplicate or not an identifier", e.toolID, key)
		}
		seen[key] = true
	}
}

func TestBuildCatalog(t *testing.T) {
	t.Parallel()
	tools := []drivers.ToolInfo{
		{ID: "a.x", Description: "Ends */ a comment\nand spans lines"},
		{ID: "a-b.y"},
		{ID: "a.z", Description: strings.Repeat("long ", 100)},
	}
	c, err := buildCatalog(tools, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.manifests) != 2 || c.manifests[0].Name != "a" || c.manifests[1].Name != "a_b" {
		t.Fatalf("manifests = %+v, want a and a_b", c.manifests)
	}
	wantTypes := "declare namespace a {\n" +
		"  /** a.x: Ends *\\/ a comment and spans lines */\n  function x(input?: unknown): Promise<unknown>;\n" +
		"  /** a.z: " + strings.Repeat("long ", 39) + "… */\n  function z(input?: unknown): Promise<unknown>;\n" +
		"}\n"
	if got := c.manifests[0].Types; got != wantTypes {
		t.Errorf("types =\n%s\nwant\n%s", got, wantTypes)
	}
	if got := c.manifests[0].Tools["x"]; got != (toolManifest{SafeName: "x", OriginalName: "a.x", Description: "Ends */ a comment\nand spans lines"}) {
		t.Errorf("manifest of a.x = %+v", got)
	}
	if c.byName[[2]string{"a_b", "y"}] != "a-b.y" || c.byName[[2]string{"a", "y"}] != "" {
		t.Errorf("byName = %v", c.byName)
	}

	for _, tc := range []struct {
		name    string
		only    []string
		want    []string
		wantErr string
	}{
		{"by guest name", []string{"a_b"}, []string{"a-b.y"}, ""},
		{"by namespace", []string{"a-b", "a"}, []string{"a-b.y", "a.x", "a.z"}, ""},
		{"none", []string{}, nil, ""},
		{"unknown", []string{"a", "c"}, nil, `args.providers: unknown provider "c" (offered: a_b, a)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := buildCatalog(tools, tc.only, false)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			var got []string
			for _, e := range c.entries {
				got = append(got, e.toolID)
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("offered %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
