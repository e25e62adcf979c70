package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/drivers"
)

func TestCanonicalPathGivesEverySpellingOneForm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		kind pathKind
		want string // "" means refused, with wantErr in the message
		err  string
	}{
		{"etc/passwd", kindFile, "etc/passwd", ""},
		{"./etc/passwd", kindFile, "etc/passwd", ""},
		{"etc//passwd", kindFile, "etc/passwd", ""},
		{"etc/./passwd", kindFile, "etc/passwd", ""},
		{".//./etc/.//passwd", kindFile, "etc/passwd", ""},
		{"cafe\u0301/x", kindFile, "caf\u00e9/x", ""},
		{"caf\u00e9/x", kindFile, "caf\u00e9/x", ""},
		{"v1..2/x..y", kindFile, "v1..2/x..y", ""},
		{"...", kindFile, "...", ""},
		{".hidden", kindFile, ".hidden", ""},
		{"etc/passwd/.", kindFile, "", "must name a file"},
		{"etc/", kindFile, "", "must name a file"},
		{".", kindFile, "", "must name a file"},
		{"./", kindFile, "", "must name a file"},
		{"sub/", kindDir, "sub", ""},
		{"sub/.", kindDir, "sub", ""},
		{"./sub//deeper/.", kindDir, "sub/deeper", ""},
		{".", kindDir, ".", ""},
		{"./", kindDir, ".", ""},
		{"", kindDir, "", "must not be empty"},
		{"..", kindDir, "", "'..'"},
		{"a/../b", kindFile, "", "'..'"},
		{"/etc/passwd", kindFile, "", "must be relative"},
		{"a\x00b", kindFile, "", "NUL"},
		{"a\xffb", kindFile, "", "UTF-8"},
		{"a\tb", kindFile, "", "U+0009"},
		{"a\x7fb", kindFile, "", "U+007F"},
		{"a\u0085b", kindFile, "", "U+0085"},
		{"secret\u202etxt.exe", kindFile, "", "U+202E"},
		{"a\u2066b", kindFile, "", "U+2066"},
		{"conf/\u200bsecret.txt", kindFile, "", "U+200B"},
		{"\ufeffa", kindFile, "", "U+FEFF"},
		{"a\u2028b", kindFile, "", "U+2028"},
		{strings.Repeat("x", 255), kindFile, strings.Repeat("x", 255), ""},
		{strings.Repeat("x", 256), kindFile, "", "at most 255"},
		{strings.Repeat("./", 100) + "x", kindFile, "x", ""},
		{strings.Repeat("./", 600) + "x", kindFile, "", "at most 255"},
	}
	for _, tt := range tests {
		got, err := canonicalPath(tt.in, tt.kind)
		if tt.want != "" {
			if err != nil || got != tt.want {
				t.Errorf("canonicalPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("canonicalPath(%q) = %q, %v; want a refusal mentioning %q", tt.in, got, err, tt.err)
		}
	}
}

func TestNormalizeRewritesOnlyTheResourceArgument(t *testing.T) {
	t.Parallel()
	d := &Driver{}
	in := map[string]any{"path": "./a//b", "content": "./x//y"}
	out, changed, err := d.Normalize(opCreateFile, in)
	if err != nil || !changed || out["path"] != "a/b" || out["content"] != "./x//y" {
		t.Fatalf("Normalize = %v, %v, %v", out, changed, err)
	}
	if in["path"] != "./a//b" {
		t.Error("Normalize modified its input")
	}
	out, changed, err = d.Normalize(opShell, map[string]any{"command": "ls", "cwd": "sub/"})
	if err != nil || !changed || out["cwd"] != "sub" {
		t.Fatalf("shell cwd: %v, %v, %v", out, changed, err)
	}
	if _, changed, err := d.Normalize(opReadFile, map[string]any{"path": "a/b"}); changed || err != nil {
		t.Errorf("a canonical path: changed %v, %v", changed, err)
	}
	if _, changed, err := d.Normalize(opReadFile, map[string]any{"path": 1}); changed || err != nil {
		t.Errorf("a path of the wrong type is Run's to report: changed %v, %v", changed, err)
	}
	_, _, err = d.Normalize(opDeleteFile, map[string]any{"path": "a/../b"})
	var argErr *drivers.ArgError
	if !errors.As(err, &argErr) || argErr.Arg != "path" || !strings.Contains(err.Error(), "'..'") {
		t.Errorf("a '..' path: %v, want an ArgError naming path", err)
	}
}

// TestGoCallersGetARefusalNotASecondInterpretation calls the driver directly,
// as code that bypasses the gateway would, with spellings that the gateway
// would have canonicalised: each is refused, and the forbidden file is
// neither read nor changed.
func TestGoCallersGetARefusalNotASecondInterpretation(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	write(t, root, "etc/passwd", "root:x:0:0", 0o640)
	edits := []any{map[string]any{"oldContent": "root", "newContent": "pwned"}}
	for _, spelling := range []string{"./etc/passwd", "etc//passwd", "etc/./passwd", "etc/passwd/."} {
		for op, a := range map[string]map[string]any{
			opReadFile:   {"path": spelling},
			opCreateFile: {"path": spelling, "content": "pwned", "overwrite": true},
			opEditFile:   {"path": spelling, "edits": edits},
			opDeleteFile: {"path": spelling},
			opShell:      {"command": "cat passwd", "cwd": spelling + "/../."},
		} {
			res := run(t, d, op, a)
			if res.ExitCode != exitValidation || strings.Contains(res.Stdout, "root:") {
				t.Errorf("%s %q: exit %d, stdout %q; want a validation refusal", op, spelling, res.ExitCode, res.Stdout)
			}
		}
	}
	res := run(t, d, opShell, map[string]any{"command": "pwd", "cwd": "./etc"})
	wantFailure(t, res, exitValidation, categoryValidation, `cwd "./etc" is not in canonical form; its canonical form is "etc"`)
	if got := readOrEmpty(t, root, "etc/passwd"); got != "root:x:0:0" {
		t.Errorf("etc/passwd = %q, want it untouched", got)
	}
}

// TestFileOperationsNeverTraverseALink plants a link to a folder inside the
// workspace, as a shell command could, and uses it as a path's folder: every
// operation fails, and the folder the link names is untouched.
func TestFileOperationsNeverTraverseALink(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	write(t, root, "etc/passwd", "root:x:0:0", 0o640)
	if err := os.Symlink("etc", filepath.Join(root, "inside")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../etc", filepath.Join(root, "a", "b")); err != nil {
		t.Fatal(err)
	}
	edits := []any{map[string]any{"oldContent": "root", "newContent": "pwned"}}
	for _, p := range []string{"inside/passwd", "a/b/passwd"} {
		for op, a := range map[string]map[string]any{
			opReadFile:   {"path": p},
			opCreateFile: {"path": p, "content": "pwned", "overwrite": true},
			opEditFile:   {"path": p, "edits": edits},
			opDeleteFile: {"path": p},
			opShell:      {"command": "cat passwd", "cwd": filepath.Dir(p)},
		} {
			res := run(t, d, op, a)
			if res.ExitCode == 0 || strings.Contains(res.Stdout, "root:") {
				t.Errorf("%s %s: exit %d, stdout %q; want a failure", op, p, res.ExitCode, res.Stdout)
			}
			if !strings.Contains(res.Stderr, "is a symbolic link") {
				t.Errorf("%s %s: stderr %q does not say a link was in the way", op, p, res.Stderr)
			}
		}
	}
	res := run(t, d, opCreateFile, map[string]any{"path": "inside/new.txt", "content": "x"})
	if res.ExitCode == 0 {
		t.Error("createFile made a file through the link")
	}
	if got := readOrEmpty(t, root, "etc/passwd"); got != "root:x:0:0" {
		t.Errorf("etc/passwd = %q, want it untouched", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc", "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was created through the link: %v", err)
	}
}

// BenchmarkNormalize measures what the gateway adds to a workspace call:
// nothing allocated for a path already canonical, one clean-up otherwise.
func BenchmarkNormalize(b *testing.B) {
	for _, bc := range []struct{ name, path string }{
		{"canonical", "src/pkg/main.go"},
		{"respelled", "./src//pkg/./main.go"},
		{"non-ASCII", "docs/caf\u00e9/men\u00fc.md"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := map[string]any{"path": bc.path}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := NormalizeArgs(opReadFile, a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
