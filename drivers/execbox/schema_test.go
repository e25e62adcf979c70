package execbox

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

var update = flag.Bool("update", false, "rewrite the golden schema file in testdata/schemas")

// TestCodeRunSchemaMatchesGolden pins code.run's schema for a driver
// with a 30 s limit; -update rewrites it after a deliberate change.
func TestCodeRunSchemaMatchesGolden(t *testing.T) {
	t.Parallel()
	d := &Driver{timeout: 30 * time.Second}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, d.InputSchema("code.run"), "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	path := filepath.Join("testdata", "schemas", "code.run.json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Errorf("schema changed (go test -run %s -update to accept):\n%s", t.Name(), pretty.String())
	}
}

// TestCodeRunSchemaAgreesWithParseArgs: the schema accepts exactly what
// parseArgs accepts, for the rules a schema can state.
func TestCodeRunSchemaAgreesWithParseArgs(t *testing.T) {
	t.Parallel()
	limit := 30 * time.Second
	d := &Driver{timeout: limit}
	var s jsonschema.Schema
	if err := json.Unmarshal(d.InputSchema(""), &s); err != nil {
		t.Fatal(err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		`{"code":"1"}`,
		`{"code":"1","providers":["a"],"timeoutMs":30000}`,
		`{"code":""}`,
		`{}`,
		`{"code":1}`,
		`{"code":"1","timeoutMs":0}`,
		`{"code":"1","timeoutMs":30001}`,
		`{"code":"1","timeoutMs":1.5}`,
		`{"code":"1","providers":"a"}`,
		`{"code":"1","providers":[1]}`,
		`{"code":"1","memory":1}`,
	} {
		var plain map[string]any
		if err := json.Unmarshal([]byte(args), &plain); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(args))
		dec.UseNumber()
		var numbers map[string]any
		if err := dec.Decode(&numbers); err != nil {
			t.Fatal(err)
		}
		schemaErr := resolved.Validate(plain)
		_, parseErr := parseArgs(numbers, limit)
		if (schemaErr == nil) != (parseErr == nil) {
			t.Errorf("%s: schema says %v, parseArgs says %v", args, schemaErr, parseErr)
		}
	}
}
