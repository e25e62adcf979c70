package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/drivers"
)

// newTestDriver returns a driver on a fresh workspace folder and that folder.
func newTestDriver(t *testing.T) (*Driver, string) {
	t.Helper()
	return newTestDriverConfig(t, Config{})
}

func newTestDriverConfig(t *testing.T, cfg Config) (*Driver, string) {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = filepath.Join(t.TempDir(), "ws")
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	root, err := filepath.EvalSymlinks(cfg.Root)
	if err != nil {
		t.Fatal(err)
	}
	return d, root
}

// decode turns a JSON object into tool args the way the gateway does, with
// numbers as json.Number.
func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

// run performs op and fails the test on a Go error.
func run(t *testing.T, d *Driver, op string, a map[string]any) drivers.Result {
	t.Helper()
	return runCtx(t, context.Background(), d, op, a)
}

func runCtx(t *testing.T, ctx context.Context, d *Driver, op string, a map[string]any) drivers.Result {
	t.Helper()
	res, err := d.Run(ctx, drivers.Call{RequestID: "req-1", ToolID: "workspace." + op, Target: op, Args: a})
	if err != nil {
		t.Fatalf("Run %s: unexpected Go error: %v", op, err)
	}
	// Every result must survive the JSON encoding the gateway applies.
	if _, err := json.Marshal(res.Data); err != nil {
		t.Fatalf("Run %s: Data is not JSON-encodable: %v", op, err)
	}
	return res
}

func dataOf(t *testing.T, res drivers.Result) map[string]any {
	t.Helper()
	m, ok := res.Data.(map[string]any)
	if !ok {
		t.Fatalf("Data is %T, want map[string]any", res.Data)
	}
	return m
}

// wantFailure checks that res is a failure of the given exit code and
// category whose message contains substr.
func wantFailure(t *testing.T, res drivers.Result, exitCode int, category, substr string) {
	t.Helper()
	data := dataOf(t, res)
	if res.ExitCode != exitCode {
		t.Errorf("ExitCode = %d, want %d (stderr %q)", res.ExitCode, exitCode, res.Stderr)
	}
	if data["success"] != false {
		t.Errorf("success = %v, want false", data["success"])
	}
	if data["category"] != category {
		t.Errorf("category = %v, want %q", data["category"], category)
	}
	msg, _ := data["error"].(string)
	if !strings.Contains(msg, substr) {
		t.Errorf("error = %q, want it to contain %q", msg, substr)
	}
	if !strings.Contains(res.Stderr, msg) {
		t.Errorf("Stderr = %q, want it to carry the error %q", res.Stderr, msg)
	}
}

func wantSuccess(t *testing.T, res drivers.Result) map[string]any {
	t.Helper()
	data := dataOf(t, res)
	if res.ExitCode != 0 || data["success"] != true {
		t.Fatalf("want success, got ExitCode %d, data %v, stderr %q", res.ExitCode, data, res.Stderr)
	}
	if _, ok := data["error"]; ok {
		t.Errorf("successful result carries error %v", data["error"])
	}
	return data
}

