package tpmjs

import (
	"strings"
	"testing"
)

func TestValidatePackageName(t *testing.T) {
	t.Parallel()
	valid := []string{
		"lodash", "@tpmjs/web-search", "@types/node", "lodash.get", "7zip-bin", "a", "a_b", "a-b.c",
		"@a1/b", strings.Repeat("x", 214), "@" + strings.Repeat("s", 100) + "/" + strings.Repeat("n", 112),
	}
	for _, s := range valid {
		if err := ValidatePackageName(s); err != nil {
			t.Errorf("ValidatePackageName(%q) = %v, want nil", s, err)
		}
	}
	invalid := []struct{ name, in, wantErr string }{
		{"empty", "", "empty"},
		{"too long", strings.Repeat("x", 215), "longer than 214"},
		{"300 characters", strings.Repeat("y", 300), "longer than 214"},
		{"uppercase", "Lodash", "uppercase"},
		{"uppercase scope", "@TPMJS/web", "uppercase"},
		{"parent path", "../x", `must not start with '.'`},
		{"leading dot", ".hidden", `must not start with '.'`},
		{"leading underscore", "_private", `must not start with '_'`},
		{"leading hyphen is an option", "-rf", `must not start with '-'`},
		{"space", "lo dash", `character ' '`},
		{"semicolon", "lodash;id", `character ';'`},
		{"command substitution", "$(id)", `character '$'`},
		{"backtick", "`id`", "character '`'"},
		{"ampersand", "a&&b", `character '&'`},
		{"pipe", "a|b", `character '|'`},
		{"redirect", "a>b", `character '>'`},
		{"quote", "a'b", `character '\''`},
		{"newline", "a\nb", `character '\n'`},
		{"version inside name", "lodash@1.0.0", `character '@'`},
		{"url", "https://x.y/z", `character ':'`},
		{"tilde", "~foo", `character '~'`},
		{"scope without name", "@scope", "@scope/name"},
		{"scope with empty name", "@scope/", "name is empty"},
		{"empty scope", "@/name", "scope is empty"},
		{"two slashes", "@a/b/c", `character '/'`},
		{"slash without scope", "a/b", `character '/'`},
		{"non-ASCII", "lödash", `character 'ö'`},
		{"invalid UTF-8", "a\xffb", "byte 0xff"},
		{"reserved", "node_modules", "reserved"},
		{"reserved favicon", "favicon.ico", "reserved"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePackageName(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ValidatePackageName(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestValidateVersion(t *testing.T) {
	t.Parallel()
	valid := []string{
		"1.2.3", "0.0.0", "v1.2.3", "=1.2.3", "1.2.3-beta.1", "1.2.3-rc.1+build.7", "1.2.3+sha.abc",
		"^1.2.0", "~1.2", "~1", "^0.x", "^1.2.3-rc.1", "1.x", "1.X", "1.2.x", "x", "X",
		"latest", "next", "beta.1", "canary", "v", "my-tag_2", "x1",
		strings.Repeat("9", 16) + ".0.0",
	}
	for _, s := range valid {
		if err := ValidateVersion(s); err != nil {
			t.Errorf("ValidateVersion(%q) = %v, want nil", s, err)
		}
	}
	invalid := []struct{ name, in, wantErr string }{
		{"empty", "", "empty"},
		{"command list", "1.0.0; rm -rf /", `character ';'`},
		{"command substitution", "$(id)", `character '$'`},
		{"backticks", "`id`", "character '`'"},
		{"and list", "latest&&curl", `character '&'`},
		{"single pipe", "1.0.0 | sh", `character ' '`},
		{"pipe into tag", "latest|sh", `character '|'`},
		{"a comparator range with a space", ">=0.1.0 <1.0.0", `character '>'`},
		{"a comparator, which redirects", ">=0.1.0", `character '>'`},
		{"an upper bound, which reads a file", "<1.0.0", "comparator ranges"},
		{"a union, which runs a command", "1.x||2.x", `character '|'`},
		{"a union with spaces", "1.x || 2.x", `character ' '`},
		{"a glob", "1.*", `use "x"`},
		{"a lone glob", "*", `character '*'`},
		{"newline", "1.0.0\nid", `character '\n'`},
		{"tab", "1.0.0\t2", `character '\t'`},
		{"quotes", `"1.0.0"`, `character '"'`},
		{"backslash", `1.0.0\`, `character '\\'`},
		{"parenthesis", "(1.0.0)", `character '('`},
		{"hash comment", "1.0.0#x", `character '#'`},
		{"leading space", " 1.0.0", `character ' '`},
		{"trailing space", "1.0.0 ", `character ' '`},
		{"space inside tag", "lat est", `character ' '`},
		{"bare second version installs another package", "1.0.0 2.0.0", `character ' '`},
		{"word after tag", "latest evil", `character ' '`},
		{"hyphen range", "1.2.3 - 2.3.4", `character ' '`},
		{"option", "-rf", "empty version number"},
		{"operator alone", "^", "missing version number"},
		{"two operators", "~^1.0.0", "not a number or x"},
		{"four numbers", "1.2.3.4", "more than three"},
		{"leading zero", "01.2.3", "leading zero"},
		{"prerelease leading zero", "1.2.3-01", "leading zero"},
		{"prerelease on partial", "1.2-beta", "needs a full version"},
		{"empty prerelease", "1.2.3-", "empty identifier"},
		{"uppercase tag", "Latest", "lowercase letter"},
		{"tag starting with a digit", "1beta", "not a number or x"},
		{"too many digits", strings.Repeat("9", 17) + ".0.0", "more than 16 digits"},
		{"too long", "1.2.3-" + strings.Repeat("a", 260), "longer than 256"},
		{"dotted path", "../../x", `character '/'`},
		{"url", "https://evil/x.tgz", `character ':'`},
		{"at sign", "1.0.0@evil", `character '@'`},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateVersion(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ValidateVersion(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestValidateExportName(t *testing.T) {
	t.Parallel()
	valid := []string{"helloWorldTool", "webSearch", "_x", "$", "$tool", "tool_2", "A", "Await", "classy", "letter"}
	for _, s := range valid {
		if err := ValidateExportName(s); err != nil {
			t.Errorf("ValidateExportName(%q) = %v, want nil", s, err)
		}
	}
	invalid := []struct{ name, in, wantErr string }{
		{"empty", "", "empty"},
		{"leading digit", "1tool", "start with a digit"},
		{"hyphen", "web-search", `character '-'`},
		{"dot", "a.b", `character '.'`},
		{"space", "a b", `character ' '`},
		{"template injection", "${process.exit()}", `character '{'`},
		{"quote", `a"b`, `character '"'`},
		{"non-ASCII", "tööl", `character 'ö'`},
		{"too long", strings.Repeat("a", 256), "longer than 255"},
		{"reserved class", "class", "reserved word"},
		{"reserved default", "default", "reserved word"},
		{"reserved await", "await", "reserved word"},
		{"reserved let", "let", "reserved word"},
		{"literal null", "null", "reserved word"},
		{"prototype access", "__proto__", "reserved word"},
		{"constructor", "constructor", "reserved word"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateExportName(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ValidateExportName(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestClipShortensHugeValues(t *testing.T) {
	t.Parallel()
	err := ValidatePackageName(strings.Repeat("Z", 5000))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error for a 5000-byte name = %v (%d bytes), want a short error", err, len(err.Error()))
	}
}
