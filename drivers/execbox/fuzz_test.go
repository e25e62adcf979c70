package execbox

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// cleanForStderr reports whether s is what cleanText promises.
func cleanForStderr(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

// FuzzRunnerMessage decodes arbitrary runner messages. Whatever arrives,
// the decoder must not panic, must classify the message, and everything
// it passes on must be safe: known error codes, cleaned messages, plain
// JSON values within the depth limit.
func FuzzRunnerMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"started","id":"req-1"}`,
		`{"type":"tool_call","callId":"call-1","providerName":"tools","safeToolName":"echo","input":{"ok":true}}`,
		`{"type":"tool_call","callId":"call-2","providerName":"tools","safeToolName":"echo"}`,
		`{"type":"done","id":"req-1","ok":true,"durationMs":3,"logs":[],"result":true}`,
		`{"type":"done","id":"req-1","ok":false,"durationMs":1005,"logs":["a"],"error":{"code":"timeout","message":"Execution timed out"}}`,
		`{"type":"done","id":"req-1","ok":false,"logs":[],"error":{"code":"root","message":"forged\u0000"}}`,
		`{"type":"done","id":"req-1","ok":true,"result":[[[[[[[[[[1e999]]]]]]]]]]}`,
		`{"type":"mystery"}`,
		`[1,2,3]`,
		`{"type":`,
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := decodeRunnerMessage(data)
		if again := decodeRunnerMessage(data); !reflect.DeepEqual(m, again) {
			t.Fatalf("decoding is not deterministic: %#v then %#v", m, again)
		}
		if !utf8.ValidString(m.typ) || len(m.typ) > maxNameText+len("…") || strings.ContainsAny(m.typ, "\n\r") {
			t.Fatalf("type %q not cleaned", m.typ)
		}
		switch m.kind {
		case kindMalformed:
			if m.reason == "" {
				t.Fatal("malformed message without a reason")
			}
		case kindUnknown, kindStarted:
		case kindToolCall:
			if m.callID == "" || len(m.callID) > maxCallIDBytes || !utf8.ValidString(m.callID) {
				t.Fatalf("tool_call with callId %q accepted", m.callID)
			}
			if m.inputErr == nil {
				checkPlain(t, m.input)
			}
		case kindDone:
			out := m.done
			if out.code == "" {
				checkPlain(t, out.data)
				break
			}
			if !knownCode(out.code) {
				t.Fatalf("done passes on the unknown code %q", out.code)
			}
			if out.message == "" || !cleanForStderr(out.message) || len(out.message) > maxMessageText+200 {
				t.Fatalf("done message %q not cleaned", out.message)
			}
			s := session{d: &Driver{}, opts: runOptions{MaxLogLines: 100, MaxLogChars: 1000}}
			r := s.result(&out)
			if r.ExitCode == 0 || !strings.HasPrefix(r.Stderr, out.code+": ") || r.Data != nil {
				t.Fatalf("failed done maps to %+v", r)
			}
		default:
			t.Fatalf("unknown kind %d", m.kind)
		}
	})
}

// checkPlain fails unless v re-encodes as JSON within the depth limit.
func checkPlain(t *testing.T, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted value does not re-encode: %v", err)
	}
	if jsonDepth(b) > maxJSONDepth {
		t.Fatalf("accepted value nested %d deep", jsonDepth(b))
	}
}

// FuzzParseArgs checks argument validation on arbitrary JSON arguments:
// it never panics, and what it accepts respects every limit.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		`{"code":"return 1"}`,
		`{"code":"x","timeoutMs":250,"providers":["github","tools"]}`,
		`{"code":"x","timeoutMs":1.5}`,
		`{"code":"x","timeoutMs":1e300}`,
		`{"code":"x","timeoutMs":-9223372036854775808}`,
		`{"code":"x","providers":[1]}`,
		`{"code":"","extra":true}`,
	} {
		f.Add([]byte(seed))
	}
	const limit = 3 * time.Second
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var args map[string]any
		if dec.Decode(&args) != nil {
			return
		}
		a, err := parseArgs(args, limit)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "args.") && !strings.HasPrefix(msg, "unknown argument") {
				t.Fatalf("error %q does not name the argument", msg)
			}
			return
		}
		if a.code == "" || len(a.code) > maxCodeBytes || a.timeout < time.Millisecond || a.timeout > limit {
			t.Fatalf("accepted %+v", a)
		}
		if a.allProviders != (args["providers"] == nil) {
			t.Fatalf("providers %v gave allProviders %v", args["providers"], a.allProviders)
		}
	})
}

// FuzzMapTools checks the naming of tools for arbitrary catalogs: every
// name is an identifier, no two tools share one, a namespace has one
// provider and the catalog's order does not matter.
func FuzzMapTools(f *testing.F) {
	f.Add("github.issues.list\nsearch.web\necho")
	f.Add("a.x-y\na.x_y\na.x_y_2\nmy-ns.a\nmy_ns.b")
	f.Add("class.new\nconsole.log\n.x\nx.\n1.2\n\u00e9.\u00fc")
	f.Fuzz(func(t *testing.T, list string) {
		ids := strings.Split(list, "\n")
		entries := mapTools(infos(ids...))
		reversed := make([]string, len(ids))
		for i, id := range ids {
			reversed[len(ids)-1-i] = id
		}
		if got, want := names(mapTools(infos(reversed...))), names(entries); !reflect.DeepEqual(got, want) {
			t.Fatalf("order changes names: %q vs %q", got, want)
		}
		pairs := map[string]bool{}
		providerOf := map[string]string{}
		namespaceOf := map[string]string{}
		for _, e := range entries {
			for _, name := range []string{e.provider, e.safeName} {
				if !jsIdentifier.MatchString(name) || reservedWord(name) {
					t.Fatalf("tool %q: %q is not a usable identifier", e.toolID, name)
				}
			}
			if guestGlobal(e.provider) || objectProperty(e.safeName) {
				t.Fatalf("tool %q maps to %s.%s, which shadows a builtin", e.toolID, e.provider, e.safeName)
			}
			key := e.provider + "." + e.safeName
			if pairs[key] {
				t.Fatalf("two tools map to %s", key)
			}
			pairs[key] = true
			if p, ok := providerOf[e.namespace]; ok && p != e.provider {
				t.Fatalf("namespace %q has providers %q and %q", e.namespace, p, e.provider)
			}
			if ns, ok := namespaceOf[e.provider]; ok && ns != e.namespace {
				t.Fatalf("provider %q serves namespaces %q and %q", e.provider, ns, e.namespace)
			}
			providerOf[e.namespace], namespaceOf[e.provider] = e.provider, e.namespace
		}
		c, err := buildCatalog(infos(ids...), nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.byName) != len(entries) {
			t.Fatalf("catalog offers %d tools, want %d", len(c.byName), len(entries))
		}
		for _, m := range c.manifests {
			if strings.Count(m.Types, "*/") != len(m.Tools) {
				t.Fatalf("types of %s end a comment early:\n%s", m.Name, m.Types)
			}
		}
	})
}
