package workspace

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzCanonicalPath checks the normaliser's promises for any spelling: it
// never panics; what it returns is a fixed point, stays inside the
// workspace, has no "..", "." or empty segment and no control or invisible
// character, is NFC, and is accepted as it is by the operation that will
// open it.
func FuzzCanonicalPath(f *testing.F) {
	for _, seed := range []string{
		"a.txt", "scripts/fetch-schedule.ts", ".", "./a", "a//b", "a/./b", "a/.", "a/", "v1..2/x", "...",
		"", "..", "../x", "/etc/passwd", "a/../../x", "a/..", "a\x00b", "a\xffb", "./etc/passwd",
		"conf//secret.txt", "caf\u0065\u0301/x", "a\u202eb", "a\u200bb", "a\u0085b", "\u037e", "a\tb",
		strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("./", 200) + "x",
	} {
		f.Add(seed)
	}
	const root = "/srv/workspace"
	f.Fuzz(func(t *testing.T, p string) {
		for _, kind := range []pathKind{kindFile, kindDir} {
			c, err := canonicalPath(p, kind)
			if slow, slowErr := cleanPath(p, kind); slow != c || (slowErr == nil) != (err == nil) {
				t.Fatalf("%q: the fast path gives %q, %v; the full one %q, %v", p, c, err, slow, slowErr)
			}
			if err != nil {
				continue
			}
			if again, err := canonicalPath(c, kind); err != nil || again != c {
				t.Fatalf("%q → %q → %q, %v: not a fixed point", p, c, again, err)
			}
			joined := filepath.Join(root, c)
			if joined != root && !strings.HasPrefix(joined, root+"/") || !filepath.IsLocal(c) {
				t.Fatalf("%q → %q leaves the workspace", p, c)
			}
			if c != "." && slices.ContainsFunc(strings.Split(c, "/"), func(s string) bool { return s == "" || s == "." || s == ".." }) {
				t.Fatalf("%q → %q has a '', '.' or '..' segment", p, c)
			}
			if !utf8.ValidString(c) || !norm.NFC.IsNormalString(c) || utf8.RuneCountInString(c) > maxPathChars {
				t.Fatalf("%q → %q is not valid NFC within the limit", p, c)
			}
			if strings.IndexFunc(c, func(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) }) >= 0 {
				t.Fatalf("%q → %q keeps a control or invisible character", p, c)
			}
			name, op := "path", "readFile"
			if kind == kindDir {
				name, op = "cwd", "shell"
			}
			canon, changed, err := NormalizeArgs(op, map[string]any{name: p})
			if err != nil || canon[name] != c || changed != (c != p) {
				t.Fatalf("Normalize(%q) = %v, %v, %v; want %q", p, canon, changed, err, c)
			}
			if _, err := canonicalArg(name, c, kind); err != nil {
				t.Fatalf("the driver refuses the canonical %q: %v", c, err)
			}
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		`{"path":"a.txt","content":"hello","overwrite":true}`,
		`{"path":"bin","content":"AAEC/w==","encoding":"base64"}`,
		`{"path":"a","edits":[{"oldContent":"x","newContent":"y"}]}`,
		`{"command":"echo hi","cwd":"sub","timeout":1000,"env":{"A_1":"v"}}`,
		`{"command":"ls","timeout":1500.0}`,
		`{"command":"ls","timeout":1e400}`,
		`{"path":"../x","content":1,"edits":[{}],"env":{"1":2}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		dec := json.NewDecoder(strings.NewReader(in))
		dec.UseNumber()
		var m map[string]any
		if dec.Decode(&m) != nil {
			return
		}
		a := args(m)
		if c, err := parseCreate(a); err == nil {
			checkFilePath(t, c.path)
			if len(c.content) > maxContentBytes {
				t.Fatalf("accepted %d bytes of content", len(c.content))
			}
		}
		if r, err := parseRead(a); err == nil {
			checkFilePath(t, r.path)
			if r.encoding != encodingUTF8 && r.encoding != encodingBase64 {
				t.Fatalf("accepted encoding %q", r.encoding)
			}
		}
		if e, err := parseEdit(a); err == nil {
			checkFilePath(t, e.path)
			if len(e.edits) == 0 {
				t.Fatal("accepted an empty edit list")
			}
			for i, ed := range e.edits {
				if ed.old == "" {
					t.Fatalf("accepted an empty oldContent in edit %d", i)
				}
			}
		}
		if d, err := parseDelete(a); err == nil {
			checkFilePath(t, d.path)
		}
		if s, err := parseShell(a, 30*time.Second); err == nil {
			if s.command == "" || utf8.RuneCountInString(s.command) > maxCommandChars || strings.ContainsRune(s.command, 0) {
				t.Fatalf("accepted command %q", s.command)
			}
			if _, err := canonicalPath(s.cwd, kindDir); s.cwd != "" && err != nil {
				t.Fatalf("accepted cwd %q", s.cwd)
			}
			if s.timeout < minTimeout || s.timeout > maxTimeout {
				t.Fatalf("accepted timeout %v", s.timeout)
			}
			for k, v := range s.env {
				if !envNamePattern.MatchString(k) || strings.ContainsRune(v, 0) {
					t.Fatalf("accepted env %q=%q", k, v)
				}
			}
		}
	})
}

func checkFilePath(t *testing.T, p string) {
	t.Helper()
	if c, err := canonicalPath(p, kindFile); err != nil || c != p {
		t.Fatalf("accepted path %q, canonical %q: %v", p, c, err)
	}
}

func FuzzCapture(f *testing.F) {
	f.Add([]byte("hello"), 3)
	f.Add([]byte("ab\xe2\x82\xac"), 4)
	f.Add([]byte("\xff\xfe\xc3"), 1)
	f.Fuzz(func(t *testing.T, out []byte, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		c := capture{limit: limit}
		// Feed in two writes so the cut can fall anywhere.
		half := len(out) / 2
		c.Write(out[:half])
		c.Write(out[half:])
		s, truncated := c.String()
		if !utf8.ValidString(s) {
			t.Fatalf("output %q is not valid UTF-8", s)
		}
		if truncated != (len(out) > limit) {
			t.Fatalf("truncated = %v for %d bytes at limit %d", truncated, len(out), limit)
		}
		if len(c.buf) > limit {
			t.Fatalf("kept %d bytes over the limit %d", len(c.buf), limit)
		}
		if !truncated && s != strings.ToValidUTF8(string(out), "\uFFFD") {
			t.Fatalf("untruncated output %q altered", s)
		}
		if truncated {
			body, trailer, ok := strings.Cut(s, "\n[output truncated: ")
			if !ok || !strings.HasSuffix(trailer, " bytes omitted]\n") {
				t.Fatalf("truncated output %q lacks the trailer", s)
			}
			if !strings.HasPrefix(strings.ToValidUTF8(string(out), "\uFFFD"), body) {
				t.Fatalf("kept output %q is not a prefix", body)
			}
		}
	})
}
