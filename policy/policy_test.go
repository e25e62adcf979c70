package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

const shippedDir = "../policies"

// builtinSchemaText is the gateway's built-in schema, for tests that write
// altered copies of it into a folder.
func builtinSchemaText() string { return string(Schema()) }

// policyDir writes files into a fresh folder.
func policyDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustLoad(t testing.TB, dir string) *Engine {
	t.Helper()
	e, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	return e
}

// call is a RunTool request by alice for a workspace tool.
func call(tool string) Request {
	return Request{Caller: "alice", Action: ActionRunTool, ToolID: tool, Driver: "workspace", RequestID: "req-1"}
}

func TestShippedPolicies(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, shippedDir)
	if got := e.Refs(); !slices.Equal(got, []string{DefaultRef}) {
		t.Fatalf("Refs() = %v, want [%s]", got, DefaultRef)
	}
	src, err := os.ReadFile(filepath.Join(shippedDir, DefaultRef+".cedar"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	wantDigest := "sha256:" + hex.EncodeToString(sum[:])

	tests := []struct {
		name      string
		req       Request
		wantAllow bool
		wantRule  string
	}{
		{"readFile by an orchestrator", call("workspace.readFile"), true, "workspace_read_only"},
		{"readFile by any caller", func() Request { r := call("workspace.readFile"); r.Caller = "someone-else"; return r }(), true, "workspace_read_only"},
		{"readFile from a sandbox", func() Request { r := call("workspace.readFile"); r.Action = ActionCallTool; return r }(), true, "workspace_read_only"},
		{"shell is denied", call("workspace.shell"), false, RuleDefaultDeny},
		{"createFile is denied", call("workspace.createFile"), false, RuleDefaultDeny},
		{"a readFile on another driver is the same tool id", func() Request { r := call("workspace.readFile"); r.Driver = "tpmjs"; return r }(), true, "workspace_read_only"},
		{"tools of other drivers are denied", Request{Caller: "alice", Action: ActionRunTool, ToolID: "tpmjs.hello", Driver: "tpmjs"}, false, RuleDefaultDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tt.req)
			if d.Allow != tt.wantAllow || d.RuleID != tt.wantRule {
				t.Fatalf("Decide = allow %v rule %q (%s), want allow %v rule %q", d.Allow, d.RuleID, d.Reason, tt.wantAllow, tt.wantRule)
			}
			if d.PolicyRef != DefaultRef || d.PolicySetDigest != wantDigest {
				t.Errorf("PolicyRef %q digest %q, want %q %q", d.PolicyRef, d.PolicySetDigest, DefaultRef, wantDigest)
			}
			if tt.wantAllow && d.Reason != "reading a workspace file changes nothing, so every caller may do it" {
				t.Errorf("Reason = %q, want the rule's @reason", d.Reason)
			}
			if !tt.wantAllow && (!strings.Contains(d.Reason, tt.req.Caller) || !strings.Contains(d.Reason, tt.req.ToolID)) {
				t.Errorf("Reason %q names neither caller nor tool", d.Reason)
			}
		})
	}
}

// TestShippedExamples uncomments the example rules of the shipped policy
// file, so that the advice it gives keeps validating and doing what it says.
func TestShippedExamples(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(shippedDir, DefaultRef+".cedar"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for line := range strings.Lines(string(src)) {
		b.WriteString(strings.TrimPrefix(line, "//   "))
	}
	e := mustLoad(t, policyDir(t, map[string]string{"examples.cedar": b.String()}))

	withArgs := func(r Request, args map[string]any) Request { r.Args = args; r.PolicyRef = "examples"; return r }
	tests := []struct {
		name      string
		req       Request
		wantAllow bool
		wantRule  string
	}{
		{"docs bot creates under docs/",
			withArgs(Request{Caller: "docs-bot", Action: ActionRunTool, ToolID: "workspace.createFile", Driver: "workspace"}, map[string]any{"path": "docs/a.md"}),
			true, "docs_writers_create"},
		{"docs bot outside docs/",
			withArgs(Request{Caller: "docs-bot", Action: ActionRunTool, ToolID: "workspace.createFile", Driver: "workspace"}, map[string]any{"path": "src/a.go"}),
			false, RuleDefaultDeny},
		{"docs bot without a path",
			withArgs(Request{Caller: "docs-bot", Action: ActionRunTool, ToolID: "workspace.createFile", Driver: "workspace"}, nil),
			false, RuleDefaultDeny},
		{"tpmjs tool inside a run",
			withArgs(Request{Caller: "alice", Action: ActionRunTool, ToolID: "tpmjs.hello", Driver: "tpmjs", RunID: "run-1"}, nil),
			true, "tpmjs_in_runs"},
		{"tpmjs tool outside a run",
			withArgs(Request{Caller: "alice", Action: ActionRunTool, ToolID: "tpmjs.hello", Driver: "tpmjs"}, nil),
			false, RuleDefaultDeny},
		{"shell from a sandbox is forbidden",
			withArgs(Request{Caller: "alice", Action: ActionCallTool, ToolID: "workspace.shell", Driver: "workspace"}, nil),
			false, "no_shell_from_sandbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tt.req)
			if d.Allow != tt.wantAllow || d.RuleID != tt.wantRule {
				t.Errorf("Decide = allow %v rule %q (%s), want allow %v rule %q", d.Allow, d.RuleID, d.Reason, tt.wantAllow, tt.wantRule)
			}
		})
	}
}

