package workspace

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

var update = flag.Bool("update", false, "rewrite the golden schema files in testdata/schemas")

// TestOperationSchemasMatchGolden pins each operation's schema as clients
// see it; -update rewrites the files after a deliberate change.
func TestOperationSchemasMatchGolden(t *testing.T) {
	t.Parallel()
	d := &Driver{}
	for _, op := range Operations() {
		got := d.InputSchema(op)
		if got == nil {
			t.Fatalf("%s: no schema", op)
		}
		var pretty bytes.Buffer
		mustSchema(t, json.Indent(&pretty, got, "", "  "))
		pretty.WriteByte('\n')
		path := filepath.Join("testdata", "schemas", op+".json")
		if *update {
			mustSchema(t, os.MkdirAll(filepath.Dir(path), 0o755))
			mustSchema(t, os.WriteFile(path, pretty.Bytes(), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		mustSchema(t, err)
		if !bytes.Equal(pretty.Bytes(), want) {
			t.Errorf("%s: schema changed (go test -run %s -update to accept):\n%s", op, t.Name(), pretty.String())
		}
	}
	if d.InputSchema("rmrf") != nil {
		t.Error("an unknown target has a schema")
	}
}

// TestSchemasAgreeWithTheArgumentParsers: for the rules a schema can
// state (names, types, required, enums, lengths, bounds), the schema
// accepts exactly what the operation's parser accepts.
func TestSchemasAgreeWithTheArgumentParsers(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name, op, args string
	}{
		{"a file is created from its path and content", opCreateFile, `{"path":"a.txt","content":"x"}`},
		{"createFile takes encoding and overwrite", opCreateFile, `{"path":"a.txt","content":"eA==","encoding":"base64","overwrite":true}`},
		{"createFile needs content", opCreateFile, `{"path":"a.txt"}`},
		{"createFile refuses an unknown argument", opCreateFile, `{"path":"a.txt","content":"x","mode":"0777"}`},
		{"createFile refuses an unknown encoding", opCreateFile, `{"path":"a.txt","content":"x","encoding":"latin1"}`},
		{"overwrite must be a boolean", opCreateFile, `{"path":"a.txt","content":"x","overwrite":"yes"}`},
		{"a path must be a string", opReadFile, `{"path":7}`},
		{"readFile needs a path", opReadFile, `{}`},
		{"readFile takes an encoding", opReadFile, `{"path":"a.txt","encoding":"utf-8"}`},
		{"an empty path is refused", opDeleteFile, `{"path":""}`},
		{"a path spelled too long is refused", opDeleteFile, `{"path":"` + long(maxPathInputBytes+1) + `"}`},
		{"deleteFile takes only a path", opDeleteFile, `{"path":"a.txt","force":true}`},
		{"an edit replaces old with new", opEditFile, `{"path":"a.txt","edits":[{"oldContent":"a","newContent":""}]}`},
		{"edits must not be empty", opEditFile, `{"path":"a.txt","edits":[]}`},
		{"an edit needs oldContent", opEditFile, `{"path":"a.txt","edits":[{"newContent":"b"}]}`},
		{"oldContent must not be empty", opEditFile, `{"path":"a.txt","edits":[{"oldContent":"","newContent":"b"}]}`},
		{"an edit takes no other key", opEditFile, `{"path":"a.txt","edits":[{"oldContent":"a","newContent":"b","all":true}]}`},
		{"edits must be an array", opEditFile, `{"path":"a.txt","edits":{"oldContent":"a","newContent":"b"}}`},
		{"a command runs", opShell, `{"command":"ls"}`},
		{"shell takes cwd, timeout and env", opShell, `{"command":"ls","cwd":"src","timeout":1000,"env":{"A_B":"1"}}`},
		{"a command must not be empty", opShell, `{"command":""}`},
		{"a command is at most 4096 characters", opShell, `{"command":"` + long(maxCommandChars+1) + `"}`},
		{"a timeout below a second is refused", opShell, `{"command":"ls","timeout":999}`},
		{"a timeout above an hour is refused", opShell, `{"command":"ls","timeout":3600001}`},
		{"a timeout must be an integer", opShell, `{"command":"ls","timeout":1500.5}`},
		{"a timeout of 1000.0 is an integer", opShell, `{"command":"ls","timeout":1000.0}`},
		{"an env name must be a variable name", opShell, `{"command":"ls","env":{"1A":"x"}}`},
		{"an env value must be a string", opShell, `{"command":"ls","env":{"A":1}}`},
		{"shell refuses an unknown argument", opShell, `{"command":"ls","user":"root"}`},
	}
	d := &Driver{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s jsonschema.Schema
			mustSchema(t, json.Unmarshal(d.InputSchema(tc.op), &s))
			resolved, err := s.Resolve(nil)
			mustSchema(t, err)
			var plain map[string]any
			mustSchema(t, json.Unmarshal([]byte(tc.args), &plain))
			schemaErr := resolved.Validate(plain)
			parserErr := parseFor(tc.op, decodeNumbers(t, tc.args))
			if (schemaErr == nil) != (parserErr == nil) {
				t.Errorf("%s %s: schema says %v, parser says %v", tc.op, tc.args, schemaErr, parserErr)
			}
		})
	}
}

// parseFor runs an operation's argument parser.
func parseFor(op string, a args) error {
	var err error
	switch op {
	case opCreateFile:
		_, err = parseCreate(a)
	case opReadFile:
		_, err = parseRead(a)
	case opEditFile:
		_, err = parseEdit(a)
	case opDeleteFile:
		_, err = parseDelete(a)
	case opShell:
		_, err = parseShell(a, 30*time.Second)
	}
	return err
}

// decodeNumbers decodes arguments as the gateway hands them to a driver.
func decodeNumbers(t *testing.T, s string) args {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	mustSchema(t, dec.Decode(&m))
	return m
}

func TestHintsNameReadOnlyAndDestructiveOperations(t *testing.T) {
	t.Parallel()
	d := &Driver{}
	if h := d.Hints(opReadFile); !h.ReadOnly || h.Destructive {
		t.Errorf("readFile hints %+v, want read-only", h)
	}
	for _, op := range []string{opDeleteFile, opShell} {
		if h := d.Hints(op); h.ReadOnly || !h.Destructive {
			t.Errorf("%s hints %+v, want destructive", op, h)
		}
	}
}

func mustSchema(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
