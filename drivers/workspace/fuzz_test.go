package workspace

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func FuzzValidatePath(f *testing.F) {
	for _, seed := range []string{
		"a.txt", "scripts/fetch-schedule.ts", ".", "./a", "a//b", "a/./b", "v1..2/x", "...",
		"", "..", "../x", "/etc/passwd", "a/../../x", "a/..", "a\x00b", "a\xffb",
		strings.Repeat("x", 255), strings.Repeat("x", 256),
	} {
		f.Add(seed)
	}
	const root = "/srv/workspace"
	f.Fuzz(func(t *testing.T, p string) {
		if validatePath(p) != nil {
			return
		}
		joined := filepath.Join(root, p)
		if joined != root && !strings.HasPrefix(joined, root+"/") {
			t.Fatalf("accepted %q, which joins to %q outside %s", p, joined, root)
		}
		if !filepath.IsLocal(p) {
			t.Fatalf("accepted %q, which is not local", p)
		}
		if !utf8.ValidString(p) || utf8.RuneCountInString(p) > maxPathChars || strings.ContainsRune(p, 0) {
			t.Fatalf("accepted %q against the spec's rules", p)
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
			if s.cwd != "" && validatePath(s.cwd) != nil {
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
	if err := validatePath(p); err != nil || strings.HasSuffix(p, "/") {
		t.Fatalf("accepted path %q: %v", p, err)
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