const decideSet = `
@id("read")
@reason("reading is harmless")
permit (principal, action, resource == Tool::"workspace.readFile");

permit (principal == Caller::"bob", action == Action::"RunTool", resource == Tool::"workspace.list");

@id("list_again")
permit (principal, action, resource == Tool::"workspace.list");

@id("driver_member")
permit (principal == Caller::"carol", action, resource in Driver::"workspace");

@id("driver_attr")
@reason("dave may use tpmjs")
permit (principal == Caller::"dave", action, resource) when { resource.driver == "tpmjs" };

@id("run_only")
permit (principal == Caller::"erin", action, resource == Tool::"tpmjs.hello") when { context has runId };

@id("nested_only")
permit (principal, action == Action::"CallTool", resource == Tool::"workspace.stat")
when { context has parentRequestId && context.parentRequestId like "req-*" };

@id("docs_create")
@reason("docs may be written")
permit (principal, action, resource == Tool::"workspace.createFile")
when { context.args has path && context.args.path like "docs/*" };

@id("no_secrets")
forbid (principal, action, resource == Tool::"workspace.createFile")
when { context.args has path && context.args.path like "docs/secret*" };

@id("small_batches")
@reason("batches above 100 need review")
forbid (principal, action, resource == Tool::"workspace.batch")
when { context.args has size && context.args.size > 100 };

@id("batch")
permit (principal, action, resource == Tool::"workspace.batch");

@id("precise")
permit (principal, action, resource == Tool::"workspace.scale")
when { context.args has factor && context.args.factor == decimal("0.1") };
`

