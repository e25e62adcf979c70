package workspace

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/toolgate/toolgate/drivers"
)

// maxPathInputBytes bounds the spelling of a path before it is
// canonicalised, so that "./././…" cannot make the work unbounded; the
// canonical form is then held to maxPathChars.
const maxPathInputBytes = 4 * maxPathChars

// errPathEmpty and its siblings name why a path has no canonical form.
var (
	errPathEmpty    = errors.New("must not be empty")
	errPathUTF8     = errors.New("must be valid UTF-8")
	errPathLong     = fmt.Errorf("must be at most %d characters", maxPathChars)
	errPathNUL      = errors.New("must not contain a NUL byte")
	errPathAbsolute = errors.New("must be relative (no leading '/')")
	errPathParent   = errors.New("must not contain a '..' element (it cannot be resolved without following links)")
	errPathDir      = errors.New("must name a file, not end in '/' or '/.' or name the workspace root")
)

// pathKind says what a path argument names, which decides whether a
// spelling that can only name a folder ("a/", "a/.", ".") is acceptable.
type pathKind int

const (
	kindFile pathKind = iota // createFile, readFile, editFile, deleteFile: path
	kindDir                  // shell: cwd; "." is the workspace root
)

// canonicalPath returns the one spelling of the workspace path p that policy
// sees and the driver opens: relative, segments separated by exactly one
// '/', no "." or empty segments, in Unicode NFC, without control or
// invisible characters, at most maxPathChars characters. Spellings that
// differ only in those respects map to the same result; a spelling that
// cannot be resolved lexically (any ".." segment) or that hides what it
// names (control, bidi or zero-width characters) is refused. The result is
// a fixed point: canonicalPath(canonicalPath(p)) == canonicalPath(p).
func canonicalPath(p string, kind pathKind) (string, error) {
	if plainCanonical(p) {
		return p, nil
	}
	return cleanPath(p, kind)
}

// plainCanonical reports, without allocating, whether p is printable ASCII
// and already canonical: the common case. NFC leaves ASCII unchanged, so
// cleanPath would return p itself.
func plainCanonical(p string) bool {
	if p == "" || len(p) > maxPathChars || p[0] == '/' {
		return false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) {
			if c := p[i]; c < 0x20 || c > 0x7e {
				return false
			} else if c != '/' {
				continue
			}
		}
		if seg := p[start:i]; seg == "" || seg == "." || seg == ".." {
			return false
		}
		start = i + 1
	}
	return true
}

// cleanPath is canonicalPath for any spelling.
func cleanPath(p string, kind pathKind) (string, error) {
	switch {
	case p == "":
		return "", errPathEmpty
	case len(p) > maxPathInputBytes:
		return "", errPathLong
	case !utf8.ValidString(p):
		return "", errPathUTF8
	case strings.IndexByte(p, 0) >= 0:
		return "", errPathNUL
	case p[0] == '/':
		return "", errPathAbsolute
	}
	if err := checkVisible(p); err != nil {
		return "", err
	}
	p = norm.NFC.String(p)
	segs := strings.Split(p, "/")
	last := segs[len(segs)-1]
	kept := make([]string, 0, len(segs))
	for _, s := range segs {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", errPathParent
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 || last == "" || last == "." {
		// A spelling that ends in a separator names a folder; turning it
		// into a file name would change what the caller asked for.
		if kind == kindFile {
			return "", errPathDir
		}
		if len(kept) == 0 {
			return ".", nil
		}
	}
	out := strings.Join(kept, "/")
	if utf8.RuneCountInString(out) > maxPathChars {
		return "", errPathLong
	}
	return out, nil
}

// checkVisible refuses characters that make a path read differently from
// what it names: C0 and C1 controls and DEL (category Cc), format
// characters such as bidi overrides, zero-width spaces and joiners, the
// byte order mark and soft hyphen (Cf), and line and paragraph separators
// (Zl, Zp). Policy compares paths code point by code point, so an invisible
// character is a second spelling a rule author cannot see.
func checkVisible(p string) error {
	for _, r := range p {
		if r < utf8.RuneSelf && r >= 0x20 && r != 0x7f {
			continue
		}
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return fmt.Errorf("must not contain control, format (bidi, zero-width) or line-separator characters (found %U)", r)
		}
	}
	return nil
}

// canonicalArg returns the string argument name as the driver uses it: it
// must already be canonical. The gateway hands over canonical arguments
// (see Normalize), so a non-canonical value comes only from a caller that
// bypassed it; such a value is refused, never interpreted.
func canonicalArg(name, p string, kind pathKind) (string, error) {
	c, err := canonicalPath(p, kind)
	if err != nil {
		return "", fmt.Errorf("%s %w", name, err)
	}
	if c != p {
		return "", fmt.Errorf("%s %q is not in canonical form; its canonical form is %q", name, p, c)
	}
	return p, nil
}

// pathArgs names, per operation, the argument that names a resource and
// what it names.
func pathArg(target string) (name string, kind pathKind, ok bool) {
	switch target {
	case opCreateFile, opReadFile, opEditFile, opDeleteFile:
		return "path", kindFile, true
	case opShell:
		return "cwd", kindDir, true
	}
	return "", 0, false
}

var (
	_ drivers.Normalizer = (*Driver)(nil)
	_ drivers.Normalizer = (*DriverConfig)(nil)
)

// Normalize implements drivers.Normalizer with NormalizeArgs.
func (d *Driver) Normalize(target string, a map[string]any) (map[string]any, bool, error) {
	return NormalizeArgs(target, a)
}

// Normalize implements drivers.Normalizer for decisions made without a
// running driver (toolgate policy authorize): the canonical form depends
// on the arguments alone, never on the workspace's contents.
func (c *DriverConfig) Normalize(target string, a map[string]any) (map[string]any, bool, error) {
	return NormalizeArgs(target, a)
}

// NormalizeArgs puts the path of a file operation, or the shell's cwd, in
// canonical form (see the package documentation), so that the policy
// decision and the operation see the same path. A path with no canonical
// form is a *drivers.ArgError. Tools that decide offline as the gateway
// would (toolgate policy authorize) call it without a Driver.
func NormalizeArgs(target string, a map[string]any) (map[string]any, bool, error) {
	name, kind, ok := pathArg(target)
	if !ok {
		return a, false, nil
	}
	raw, ok := a[name].(string)
	if !ok {
		return a, false, nil
	}
	c, err := canonicalPath(raw, kind)
	if err != nil {
		return nil, false, &drivers.ArgError{Arg: name, Err: err}
	}
	if c == raw {
		return a, false, nil
	}
	out := maps.Clone(a)
	out[name] = c
	return out, true, nil
}