func TestNew(t *testing.T) {
	t.Parallel()
	t.Run("defaults and root creation", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "a", "b")
		d, err := New(Config{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		fi, err := os.Stat(root)
		if err != nil || !fi.IsDir() {
			t.Fatalf("root not created: %v", err)
		}
		if got := fi.Mode().Perm(); got&^dirMode != 0 {
			t.Errorf("root mode = %v, want within %v", got, dirMode)
		}
		if d.outputLimit != 1<<20 || d.defaultTimeout.Seconds() != 30 || d.shell != "/bin/sh" {
			t.Errorf("defaults = %d, %v, %q", d.outputLimit, d.defaultTimeout, d.shell)
		}
	})

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing root", Config{}, "Root is required"},
		{"root is a file", Config{Root: file}, "create root"},
		{"negative output limit", Config{Root: t.TempDir(), OutputLimit: -1}, "OutputLimit"},
		{"timeout too short", Config{Root: t.TempDir(), DefaultTimeout: 999_000_000}, "DefaultTimeout"},
		{"timeout too long", Config{Root: t.TempDir(), DefaultTimeout: 3601_000_000_000}, "DefaultTimeout"},
		{"relative shell", Config{Root: t.TempDir(), Shell: "sh"}, "absolute"},
		{"missing shell", Config{Root: t.TempDir(), Shell: "/nonexistent/sh"}, "Shell"},
		{"shell not executable", Config{Root: t.TempDir(), Shell: file}, "not an executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(tt.cfg)
			if err == nil {
				d.Close()
				t.Fatal("New succeeded, want error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestOperationsAndEngine(t *testing.T) {
	t.Parallel()
	want := []string{"createFile", "deleteFile", "editFile", "readFile", "shell"}
	if got := Operations(); !slices.Equal(got, want) {
		t.Errorf("Operations() = %v, want %v", got, want)
	}
	Operations()[0] = "mutated"
	if Operations()[0] != "createFile" {
		t.Error("Operations returns shared state")
	}
	d, _ := newTestDriver(t)
	if d.Engine() != "workspace" {
		t.Errorf("Engine() = %q", d.Engine())
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	t.Run("unknown target", func(t *testing.T) {
		d, _ := newTestDriver(t)
		_, err := d.Run(context.Background(), drivers.Call{Target: "format"})
		if !errors.Is(err, drivers.ErrUnknownTarget) {
			t.Fatalf("err = %v, want ErrUnknownTarget", err)
		}
		if !strings.Contains(err.Error(), `"format"`) {
			t.Errorf("error %q does not name the target", err)
		}
	})
	t.Run("closed driver", func(t *testing.T) {
		d, _ := newTestDriver(t)
		d.Close()
		_, err := d.Run(context.Background(), drivers.Call{Target: "readFile", Args: decode(t, `{"path":"a"}`)})
		if err == nil {
			t.Fatal("Run after Close succeeded")
		}
	})
	t.Run("root removed", func(t *testing.T) {
		d, root := newTestDriver(t)
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		for _, op := range Operations() {
			_, err := d.Run(context.Background(), drivers.Call{Target: op, Args: decode(t, `{"path":"a","content":"x","command":"true"}`)})
			if err == nil {
				t.Errorf("%s on a removed root succeeded without a Go error", op)
			}
		}
	})
}

func TestValidation(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 256)
	tests := []struct {
		name string
		op   string
		args string
		want string
	}{
		{"create missing path", "createFile", `{"content":"x"}`, "path is required"},
		{"create path not a string", "createFile", `{"path":1,"content":"x"}`, "path must be a string, got a number"},
		{"create path null", "createFile", `{"path":null,"content":"x"}`, "path must be a string, got null"},
		{"create empty path", "createFile", `{"path":"","content":"x"}`, "path must not be empty"},
		{"create absolute path", "createFile", `{"path":"/etc/passwd","content":"x"}`, "must be relative"},
		{"create parent path", "createFile", `{"path":"../x","content":"x"}`, "'..'"},
		{"create nested escape", "createFile", `{"path":"a/../../x","content":"x"}`, "'..'"},
		{"create trailing parent", "createFile", `{"path":"a/..","content":"x"}`, "'..'"},
		{"create trailing slash", "createFile", `{"path":"dir/","content":"x"}`, "path must name a file, not end in '/'"},
		{"delete trailing slash", "deleteFile", `{"path":"dir/"}`, "must name a file"},
		{"create NUL in path", "createFile", `{"path":"a\u0000b","content":"x"}`, "NUL"},
		{"create path too long", "createFile", `{"path":"` + long + `","content":"x"}`, "at most 255"},
		{"create missing content", "createFile", `{"path":"a"}`, "content is required"},
		{"create content not a string", "createFile", `{"path":"a","content":["x"]}`, "content must be a string, got an array"},
		{"create bad encoding", "createFile", `{"path":"a","content":"x","encoding":"latin1"}`, `encoding must be "utf-8" or "base64"`},
		{"create invalid base64", "createFile", `{"path":"a","content":"!!!","encoding":"base64"}`, "not valid base64"},
		{"create overwrite not a boolean", "createFile", `{"path":"a","content":"x","overwrite":"yes"}`, "overwrite must be a boolean"},
		{"create unknown argument", "createFile", `{"path":"a","content":"x","overwrit":true}`, `unknown argument(s) "overwrit"`},
		{"read unknown argument", "readFile", `{"path":"a","content":"x"}`, `unknown argument(s) "content"`},
		{"read missing path", "readFile", `{}`, "path is required"},
		{"read bad encoding", "readFile", `{"path":"a","encoding":"utf8"}`, "encoding must be"},
		{"edit missing edits", "editFile", `{"path":"a"}`, "edits is required"},
		{"edit edits not an array", "editFile", `{"path":"a","edits":{"oldContent":"x","newContent":"y"}}`, "edits must be an array, got an object"},
		{"edit empty edits", "editFile", `{"path":"a","edits":[]}`, "at least one edit"},
		{"edit item not an object", "editFile", `{"path":"a","edits":["x"]}`, "edits[0] must be an object"},
		{"edit empty oldContent", "editFile", `{"path":"a","edits":[{"oldContent":"","newContent":"x"}]}`, "edits[0]: oldContent must not be empty"},
		{"edit missing newContent", "editFile", `{"path":"a","edits":[{"oldContent":"x"}]}`, "edits[0]: newContent is required"},
		{"edit unknown key in second edit", "editFile", `{"path":"a","edits":[{"oldContent":"x","newContent":"y"},{"old":"x","oldContent":"x","newContent":"y"}]}`, `edits[1]: unknown argument(s) "old"`},
		{"edit escaping path", "editFile", `{"path":"../a","edits":[{"oldContent":"x","newContent":"y"}]}`, "'..'"},
		{"delete unknown argument", "deleteFile", `{"path":"a","recursive":true}`, `unknown argument(s) "recursive"`},
		{"delete absolute path", "deleteFile", `{"path":"/etc/passwd"}`, "must be relative"},
		{"shell missing command", "shell", `{}`, "command is required"},
		{"shell empty command", "shell", `{"command":""}`, "command must not be empty"},
		{"shell command too long", "shell", `{"command":"` + strings.Repeat("x", 4097) + `"}`, "at most 4096"},
		{"shell NUL in command", "shell", `{"command":"echo \u0000"}`, "NUL"},
		{"shell typo", "shell", `{"comand":"ls"}`, `unknown argument(s) "comand"`},
		{"shell escaping cwd", "shell", `{"command":"ls","cwd":"../"}`, "cwd must not contain a '..'"},
		{"shell absolute cwd", "shell", `{"command":"ls","cwd":"/tmp"}`, "cwd must be relative"},
		{"shell timeout too short", "shell", `{"command":"ls","timeout":999}`, "timeout must be between 1000 and 3600000"},
		{"shell timeout too long", "shell", `{"command":"ls","timeout":3600001}`, "timeout must be between"},
		{"shell fractional timeout", "shell", `{"command":"ls","timeout":1500.5}`, "timeout must be an integer"},
		{"shell timeout as string", "shell", `{"command":"ls","timeout":"1000"}`, "timeout must be an integer, got a string"},
		{"shell env not an object", "shell", `{"command":"ls","env":["A=1"]}`, "env must be an object"},
		{"shell env name starts with a digit", "shell", `{"command":"ls","env":{"1A":"x"}}`, `env name "1A" must match`},
		{"shell env name with a dash", "shell", `{"command":"ls","env":{"A-B":"x"}}`, `env name "A-B"`},
		{"shell env name empty", "shell", `{"command":"ls","env":{"":"x"}}`, `env name ""`},
		{"shell env value not a string", "shell", `{"command":"ls","env":{"A":1}}`, `env["A"] must be a string`},
		{"shell env value with NUL", "shell", `{"command":"ls","env":{"A":"a\u0000b"}}`, `env["A"] must not contain a NUL`},
	}
	d, root := newTestDriver(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, d, tt.op, decode(t, tt.args))
			wantFailure(t, res, 2, "validation", tt.want)
		})
	}
	// Nothing a rejected call named may have been created.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != tmpDirName {
			t.Errorf("validation failures left %q in the workspace", e.Name())
		}
	}
}