func TestDecide(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{
		"team.cedar":          decideSet,
		DefaultRef + ".cedar": `@id("default_read") permit (principal, action, resource == Tool::"workspace.readFile");`,
	}))
	with := func(r Request, f func(*Request)) Request { r.PolicyRef = "team"; f(&r); return r }
	none := func(*Request) {}
	tests := []struct {
		name       string
		req        Request
		wantAllow  bool
		wantRule   string
		wantReason string // substring
	}{
		{"annotated permit", with(call("workspace.readFile"), none), true, "read", "reading is harmless"},
		{"unannotated permit reports file and position in file",
			with(call("workspace.list"), func(r *Request) { r.Caller = "bob" }),
			true, "team.cedar:policy1", "permitted by policy team.cedar:policy1"},
		{"first deciding permit in file order wins",
			with(call("workspace.list"), func(r *Request) { r.Caller = "bob" }),
			true, "team.cedar:policy1", ""},
		{"later permit decides when the first does not match", with(call("workspace.list"), none), true, "list_again", "permitted by policy list_again"},
		{"resource in Driver", with(call("workspace.shell"), func(r *Request) { r.Caller = "carol" }), true, "driver_member", ""},
		{"resource in another Driver",
			with(call("tpmjs.hello"), func(r *Request) { r.Caller = "carol"; r.Driver = "tpmjs" }),
			false, RuleDefaultDeny, `no permit policy in team.cedar matched caller "carol" calling tool "tpmjs.hello"`},
		{"driver attribute",
			with(call("tpmjs.hello"), func(r *Request) { r.Caller = "dave"; r.Driver = "tpmjs" }),
			true, "driver_attr", "dave may use tpmjs"},
		{"runId present", with(call("tpmjs.hello"), func(r *Request) { r.Caller = "erin"; r.RunID = "run-1" }), true, "run_only", ""},
		{"runId absent", with(call("tpmjs.hello"), func(r *Request) { r.Caller = "erin" }), false, RuleDefaultDeny, ""},
		{"nested call with parent",
			with(call("workspace.stat"), func(r *Request) { r.Action = ActionCallTool; r.ParentRequestID = "req-0" }),
			true, "nested_only", ""},
		{"nested call without parent",
			with(call("workspace.stat"), func(r *Request) { r.Action = ActionCallTool }),
			false, RuleDefaultDeny, ""},
		{"argument matches",
			with(call("workspace.createFile"), func(r *Request) { r.Args = map[string]any{"path": "docs/a.md"} }),
			true, "docs_create", "docs may be written"},
		{"argument does not match",
			with(call("workspace.createFile"), func(r *Request) { r.Args = map[string]any{"path": "etc/passwd"} }),
			false, RuleDefaultDeny, ""},
		{"argument absent",
			with(call("workspace.createFile"), none),
			false, RuleDefaultDeny, ""},
		{"forbid beats permit",
			with(call("workspace.createFile"), func(r *Request) { r.Args = map[string]any{"path": "docs/secret.txt"} }),
			false, "no_secrets", "forbidden by policy no_secrets"},
		{"forbid on a Long argument",
			with(call("workspace.batch"), func(r *Request) { r.Args = decodeArgs(t, `{"size": 1e3}`) }),
			false, "small_batches", "batches above 100 need review"},
		{"permit when the forbid's Long is small",
			with(call("workspace.batch"), func(r *Request) { r.Args = decodeArgs(t, `{"size": 10}`) }),
			true, "batch", ""},
		{"decimal argument",
			with(call("workspace.scale"), func(r *Request) { r.Args = decodeArgs(t, `{"factor": 0.10}`) }),
			true, "precise", ""},
		{"default policy ref", call("workspace.readFile"), true, "default_read", ""},
		{"unknown policy ref",
			with(call("workspace.readFile"), func(r *Request) { r.PolicyRef = "nope" }),
			false, RuleUnknownPolicyRef, `"nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tt.req)
			if d.Allow != tt.wantAllow || d.RuleID != tt.wantRule {
				t.Fatalf("Decide = allow %v rule %q (%s %v), want allow %v rule %q", d.Allow, d.RuleID, d.Reason, d.Errors, tt.wantAllow, tt.wantRule)
			}
			if !strings.Contains(d.Reason, tt.wantReason) || d.Reason == "" {
				t.Errorf("Reason = %q, want it to contain %q", d.Reason, tt.wantReason)
			}
			if d.Errors != nil {
				t.Errorf("Errors = %q, want none", d.Errors)
			}
			wantRef := effectiveRef(tt.req.PolicyRef)
			if d.PolicyRef != wantRef {
				t.Errorf("PolicyRef = %q, want %q", d.PolicyRef, wantRef)
			}
			if (d.PolicySetDigest == "") != (tt.wantRule == RuleUnknownPolicyRef) {
				t.Errorf("PolicySetDigest = %q", d.PolicySetDigest)
			}
		})
	}
}

func TestDecideFailsClosed(t *testing.T) {
	t.Parallel()
	// A forbid that compares an argument of an unexpected type errors.
	// Cedar then skips it and lets the permit allow; Decide must deny.
	fetch := mustLoad(t, policyDir(t, map[string]string{
		DefaultRef + ".cedar": `
@id("fetch")
permit (principal, action, resource == Tool::"http.fetch");

@id("no_internal")
forbid (principal, action, resource == Tool::"http.fetch")
when { context.args has url && context.args.url like "http://10.*" };
`,
	}))
	// A rule can also fail at run time when arithmetic overflows.
	validated := mustLoad(t, policyDir(t, map[string]string{
		DefaultRef + ".cedar": `
@id("batch")
permit (principal, action, resource == Tool::"workspace.batch");

@id("small_batches")
forbid (principal, action, resource == Tool::"workspace.batch")
when { context.args has size && context.args.size + 1 > 101 };

@id("anything")
permit (principal, action, resource);
`,
	}))
	ctxCancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name      string
		engine    *Engine
		ctx       context.Context
		req       Request
		wantError string // substring of Reason and of one of Errors
	}{
		{"erroring forbid with a matching permit", fetch, context.Background(),
			Request{Caller: "a", Action: ActionRunTool, ToolID: "http.fetch", Driver: "tpmjs", Args: map[string]any{"url": json.Number("10")}},
			"policy.default.cedar:5:1: rule no_internal:"},
		{"argument of the wrong type", validated, context.Background(),
			func() Request { r := call("workspace.batch"); r.Args = map[string]any{"size": "big"}; return r }(),
			"rule small_batches:"},
		{"arithmetic overflow", validated, context.Background(),
			func() Request {
				r := call("workspace.batch")
				r.Args = decodeArgs(t, `{"size": 9223372036854775807}`)
				return r
			}(),
			"overflow"},
		{"unmappable arguments", validated, context.Background(),
			func() Request {
				r := call("workspace.batch")
				r.Args = map[string]any{"size": json.Number("0x10")}
				return r
			}(),
			"args.size"},
		{"unknown action", validated, context.Background(),
			func() Request { r := call("workspace.readFile"); r.Action = "DeleteEverything"; return r }(),
			`"DeleteEverything"`},
		{"empty action", validated, context.Background(),
			func() Request { r := call("workspace.readFile"); r.Action = ""; return r }(),
			"action"},
		{"no caller", validated, context.Background(),
			func() Request { r := call("workspace.readFile"); r.Caller = ""; return r }(),
			"no caller"},
		{"no tool", validated, context.Background(),
			func() Request { r := call(""); return r }(),
			"no tool_id"},
		{"no driver", validated, context.Background(),
			func() Request { r := call("workspace.readFile"); r.Driver = ""; return r }(),
			"no driver"},
		{"cancelled context", validated, ctxCancelled, call("workspace.readFile"), "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.engine.Decide(tt.ctx, tt.req)
			if d.Allow || d.RuleID != RulePolicyError {
				t.Fatalf("Decide = allow %v rule %q (%s), want a %s deny", d.Allow, d.RuleID, d.Reason, RulePolicyError)
			}
			if !strings.Contains(d.Reason, tt.wantError) {
				t.Errorf("Reason = %q, want it to contain %q", d.Reason, tt.wantError)
			}
			if !slices.ContainsFunc(d.Errors, func(s string) bool { return strings.Contains(s, tt.wantError) }) {
				t.Errorf("Errors = %q, want one containing %q", d.Errors, tt.wantError)
			}
			if d.PolicyRef != DefaultRef || !strings.HasPrefix(d.PolicySetDigest, "sha256:") {
				t.Errorf("PolicyRef %q digest %q, want the default set's", d.PolicyRef, d.PolicySetDigest)
			}
		})
	}
}

// TestDecideRecoversPanics feeds Decide a policy set whose policy cannot be
// evaluated at all, standing in for a crash inside the evaluator.
func TestDecideRecoversPanics(t *testing.T) {
	t.Parallel()
	set := &policySet{file: "broken.cedar", digest: "sha256:00", policies: []loadedPolicy{{id: "policy0", ruleID: "p"}}}
	set.byID = map[cedar.PolicyID]*loadedPolicy{"policy0": &set.policies[0]}
	set.general = []int{0}
	e := &Engine{sets: map[string]*policySet{DefaultRef: set}}

	d := e.Decide(context.Background(), call("workspace.readFile"))
	if d.Allow || d.RuleID != RulePolicyError || !strings.Contains(d.Reason, "internal failure") {
		t.Errorf("Decide = allow %v rule %q reason %q, want an internal-failure %s deny", d.Allow, d.RuleID, d.Reason, RulePolicyError)
	}
	if d.PolicySetDigest != "sha256:00" {
		t.Errorf("PolicySetDigest = %q, want the set's digest", d.PolicySetDigest)
	}
}

// TestIndexMatchesFullScan checks that evaluating only the policies filed
// under a request's principal and resource decides exactly as evaluating
// every policy in file order.
func TestIndexMatchesFullScan(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	tools := []string{"t0", "t1", "t2"}
	callers := []string{"c0", "c1", "c2"}
	n := 0
	for _, c := range callers {
		for _, tool := range tools {
			for _, effect := range []string{"permit", "forbid"} {
				for _, cond := range []string{"", `when { context.args has x && context.args.x == "` + c + `" }`, `when { context.args has n && context.args.n > 1 }`} {
					n++
					if n%3 == 0 {
						continue // leave holes so not every combination decides
					}
					switch n % 4 {
					case 0:
						b.WriteString(effect + ` (principal == Caller::"` + c + `", action, resource == Tool::"` + tool + `") ` + cond + ";\n")
					case 1:
						b.WriteString(effect + ` (principal == Caller::"` + c + `", action, resource) ` + cond + ";\n")
					case 2:
						b.WriteString(effect + ` (principal, action, resource == Tool::"` + tool + `") ` + cond + ";\n")
					default:
						b.WriteString(effect + ` (principal in Caller::"` + c + `", action, resource in Driver::"d") ` + cond + ";\n")
					}
				}
			}
		}
	}
	e := mustLoad(t, policyDir(t, map[string]string{DefaultRef + ".cedar": b.String()}))
	set := e.sets[DefaultRef]
	all := make([]int, len(set.policies))
	for i := range all {
		all[i] = i
	}
	full := candidateList{set: set, lists: [3][]int{all}}

	for _, c := range append(callers, "other") {
		for _, tool := range append(tools, "other") {
			for _, args := range []map[string]any{nil, {"x": c}, {"n": "not a number"}, {"n": json.Number("5")}} {
				req := Request{Caller: c, Action: ActionRunTool, ToolID: tool, Driver: "d", Args: args}
				got := e.Decide(context.Background(), req)

				cctx, err := Context(req)
				if err != nil {
					t.Fatal(err)
				}
				principal := types.NewEntityUID("Caller", types.String(c))
				resource := types.NewEntityUID("Tool", types.String(tool))
				driver := types.NewEntityUID("Driver", "d")
				entities := types.EntityMap{
					principal: {UID: principal},
					driver:    {UID: driver},
					resource:  {UID: resource, Parents: types.NewEntityUIDSet(driver), Attributes: types.NewRecord(types.RecordMap{"driver": types.String("d")})},
				}
				dec, diag := cedar.Authorize(full, entities, cedar.Request{Principal: principal, Action: types.NewEntityUID("Action", ActionRunTool), Resource: resource, Context: cctx})
				wantRule := RuleDefaultDeny
				switch {
				case len(diag.Errors) > 0:
					wantRule = RulePolicyError
				case len(diag.Reasons) > 0:
					wantRule = set.byID[diag.Reasons[0].PolicyID].ruleID
				}
				if got.Allow != (dec == cedar.Allow && len(diag.Errors) == 0) || got.RuleID != wantRule {
					t.Errorf("caller %s tool %s args %v: indexed allow %v rule %q, full scan %v rule %q", c, tool, args, got.Allow, got.RuleID, dec, wantRule)
				}
				if len(diag.Errors) != len(got.Errors) && wantRule == RulePolicyError {
					t.Errorf("caller %s tool %s args %v: %d errors, full scan %d", c, tool, args, len(got.Errors), len(diag.Errors))
				}
			}
		}
	}
}

func TestDecideConcurrent(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, shippedDir)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				tool := "workspace.readFile"
				if (i+j)%2 == 1 {
					tool = "workspace.shell"
				}
				d := e.Decide(context.Background(), call(tool))
				if d.Allow != (tool == "workspace.readFile") {
					t.Errorf("tool %s: allow %v", tool, d.Allow)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		wantErr []string // regular expressions; each must match a line of the error
	}{
		{
			name:    "parse error",
			files:   map[string]string{"broken.cedar": "@id(\"ok\")\npermit (principal, action, resource);\n\npermit (principal, action, resource)\n  when { 1 + };\n"},
			wantErr: []string{`^\S*broken\.cedar:5:15: parse error near ";": invalid primary$`},
		},
		{
			name:    "parse error without a position from the parser",
			files:   map[string]string{"broken.cedar": "permit (principal, action, resource);\n// a comment; with a semicolon\npermit (principal, action, resource)\n  when { \"a;b\" == \"c\" && 99999999999999999999 == 1 };\n"},
			wantErr: []string{`^\S*broken\.cedar:3:1: parse error: .*out of range`},
		},
		{
			name:    "unterminated comment",
			files:   map[string]string{"broken.cedar": "permit (principal, action, resource);\n/* never closed\n"},
			wantErr: []string{`^\S*broken\.cedar:2:\d+: parse error: comment not terminated`},
		},
		{
			name:    "invalid UTF-8",
			files:   map[string]string{"broken.cedar": "permit (principal, action, resource)\n  when { \"\xff\" == \"x\" };"},
			wantErr: []string{`^\S*broken\.cedar:2:11: invalid UTF-8`},
		},
		{
			name:    "unknown entity type",
			files:   map[string]string{"p.cedar": "\n@id(\"bad\")\npermit (principal == Usr::\"x\", action, resource);"},
			wantErr: []string{"^\\S*p\\.cedar:2:1: policy \"bad\": unrecognized entity type `Usr`"},
		},
		{
			name:    "unknown action",
			files:   map[string]string{"p.cedar": "permit (principal, action == Action::\"Nope\", resource);"},
			wantErr: []string{"^\\S*p\\.cedar:1:1: policy \"p.cedar:policy0\": unrecognized action `Action::\"Nope\"`"},
		},
		{
			name:    "misspelt context attribute",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource) when { context.requestID == \"x\" };"},
			wantErr: []string{"^\\S*p\\.cedar:1:1: .*context has no attribute `requestID`"},
		},
		{
			name:    "misspelt context attribute behind an args test",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource)\nwhen { context.args has path && context has runID };"},
			wantErr: []string{"^\\S*p\\.cedar:1:1: .*context has no attribute `runID`"},
		},
		{
			name:    "unknown entity type behind an args test",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource)\nwhen { context.args has path && principal == Usr::\"x\" };"},
			wantErr: []string{"unrecognized entity type `Usr`"},
		},
		{
			name:    "argument read without has",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource) when { context.args.path like \"docs/*\" };"},
			wantErr: []string{"tool argument `path` is read without a `has` test"},
		},
		{
			name:    "optional context attribute read without has",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource) when { context.runId == \"r\" };"},
			wantErr: []string{"optional attribute `runId`"},
		},
		{
			name:    "wrong type",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource) when { resource.driver == 1 };"},
			wantErr: []string{"not compatible"},
		},
		{
			name:    "attribute the model does not have",
			files:   map[string]string{"p.cedar": "permit (principal, action, resource) when { principal.team == \"x\" };"},
			wantErr: []string{"attribute `team` on entity type `Caller` not found"},
		},
		{
			name:    "mistyped action in a folder without a schema",
			files:   map[string]string{"p.cedar": "\n@id(\"no_shell\")\nforbid (principal, action == Action::\"RunTol\", resource == Tool::\"workspace.shell\");"},
			wantErr: []string{"^\\S*p\\.cedar:2:1: policy \"no_shell\": unrecognized action `Action::\"RunTol\"`"},
		},
		{
			name:    "mistyped attribute in a folder without a schema",
			files:   map[string]string{"p.cedar": "@id(\"no_pkg\")\nforbid (principal, action, resource) when { resource.pakage like \"evil*\" };"},
			wantErr: []string{"^\\S*p\\.cedar:1:1: policy \"no_pkg\": attribute `pakage` on entity type `Tool` not found"},
		},
		{
			name:    "a misspelt approval annotation, which would otherwise allow at once",
			files:   map[string]string{"p.cedar": "@id(\"shell\")\n@approve(\"ops\")\npermit (principal, action, resource == Tool::\"workspace.shell\");"},
			wantErr: []string{"^\\S*p\\.cedar:1:1: policy \"shell\": unknown annotation @approve \\(a policy may carry @id, @reason, @approval, @self_approval, @suggestion, @label, @caller_label\\)"},
		},
		{
			name: "folder schema that retypes an attribute",
			files: map[string]string{SchemaFile: "entity Caller { groups: Set<String>, roles: String };",
				"p.cedar": ""},
			wantErr: []string{"^\\S*toolgate\\.cedarschema: a policy folder's schema may only add to the gateway's built-in schema: entity Caller: changes the type of attribute `roles`"},
		},
		{
			name: "folder schema that redefines Tool",
			files: map[string]string{SchemaFile: "entity Tool { driver: String };",
				"p.cedar": ""},
			wantErr: []string{"entity Tool: changes its parent types", "entity Tool: drops attribute `package`", "entity Tool: drops attribute `tags`"},
		},
		{
			name:    "folder schema that turns an entity into a common type",
			files:   map[string]string{SchemaFile: "type Tool = String;", "p.cedar": ""},
			wantErr: []string{"^\\S*toolgate\\.cedarschema: .*Tool is an entity type in the gateway's built-in schema, a common type here"},
		},
		{
			name: "folder schema that widens RunTool's context",
			files: map[string]string{SchemaFile: "action \"RunTool\" appliesTo { principal: [Caller], resource: [Tool], context: { requestId: String, policyRef: String, args: {}, bypass?: Bool } };",
				"p.cedar": ""},
			wantErr: []string{`^\S*toolgate\.cedarschema: .*action Action::"RunTool": declared differently`},
		},
		{
			name: "folder schema with a required attribute the gateway never sets",
			files: map[string]string{SchemaFile: "entity Caller { groups: Set<String>, roles: Set<String>, team: String };",
				"p.cedar": ""},
			wantErr: []string{`^\S*toolgate\.cedarschema: the schema does not describe the requests the gateway sends`},
		},
		{
			name:    "duplicate rule id",
			files:   map[string]string{"p.cedar": "@id(\"x\")\npermit (principal, action, resource);\n@id(\"x\")\nforbid (principal, action, resource);"},
			wantErr: []string{`^\S*p\.cedar:3:1: @id\("x"\) is already used by the policy at line 1`},
		},
		{
			name:    "reserved rule id",
			files:   map[string]string{"p.cedar": "@id(\"default_deny\")\nforbid (principal, action, resource);"},
			wantErr: []string{`^\S*p\.cedar:1:1: @id\("default_deny"\) is reserved`},
		},
		{
			name:    "rule id of the gateway's policy_ref refusal",
			files:   map[string]string{"p.cedar": "@id(\"policy_ref_not_selectable\")\npermit (principal, action, resource);"},
			wantErr: []string{`^\S*p\.cedar:1:1: @id\("policy_ref_not_selectable"\) is reserved`},
		},
		{
			name:    "rule id of the gateway's history failure",
			files:   map[string]string{"p.cedar": "@id(\"history_error\")\nforbid (principal, action, resource);"},
			wantErr: []string{`^\S*p\.cedar:1:1: @id\("history_error"\) is reserved`},
		},
		{
			name:    "empty rule id",
			files:   map[string]string{"p.cedar": "@id(\"\")\npermit (principal, action, resource);"},
			wantErr: []string{`^\S*p\.cedar:1:1: @id must not be empty`},
		},
		{
			name:    "every broken file is reported",
			files:   map[string]string{"a.cedar": "permit (", "b.cedar": "forbid (", "ok.cedar": "permit (principal, action, resource);"},
			wantErr: []string{`^\S*a\.cedar:1:\d+: parse error`, `^\S*b\.cedar:1:\d+: parse error`},
		},
		{
			name:    "broken schema",
			files:   map[string]string{SchemaFile: "entity Caller;\nentity Tool {\n  driver String,\n};", "p.cedar": ""},
			wantErr: []string{`^\S*toolgate\.cedarschema:3:10: `},
		},
		{
			name:    "schema that does not resolve",
			files:   map[string]string{SchemaFile: "entity Tool in [Nowhere];", "p.cedar": ""},
			wantErr: []string{`^\S*toolgate\.cedarschema: .*Nowhere`},
		},
		{
			name: "schema without the tool's driver attribute",
			files: map[string]string{SchemaFile: strings.Replace(builtinSchemaText(), "driver: String,", "", 1),
				"p.cedar": ""},
			wantErr: []string{"^\\S*toolgate\\.cedarschema: a policy folder's schema may only add to the gateway's built-in schema: entity Tool: drops attribute `driver`"},
		},
		{
			name: "schema without runId",
			files: map[string]string{SchemaFile: strings.Replace(builtinSchemaText(), "runId?: String,", "", 1),
				"p.cedar": ""},
			wantErr: []string{`^\S*toolgate\.cedarschema: .*action Action::"RunTool": declared differently`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := policyDir(t, tt.files)
			e, err := Load(dir)
			if err == nil {
				t.Fatalf("Load succeeded with refs %v, want an error", e.Refs())
			}
			lines := strings.Split(err.Error(), "\n")
			for _, line := range lines {
				if !strings.HasPrefix(line, dir+string(filepath.Separator)) {
					t.Errorf("error line %q does not start with the file's path", line)
				}
			}
			for _, want := range tt.wantErr {
				re := regexp.MustCompile(want)
				if !slices.ContainsFunc(lines, re.MatchString) {
					t.Errorf("no line of the error matches %q:\n%s", want, err)
				}
			}
		})
	}
}

