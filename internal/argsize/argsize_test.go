package argsize

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// shape counts the values and the depth of a decoded JSON value as
// ScanJSON does.
func shape(v any) (nodes, depth int) {
	switch v := v.(type) {
	case map[string]any:
		nodes, inner := 1, 0
		for _, x := range v {
			n, d := shape(x)
			nodes, inner = nodes+n, max(inner, d)
		}
		return nodes, inner + 1
	case []any:
		nodes, inner := 1, 0
		for _, x := range v {
			n, d := shape(x)
			nodes, inner = nodes+n, max(inner, d)
		}
		return nodes, inner + 1
	}
	return 1, 0
}

// checkAgainstDecoder asserts that ScanJSON accepts b at its exact shape
// and refuses it one value or one level short.
func checkAgainstDecoder(t *testing.T, b []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return // more than one value: not what doors take
	}
	nodes, depth := shape(v)
	if depth > maxScanDepth {
		return
	}
	if err := ScanJSON(b, depth, nodes); err != nil {
		t.Fatalf("%q: depth %d, %d values: refused at its own shape: %v", b, depth, nodes, err)
	}
	if err := ScanJSON(b, maxScanDepth, nodes-1); !errors.Is(err, ErrTooManyValues) {
		t.Fatalf("%q: %d values accepted with a limit of %d (%v)", b, nodes, nodes-1, err)
	}
	if depth > 0 {
		if err := ScanJSON(b, depth-1, nodes); !errors.Is(err, ErrTooDeep) {
			t.Fatalf("%q: depth %d accepted with a limit of %d (%v)", b, depth, depth-1, err)
		}
	}
}

func TestScanJSONCountsAsTheDecoder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, json string }{
		{"a scalar", `42`},
		{"a string with escapes and brackets", `"a\"{[b\\"`},
		{"an empty object", `{}`},
		{"an object of scalars", `{"a":1,"b":"x","c":true,"d":null}`},
		{"keys that look like values", `{"{":"[","]":{"}":[]}}`},
		{"nested lists", `[[[[1,2],[3]],[]],4]`},
		{"an MCP call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"p":"x","n":[1,2,{"k":false}]},"_meta":{}}}`},
		{"white space everywhere", " { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } "},
		{"exponents and signs", `[-1e+10,2.5E-3,0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkAgainstDecoder(t, []byte(tc.json))
		})
	}
}

func TestScanJSONRefusesBeforeTheEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		json  string
		depth int
		nodes int
		want  error
	}{
		{"10,000 opening brackets", strings.Repeat("[", 10000), MaxBodyDepth, MaxBodyNodes, ErrTooDeep},
		{"a list of a million zeros", "[" + strings.Repeat("0,", 1<<20) + "0]", MaxBodyDepth, MaxBodyNodes, ErrTooManyValues},
		{"an object of 100,000 keys", "{" + strings.Repeat(`"k":1,`, 100000) + `"k":1}`, MaxBodyDepth, MaxBodyNodes, ErrTooManyValues},
		{"a limit beyond what it follows", strings.Repeat("[", maxScanDepth+1), 1 << 20, MaxBodyNodes, ErrTooDeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := ScanJSON([]byte(tc.json), tc.depth, tc.nodes); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestScanJSONAllocatesNothing(t *testing.T) {
	b := []byte(`{"a":[1,2,{"b":"c"}],"d":"e"}`)
	if n := testing.AllocsPerRun(100, func() { _ = ScanJSON(b, MaxBodyDepth, MaxBodyNodes) }); n != 0 {
		t.Fatalf("%v allocations per scan", n)
	}
}

func FuzzScanJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[1,"a",{"b":null}]`, `{"a":{"b":{"c":[[]]}}}`, `"\\\""`, `{"a" 1}`, `[`, `]]]`, `{"k":"v",}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = ScanJSON(b, 8, 64) // never panics on any input
		checkAgainstDecoder(t, b)
	})
}

func BenchmarkScanJSON(b *testing.B) {
	body := []byte(`{"args":{"s":"` + strings.Repeat("x", MaxBytes-32) + `"}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := ScanJSON(body, MaxBodyDepth, MaxBodyNodes); err != nil {
			b.Fatal(err)
		}
	}
}
