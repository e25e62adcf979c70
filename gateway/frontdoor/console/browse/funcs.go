package browse

import (
	"html/template"
	"net/url"
	"strings"
	"time"
)

// funcs are the templates' helpers. None of them returns markup: every
// value a page shows is escaped by html/template as text.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
	"itoa": itoa,
	"list": func(items ...string) []string { return items },
	"path": url.PathEscape,
	"indent": func(depth int) string {
		return strings.Repeat("  ", depth) + map[bool]string{true: "└ ", false: ""}[depth > 0]
	},
	"depthClass": func(depth int) string {
		return "depth-" + itoa(min(depth, 8))
	},
}