// TestLoadAcceptsSchemaAdditions: a folder schema may add optional
// attributes, entity types and actions (for nested drivers), and may repeat
// the built-in schema unchanged; rules may then use what it adds.
func TestLoadAcceptsSchemaAdditions(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, schema, policy string }{
		{"an optional caller attribute",
			"entity Caller { groups: Set<String>, roles: Set<String>, team?: String };",
			`@id("t") permit (principal, action, resource) when { principal has team && principal.team == "ops" };`},
		{"a new entity type and action",
			"entity Team;\naction \"Review\" appliesTo { principal: [Caller], resource: [Tool] };",
			`@id("a") permit (principal, action == Action::"Review", resource);`},
		{"the built-in schema repeated", builtinSchemaText(), `@id("r") permit (principal, action == Action::"RunTool", resource);`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustLoad(t, policyDir(t, map[string]string{SchemaFile: tt.schema, "p.cedar": tt.policy}))
			if refs := e.Refs(); !slices.Equal(refs, []string{"p"}) {
				t.Errorf("Refs() = %v", refs)
			}
		})
	}
}

func TestLoadAcceptsGuardedArguments(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, policyDir(t, map[string]string{
		"p.cedar": `
@id("docs")
permit (principal, action, resource)
when { context.args has path && context.args.path like "docs/*" };

@id("nested")
permit (principal, action, resource)
when { context.args has opts && context.args.opts has depth && context.args.opts.depth < 3 };

@id("either")
permit (principal, action, resource)
when { (context.args has a && context.args.a == "x") || (context.args has b && context.args.b.contains("y")) };
`,
	}))
	tests := []struct {
		args     string
		wantRule string
	}{
		{`{"path": "docs/x"}`, "docs"},
		{`{"opts": {"depth": 2}}`, "nested"},
		{`{"opts": {"depth": 5}}`, RuleDefaultDeny},
		{`{"b": ["y", null]}`, "either"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			r := call("workspace.x")
			r.PolicyRef = "p"
			r.Args = decodeArgs(t, tt.args)
			if d := e.Decide(context.Background(), r); d.RuleID != tt.wantRule {
				t.Errorf("rule %q (%s), want %q", d.RuleID, d.Reason, tt.wantRule)
			}
		})
	}
}

