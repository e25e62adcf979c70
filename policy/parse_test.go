package policy

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	cedar "github.com/cedar-policy/cedar-go"
)

// parseDocs are policy files whose statements a careless split would cut
// in the wrong place or whose positions it would shift.
var parseDocs = map[string]string{
	"rules one per line": `permit (principal, action, resource);
forbid (principal, action, resource);
permit (principal == Caller::"a", action, resource);`,
	"several rules on one line after wide characters": `@reason("é✓ 日本") permit (principal, action, resource); @id("x") forbid (principal, action, resource); permit (principal, action, resource);`,
	"semicolons and comment marks inside strings": `@reason("a; b // c") permit (principal, action, resource) when { context.args has p && context.args.p == "x;\";//y" };
// a comment; with a semicolon
permit (principal, action, resource == Tool::"t;1");
@id("z") forbid (principal, action, resource);`,
	"CRLF line ends and trailing comments": "permit (principal, action, resource);\r\n// end; really\r\nforbid (principal, action, resource);\r\n// trailing\r\n",
	"a syntax error in a later statement":  "permit (principal, action, resource);\npermit (principal, action, resource);\npermit (principal action, resource);\npermit (principal, action, resource);",
	"junk after the last statement":        "permit (principal, action, resource);\npermit (principal, action, resource);\npermit (principal, action, resource);\nnot cedar",
	"a block comment Cedar does not know":  "permit (principal, action, resource);\n/* x; */\npermit (principal, action, resource);\npermit (principal, action, resource);",
	"an unterminated string":               "permit (principal, action, resource);\npermit (principal, action, resource);\n@reason(\"oops; permit (principal, action, resource);",
	"an out-of-range integer":              "permit (principal, action, resource);\npermit (principal, action, resource);\npermit (principal, action, resource) when { 99999999999999999999 == 1 };",
}

// TestParsePoliciesMatchesTheWholeFileParse: parsing in chunks gives the
// policies, positions and errors parsing the whole file gives, at every
// chunk size.
func TestParsePoliciesMatchesTheWholeFileParse(t *testing.T) {
	t.Parallel()
	for name, doc := range parseDocs {
		for _, chunk := range []int{1, 2, 3, 1000} {
			t.Run(fmt.Sprintf("%s, %d per chunk", name, chunk), func(t *testing.T) {
				if msg := parseDifference([]byte(doc), chunk); msg != "" {
					t.Fatal(msg)
				}
			})
		}
	}
}

// parseDifference says how parsePolicies differs from the whole-file parse
// on src, or "" when it does not.
func parseDifference(src []byte, chunk int) string {
	want, wantErr := cedar.NewPolicyListFromBytes("f.cedar", src)
	got, gotErr := parsePolicies("f.cedar", src, chunk)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		return fmt.Sprintf("error %v, want %v", gotErr, wantErr)
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d policies, want %d", len(got), len(want))
	}
	for i := range want {
		gp, wp := got[i].Position(), want[i].Position()
		if gp.Filename != wp.Filename || gp.Line != wp.Line || gp.Column != wp.Column {
			return fmt.Sprintf("policy %d at %+v, want %+v", i, gp, wp)
		}
		if g, w := got[i].MarshalCedar(), want[i].MarshalCedar(); !bytes.Equal(g, w) {
			return fmt.Sprintf("policy %d is\n%s\nwant\n%s", i, g, w)
		}
	}
	return ""
}

// FuzzParsePolicies compares chunked and whole-file parsing on any input,
// two statements per chunk.
func FuzzParsePolicies(f *testing.F) {
	for _, doc := range parseDocs {
		f.Add([]byte(doc))
	}
	f.Add([]byte(strings.Repeat("permit (principal, action, resource);\n", 5)))
	f.Fuzz(func(t *testing.T, src []byte) {
		if msg := parseDifference(src, 2); msg != "" {
			t.Fatal(msg)
		}
	})
}
