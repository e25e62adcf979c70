package ident

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// forms pairs each check with the pattern it implements.
var forms = []struct {
	name    string
	pattern string
	form    Form
}{
	{"EnvName", EnvNamePattern, EnvName},
	{"CallerName", CallerNamePattern, CallerName},
	{"RequestID", RequestIDPattern, RequestID},
	{"DriverName", DriverNamePattern, DriverName},
	{"Word", WordPattern, Word},
}

func TestForms(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return "a" + strings.Repeat("b", n-1) }
	cases := []struct {
		name  string
		form  Form
		in    string
		match bool
	}{
		{"env plain", EnvName, "API_KEY", true},
		{"env underscore first", EnvName, "_X1", true},
		{"env digit first", EnvName, "1X", false},
		{"env empty", EnvName, "", false},
		{"env equals sign", EnvName, "A=B", false},
		{"env NUL", EnvName, "A\x00", false},
		{"env long", EnvName, long(4096), true},
		{"caller email", CallerName, "alice@example.com", true},
		{"caller colon", CallerName, "svc:ci-bot_1", true},
		{"caller dot first", CallerName, ".alice", false},
		{"caller quote", CallerName, `a"b`, false},
		{"caller slash", CallerName, "a/b", false},
		{"caller newline", CallerName, "a\nb", false},
		{"caller at limit", CallerName, long(128), true},
		{"caller over limit", CallerName, long(129), false},
		{"request id", RequestID, "req_123:retry.1-a", true},
		{"request id at", RequestID, "a@b", false},
		{"request id dotdot", RequestID, "..", false},
		{"request id slash", RequestID, "a/../b", false},
		{"request id over limit", RequestID, long(129), false},
		{"driver", DriverName, "my-driver_2", true},
		{"driver upper", DriverName, "Workspace", false},
		{"driver digit first", DriverName, "2x", false},
		{"driver dot", DriverName, "a.b", false},
		{"driver over limit", DriverName, long(65), false},
		{"word", Word, "agent_spaces", true},
		{"word hyphen", Word, "agent-spaces", false},
		{"word at limit", Word, long(32), true},
		{"word over limit", Word, long(33), false},
		{"word non-ASCII", Word, "caf\u00e9", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.form.MatchString(c.in); got != c.match {
				t.Fatalf("%s.MatchString(%q) = %v, want %v", c.form, c.in, got, c.match)
			}
			if got := c.form.Match([]byte(c.in)); got != c.match {
				t.Fatalf("%s.Match(%q) = %v, want %v", c.form, c.in, got, c.match)
			}
		})
	}
}

// FuzzForms holds every check to the pattern it documents: the two must
// agree on every input.
func FuzzForms(f *testing.F) {
	for _, seed := range []string{"", "a", "A_1", "_", "alice@example.com", "req:1.2-3", "..", "a/b",
		"agent_spaces", "x\x00", "caf\u00e9", strings.Repeat("a", 129), strings.Repeat("z", 33)} {
		f.Add(seed)
	}
	res := make([]*regexp.Regexp, len(forms))
	for i, fm := range forms {
		res[i] = regexp.MustCompile(fm.pattern)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, fm := range forms {
			if fm.form.String() != fm.pattern {
				t.Fatalf("%s.String() = %q, want %q", fm.name, fm.form.String(), fm.pattern)
			}
			if got, want := fm.form.MatchString(s), res[i].MatchString(s); got != want {
				t.Fatalf("%s(%q) = %v, pattern %s says %v", fm.name, s, got, fm.pattern, want)
			}
		}
	})
}

func TestUnknownFormMatchesNothing(t *testing.T) {
	t.Parallel()
	var f Form
	if f.MatchString("a") || f.Match([]byte("a")) || f.MatchString("") {
		t.Fatal("the zero Form matched")
	}
}

func BenchmarkCallerName(b *testing.B) {
	re := regexp.MustCompile(CallerNamePattern)
	in := "svc:ci-bot_1@example.com"
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			CallerName.MatchString(in)
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for b.Loop() {
			re.MatchString(in)
		}
	})
}

// TestDeclaredOnce keeps the rules in this package: no other non-test
// source file of the module spells one of the patterns as a Go raw string
// again.
func TestDeclaredOnce(t *testing.T) {
	t.Parallel()
	root, self := filepath.Join("..", ".."), filepath.Join("..", "..", "internal", "ident")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root:
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == self:
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, fm := range forms {
			if bytes.Contains(src, []byte("`"+fm.pattern+"`")) {
				t.Errorf("%s declares %s's pattern again; use ident.%s", path, fm.name, fm.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 159) + "é" + strings.Repeat("b", 50)
	for _, tc := range []struct{ name, in, want string }{
		{"short stays", "req-1", "req-1"},
		{"exactly the bound stays", strings.Repeat("x", 160), strings.Repeat("x", 160)},
		{"long is cut and marked", strings.Repeat("x", 200), strings.Repeat("x", 160) + "…"},
		{"a rune is never split", long, strings.Repeat("a", 159) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Clip(tc.in); got != tc.want {
				t.Errorf("Clip = %q, want %q", got, tc.want)
			}
		})
	}
}