func TestLoadFolder(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{
		"a.cedar":       `permit (principal, action, resource);`,
		"empty.cedar":   ``,
		".hidden.cedar": `this is not parsed`,
		"README.md":     `not a policy`,
		"b.cedar.bak":   `not a policy either`,
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.cedar"), 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "linked")
	if err := os.WriteFile(target, []byte(`forbid (principal, action, resource);`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "linked.cedar")); err != nil {
		t.Fatal(err)
	}

	e := mustLoad(t, dir)
	want := []string{"a", "empty", "linked"}
	if got := e.Refs(); !slices.Equal(got, want) {
		t.Errorf("Refs() = %v, want %v", got, want)
	}
	r := call("workspace.readFile")
	r.PolicyRef = "empty"
	if d := e.Decide(context.Background(), r); d.RuleID != RuleDefaultDeny {
		t.Errorf("empty set: rule %q, want %q", d.RuleID, RuleDefaultDeny)
	}
	r.PolicyRef = "linked"
	if d := e.Decide(context.Background(), r); d.Allow || d.RuleID != "linked.cedar:policy0" {
		t.Errorf("linked set: allow %v rule %q, want the forbid", d.Allow, d.RuleID)
	}
}

func TestLoadMissingFolder(t *testing.T) {
	t.Parallel()
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("Load of a missing folder succeeded")
	}
}

