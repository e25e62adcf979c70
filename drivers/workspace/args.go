package workspace

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/internal/ident"
)

// Limits from the protocol's validation rules.
const (
	maxPathChars    = 255
	maxContentBytes = 10 << 20
	maxCommandChars = 4096
	minTimeout      = time.Second
	maxTimeout      = time.Hour
)

// Content encodings a caller may ask for.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// envNamePattern is the shape of an environment variable name a caller may set.
const envNamePattern = ident.EnvName

// args wraps one operation's arguments for typed, strict access.
type args map[string]any

// only rejects argument names outside allowed.
func (a args) only(allowed ...string) error {
	var unknown []string
	for name := range a {
		if !slices.Contains(allowed, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("unknown argument(s) %s; accepted: %s",
		strings.Join(quoteAll(unknown), ", "), strings.Join(allowed, ", "))
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

// str returns the string argument name. A missing optional argument yields
// ok false; a missing required one, or a value of another type, is an error.
func (a args) str(name string, required bool) (s string, ok bool, err error) {
	v, present := a[name]
	if !present {
		if required {
			return "", false, fmt.Errorf("%s is required", name)
		}
		return "", false, nil
	}
	s, isString := v.(string)
	if !isString {
		return "", false, fmt.Errorf("%s must be a string, got %s", name, drivers.JSONType(v))
	}
	return s, true, nil
}

// filePath returns the required path argument name, which must be the
// canonical path of a file (see canonicalPath).
func (a args) filePath(name string) (string, error) {
	p, _, err := a.str(name, true)
	if err != nil {
		return "", err
	}
	return canonicalArg(name, p, kindFile)
}

// boolean returns the optional boolean argument name, def when absent.
func (a args) boolean(name string, def bool) (bool, error) {
	v, present := a[name]
	if !present {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s must be a boolean, got %s", name, drivers.JSONType(v))
	}
	return b, nil
}

// encoding returns the optional encoding argument, "utf-8" when absent.
func (a args) encoding() (string, error) {
	enc, ok, err := a.str("encoding", false)
	if err != nil || !ok {
		return encodingUTF8, err
	}
	if enc != encodingUTF8 && enc != encodingBase64 {
		return "", fmt.Errorf("encoding must be %q or %q, got %q", encodingUTF8, encodingBase64, enc)
	}
	return enc, nil
}

// integer returns the optional integer argument name. JSON numbers arrive
// as json.Number from the gateway; Go callers may pass int, int64 or float64.
// A number with a zero fraction (1000.0) counts as an integer, as in JSON
// Schema.
func (a args) integer(name string) (n int64, ok bool, err error) {
	v, present := a[name]
	if !present {
		return 0, false, nil
	}
	notInt := fmt.Errorf("%s must be an integer, got %s", name, drivers.JSONType(v))
	var f float64
	switch v := v.(type) {
	case int:
		return int64(v), true, nil
	case int64:
		return v, true, nil
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n, true, nil
		}
		if f, err = v.Float64(); err != nil {
			return 0, false, notInt
		}
	case float64:
		f = v
	default:
		return 0, false, notInt
	}
	// Beyond ±2^53 a float no longer pins down one integer; no valid
	// argument is that large, so refusing it loses nothing.
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false, fmt.Errorf("%s must be an integer, got %v", name, f)
	}
	return int64(f), true, nil
}

// createArgs are the validated arguments of createFile.
type createArgs struct {
	path      string
	content   []byte
	overwrite bool
}

func parseCreate(a args) (createArgs, error) {
	var c createArgs
	if err := a.only("path", "content", "encoding", "overwrite"); err != nil {
		return c, err
	}
	var err error
	if c.path, err = a.filePath("path"); err != nil {
		return c, err
	}
	content, _, err := a.str("content", true)
	if err != nil {
		return c, err
	}
	enc, err := a.encoding()
	if err != nil {
		return c, err
	}
	if c.overwrite, err = a.boolean("overwrite", false); err != nil {
		return c, err
	}
	if enc == encodingUTF8 {
		if len(content) > maxContentBytes {
			return c, fmt.Errorf("content must be at most %d bytes, got %d", maxContentBytes, len(content))
		}
		c.content = []byte(content)
		return c, nil
	}
	// Refuse grossly oversized input before decoding it into memory. The
	// bound is loose because the decoder skips line breaks; the exact check
	// on the decoded size follows.
	if len(content) > 2*base64.StdEncoding.EncodedLen(maxContentBytes) {
		return c, fmt.Errorf("content must decode to at most %d bytes", maxContentBytes)
	}
	c.content, err = base64.StdEncoding.DecodeString(content)
	if err != nil {
		return c, fmt.Errorf("content is not valid base64: %w", err)
	}
	if len(c.content) > maxContentBytes {
		return c, fmt.Errorf("content must decode to at most %d bytes, got %d", maxContentBytes, len(c.content))
	}
	return c, nil
}

// readArgs are the validated arguments of readFile.
type readArgs struct {
	path     string
	encoding string
}

func parseRead(a args) (readArgs, error) {
	var r readArgs
	if err := a.only("path", "encoding"); err != nil {
		return r, err
	}
	var err error
	if r.path, err = a.filePath("path"); err != nil {
		return r, err
	}
	r.encoding, err = a.encoding()
	return r, err
}

// edit is one search-and-replace step of editFile.
type edit struct {
	old, new string
}

// editArgs are the validated arguments of editFile.
type editArgs struct {
	path  string
	edits []edit
}

func parseEdit(a args) (editArgs, error) {
	var e editArgs
	if err := a.only("path", "edits"); err != nil {
		return e, err
	}
	var err error
	if e.path, err = a.filePath("path"); err != nil {
		return e, err
	}
	raw, present := a["edits"]
	if !present {
		return e, errors.New("edits is required")
	}
	list, ok := raw.([]any)
	if !ok {
		return e, fmt.Errorf("edits must be an array, got %s", drivers.JSONType(raw))
	}
	// An empty list would rewrite the file unchanged; it is almost certainly
	// a caller bug, so it is reported rather than silently accepted.
	if len(list) == 0 {
		return e, errors.New("edits must contain at least one edit")
	}
	if len(list) > maxEdits {
		return e, fmt.Errorf("edits must contain at most %d edits, got %d", maxEdits, len(list))
	}
	e.edits = make([]edit, len(list))
	for i, item := range list {
		obj, ok := item.(map[string]any)
		if !ok {
			return e, fmt.Errorf("edits[%d] must be an object, got %s", i, drivers.JSONType(item))
		}
		ea := args(obj)
		if err := ea.only("oldContent", "newContent"); err != nil {
			return e, fmt.Errorf("edits[%d]: %w", i, err)
		}
		old, _, err := ea.str("oldContent", true)
		if err != nil {
			return e, fmt.Errorf("edits[%d]: %w", i, err)
		}
		repl, _, err := ea.str("newContent", true)
		if err != nil {
			return e, fmt.Errorf("edits[%d]: %w", i, err)
		}
		switch {
		case old == "":
			return e, fmt.Errorf("edits[%d]: oldContent must not be empty", i)
		case len(old) > maxContentBytes:
			return e, fmt.Errorf("edits[%d]: oldContent must be at most %d bytes", i, maxContentBytes)
		case len(repl) > maxContentBytes:
			return e, fmt.Errorf("edits[%d]: newContent must be at most %d bytes", i, maxContentBytes)
		}
		e.edits[i] = edit{old: old, new: repl}
	}
	return e, nil
}

// deleteArgs are the validated arguments of deleteFile.
type deleteArgs struct {
	path string
}

func parseDelete(a args) (deleteArgs, error) {
	var d deleteArgs
	if err := a.only("path"); err != nil {
		return d, err
	}
	var err error
	d.path, err = a.filePath("path")
	return d, err
}

// shellArgs are the validated arguments of shell.
type shellArgs struct {
	command string
	cwd     string // "" for the workspace root
	timeout time.Duration
	env     map[string]string
}

func parseShell(a args, defaultTimeout time.Duration) (shellArgs, error) {
	s := shellArgs{timeout: defaultTimeout}
	if err := a.only("command", "cwd", "timeout", shellEnvArg); err != nil {
		return s, err
	}
	cmd, _, err := a.str("command", true)
	if err != nil {
		return s, err
	}
	switch {
	case cmd == "":
		return s, errors.New("command must not be empty")
	case !utf8.ValidString(cmd):
		return s, errors.New("command must be valid UTF-8")
	case utf8.RuneCountInString(cmd) > maxCommandChars:
		return s, fmt.Errorf("command must be at most %d characters", maxCommandChars)
	case strings.IndexByte(cmd, 0) >= 0:
		return s, errors.New("command must not contain a NUL byte")
	}
	s.command = cmd

	cwd, ok, err := a.str("cwd", false)
	if err != nil {
		return s, err
	}
	if ok {
		if s.cwd, err = canonicalArg("cwd", cwd, kindDir); err != nil {
			return s, err
		}
		if s.cwd == "." {
			s.cwd = ""
		}
	}

	ms, ok, err := a.integer("timeout")
	if err != nil {
		return s, err
	}
	if ok {
		if ms < minTimeout.Milliseconds() || ms > maxTimeout.Milliseconds() {
			return s, fmt.Errorf("timeout must be between %d and %d milliseconds, got %d",
				minTimeout.Milliseconds(), maxTimeout.Milliseconds(), ms)
		}
		s.timeout = time.Duration(ms) * time.Millisecond
	}

	raw, present := a[shellEnvArg]
	if !present {
		return s, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return s, fmt.Errorf("env must be an object, got %s", drivers.JSONType(raw))
	}
	s.env = make(map[string]string, len(obj))
	for name, v := range obj {
		if !envNamePattern.MatchString(name) {
			return s, fmt.Errorf("env name %q must match %s", name, envNamePattern)
		}
		val, ok := v.(string)
		if !ok {
			return s, fmt.Errorf("env[%q] must be a string, got %s", name, drivers.JSONType(v))
		}
		if strings.IndexByte(val, 0) >= 0 {
			return s, fmt.Errorf("env[%q] must not contain a NUL byte", name)
		}
		s.env[name] = val
	}
	return s, nil
}