func TestValidationGoCallers(t *testing.T) {
	t.Parallel()
	d, _ := newTestDriver(t)
	tests := []struct {
		name string
		op   string
		args map[string]any
		want string // "" means accepted
	}{
		{"path not UTF-8", "createFile", map[string]any{"path": "a\xffb", "content": "x"}, "path must be valid UTF-8"},
		{"content over 10 MiB", "createFile", map[string]any{"path": "big", "content": strings.Repeat("x", 10<<20+1)}, "content must be at most 10485760 bytes"},
		{"base64 content decoding over 10 MiB", "createFile", map[string]any{"path": "big", "content": strings.Repeat("AAAA", (10<<20)/3+1), "encoding": "base64"}, "decode to at most"},
		{"content of exactly 10 MiB", "createFile", map[string]any{"path": "max", "content": strings.Repeat("x", 10<<20)}, ""},
		{"path of 255 characters", "createFile", map[string]any{"path": strings.Repeat("d/", 127) + "f", "content": "x"}, ""},
		{"255 multi-byte characters", "createFile", map[string]any{"path": strings.Repeat("é", 100) + "/" + strings.Repeat("é", 100), "content": "x"}, ""},
		{"timeout as int", "shell", map[string]any{"command": "true", "timeout": 2000}, ""},
		{"timeout as float64", "shell", map[string]any{"command": "true", "timeout": 2000.0}, ""},
		{"timeout as integral json.Number", "shell", map[string]any{"command": "true", "timeout": json.Number("2000.0")}, ""},
		{"timeout at the maximum", "shell", map[string]any{"command": "true", "timeout": json.Number("3600000")}, ""},
		{"timeout as fractional float64", "shell", map[string]any{"command": "true", "timeout": 1000.5}, "must be an integer"},
		{"timeout as huge float64", "shell", map[string]any{"command": "true", "timeout": 1e300}, "must be an integer"},
		{"timeout as uint", "shell", map[string]any{"command": "true", "timeout": uint(2000)}, "must be an integer, got a uint"},
		{"env as map[string]string", "shell", map[string]any{"command": "true", "env": map[string]string{"A": "b"}}, "env must be an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, d, tt.op, tt.args)
			if tt.want == "" {
				wantSuccess(t, res)
				return
			}
			wantFailure(t, res, 2, "validation", tt.want)
		})
	}
}