func TestLoadEmptyFolder(t *testing.T) {
	t.Parallel()
	e := mustLoad(t, t.TempDir())
	if refs := e.Refs(); len(refs) != 0 {
		t.Errorf("Refs() = %v, want none", refs)
	}
	if d := e.Decide(context.Background(), call("workspace.readFile")); d.RuleID != RuleUnknownPolicyRef || d.PolicySetDigest != "" {
		t.Errorf("rule %q digest %q, want %q and no digest", d.RuleID, d.PolicySetDigest, RuleUnknownPolicyRef)
	}
}

// TestToolAttributes: rules about the catalog's attributes of a tool, with
// the schema on, as a security team writes them.
func TestToolAttributes(t *testing.T) {
	t.Parallel()
	dir := policyDir(t, map[string]string{"policy.default.cedar": `
@id("tpmjs_read_tools")
permit (principal, action == Action::"RunTool", resource in Driver::"tpmjs")
when { resource.package like "@tpmjs/*" && resource.tags.contains("read-only") && resource.version != "latest" };

@id("no_beta_exports")
forbid (principal, action, resource)
when { resource.export like "*Beta" };
`})
	e := mustLoad(t, dir)
	base := Request{Caller: "alice", Action: ActionRunTool, ToolID: "web.search", Driver: "tpmjs", RequestID: "r1"}
	tests := []struct {
		name     string
		tool     ToolAttributes
		wantRule string
	}{
		{"scoped read-only tool", ToolAttributes{Package: "@tpmjs/web-search", Export: "search", Version: "1.2.0", Tags: []string{"read-only", "web"}}, "tpmjs_read_tools"},
		{"other scope", ToolAttributes{Package: "@evil/web-search", Export: "search", Version: "1.2.0", Tags: []string{"read-only"}}, RuleDefaultDeny},
		{"not tagged read-only", ToolAttributes{Package: "@tpmjs/mailer", Export: "send", Version: "1.0.0", Tags: []string{"write"}}, RuleDefaultDeny},
		{"floating version", ToolAttributes{Package: "@tpmjs/web-search", Export: "search", Version: "latest", Tags: []string{"read-only"}}, RuleDefaultDeny},
		{"forbidden export", ToolAttributes{Package: "@tpmjs/web-search", Export: "searchBeta", Version: "1.0.0", Tags: []string{"read-only"}}, "no_beta_exports"},
		{"tool without a package", ToolAttributes{}, RuleDefaultDeny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := base
			req.Tool = tc.tool
			d := e.Decide(context.Background(), req)
			if d.RuleID != tc.wantRule || d.Allow != (tc.wantRule == "tpmjs_read_tools") {
				t.Fatalf("decision = %+v, want rule %s", d, tc.wantRule)
			}
		})
	}
}