func TestConcurrentCreateSamePath(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
	)
	for i := range n {
		content := fmt.Sprintf("writer %d", i)
		wg.Go(func() {
			res, err := d.Run(context.Background(), drivers.Call{
				Target: "createFile",
				Args:   map[string]any{"path": "race/target.txt", "content": content},
			})
			if err != nil {
				t.Error(err)
				return
			}
			switch res.ExitCode {
			case 0:
				mu.Lock()
				winners = append(winners, content)
				mu.Unlock()
			case 1:
				if !strings.Contains(res.Stderr, "already exists") {
					t.Errorf("loser stderr = %q", res.Stderr)
				}
			default:
				t.Errorf("ExitCode %d: %s", res.ExitCode, res.Stderr)
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d createFile calls succeeded, want exactly 1", len(winners))
	}
	got, err := os.ReadFile(filepath.Join(root, "race", "target.txt"))
	if err != nil || string(got) != winners[0] {
		t.Errorf("file = %q, %v; want the winner's %q", got, err, winners[0])
	}
	assertNoTempFiles(t, root)
}

func TestConcurrentMixedOperations(t *testing.T) {
	t.Parallel()
	d, root := newTestDriver(t)
	if err := os.WriteFile(filepath.Join(root, "counter"), []byte("n"), 0o640); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ops := []struct {
				op   string
				args map[string]any
			}{
				{"editFile", map[string]any{"path": "counter", "edits": []any{map[string]any{"oldContent": "n", "newContent": "nn"}}}},
				{"readFile", map[string]any{"path": "counter"}},
				{"createFile", map[string]any{"path": fmt.Sprintf("f%d", i), "content": "x"}},
				{"deleteFile", map[string]any{"path": fmt.Sprintf("f%d", i)}},
			}
			for _, o := range ops {
				res, err := d.Run(context.Background(), drivers.Call{Target: o.op, Args: o.args})
				if err != nil || res.ExitCode != 0 {
					t.Errorf("%s: %v %d %s", o.op, err, res.ExitCode, res.Stderr)
				}
			}
		})
	}
	wg.Wait()
	// Serialized read-modify-write: no edit was lost.
	got, err := os.ReadFile(filepath.Join(root, "counter"))
	if err != nil || len(got) != n+1 {
		t.Errorf("counter has %d bytes (%v), want %d: an edit was lost", len(got), err, n+1)
	}
}
