package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cedar-policy/cedar-go/types"
)

func FuzzArgsValue(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"path": "docs/a.md", "force": true, "n": 3}`,
		`{"a": null, "b": [null, 1, "x", 1], "c": {"d": null, "e": {"f": -0.0}}}`,
		`{"big": 12345678901234567890, "min": -9223372036854775808, "max": 9223372036854775807}`,
		`{"tenth": 0.1, "fine": 1.23456, "huge": 1e400, "exp": 1e3, "neg": -1.25e-2}`,
		`[1, 2.5, "three"]`,
		`"just a string"`,
		`922337203685477.5807`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return
		}
		args, ok := v.(map[string]any)
		if !ok {
			args = map[string]any{"v": v}
		}
		rec, err := ArgsValue(args)
		if err != nil {
			longest, total := arraySizes(args)
			if depth(args) <= maxArgsDepth && longest <= maxSetElements && total <= maxTotalSetElements {
				t.Fatalf("ArgsValue(%s) failed on decoded JSON within the limits: %v", doc, err)
			}
			return
		}
		checkMapped(t, "args", args, rec)
	})
}

// depth counts the nesting of a decoded JSON value; the top-level object
// is level 1.
func depth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e))
		}
	case []any:
		for _, e := range v {
			d = max(d, depth(e))
		}
	default:
		return 0
	}
	return d + 1
}

// arraySizes returns the largest number of non-null elements in one array
// of v and the total over all its arrays.
func arraySizes(v any) (longest, total int) {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			l, t := arraySizes(e)
			longest, total = max(longest, l), total+t
		}
	case []any:
		n := 0
		for _, e := range v {
			if e != nil {
				n++
			}
			l, t := arraySizes(e)
			longest, total = max(longest, l), total+t
		}
		longest, total = max(longest, n), total+n
	}
	return longest, total
}

// checkMapped asserts the documented mapping between decoded JSON j and
// the Cedar value c.
func checkMapped(t *testing.T, path string, j any, c types.Value) {
	t.Helper()
	if c == nil {
		t.Fatalf("%s: mapped to nil", path)
	}
	switch j := j.(type) {
	case map[string]any:
		rec, ok := c.(types.Record)
		if !ok {
			t.Fatalf("%s: object mapped to %T", path, c)
		}
		present := 0
		for k, e := range j {
			got, ok := rec.Get(types.String(k))
			if e == nil {
				if ok {
					t.Fatalf("%s.%s: null mapped to %v, want the attribute absent", path, k, got)
				}
				continue
			}
			present++
			if !ok {
				t.Fatalf("%s.%s: attribute missing", path, k)
			}
			checkMapped(t, path+"."+k, e, got)
		}
		if rec.Len() != present {
			t.Fatalf("%s: record has %d attributes, JSON has %d non-null members", path, rec.Len(), present)
		}
	case []any:
		set, ok := c.(types.Set)
		if !ok {
			t.Fatalf("%s: array mapped to %T", path, c)
		}
		nonNull := 0
		for i, e := range j {
			switch e := e.(type) {
			case nil:
				continue
			case json.Number:
				if n, err := strconv.ParseInt(string(e), 10, 64); err == nil && !set.Contains(types.Long(n)) {
					t.Fatalf("%s[%d]: set %v lacks Long %d", path, i, set, n)
				}
			case string:
				if !set.Contains(types.String(e)) {
					t.Fatalf("%s[%d]: set %v lacks String %q", path, i, set, e)
				}
			}
			nonNull++
		}
		if set.Len() > nonNull {
			t.Fatalf("%s: set has %d elements, JSON has %d non-null ones", path, set.Len(), nonNull)
		}
		for e := range set.All() {
			if e == nil {
				t.Fatalf("%s: set holds a nil value", path)
			}
		}
	case string:
		if c != types.String(j) {
			t.Fatalf("%s: string %q mapped to %v", path, j, c)
		}
	case bool:
		if c != types.Boolean(j) {
			t.Fatalf("%s: bool %v mapped to %v", path, j, c)
		}
	case json.Number:
		checkNumber(t, path, string(j), c)
	default:
		t.Fatalf("%s: unexpected decoded type %T", path, j)
	}
}

var exponentPart = regexp.MustCompile(`[eE][+-]?0*(\d*)$`)

// checkNumber checks one mapped number against math/big, which is exact
// but too slow for giant exponents, so those are only checked for their
// documented fallback.
func checkNumber(t *testing.T, path, text string, c types.Value) {
	t.Helper()
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		if c != types.Long(n) {
			t.Fatalf("%s: integer %s mapped to %T %v, want Long", path, text, c, c)
		}
		return
	}
	if m := exponentPart.FindStringSubmatch(text); m != nil && len(m[1]) > 4 {
		if _, isLong := c.(types.Long); !isLong && c != types.String(text) {
			if _, isDec := c.(types.Decimal); !isDec {
				t.Fatalf("%s: %s mapped to %T %v", path, text, c, c)
			}
		}
		return
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		t.Fatalf("%s: math/big cannot parse %s", path, text)
	}
	scaled := new(big.Rat).Mul(r, big.NewRat(10000, 1))
	switch {
	case r.IsInt() && r.Num().IsInt64():
		if c != types.Long(r.Num().Int64()) {
			t.Fatalf("%s: whole number %s mapped to %T %v, want Long %s", path, text, c, c, r.Num())
		}
	case scaled.IsInt() && scaled.Num().IsInt64():
		want, err := types.NewDecimal(scaled.Num().Int64(), -4)
		if err != nil {
			t.Fatal(err)
		}
		if !want.Equal(c) {
			t.Fatalf("%s: %s mapped to %T %v, want decimal %v", path, text, c, c, want)
		}
	default:
		if c != types.String(text) {
			t.Fatalf("%s: %s mapped to %T %v, want the String of its text", path, text, c, c)
		}
	}
}

var loadErrorLine = regexp.MustCompile(`^dir/fuzz\.cedar:[1-9]\d*:[1-9]\d*: `)

func FuzzLoad(f *testing.F) {
	shipped, err := os.ReadFile(filepath.Join(shippedDir, DefaultRef+".cedar"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	f.Add([]byte(decideSet))
	for _, seed := range []string{
		``,
		`permit (principal, action, resource);`,
		`forbid (principal, action, resource) when { context.args has a && context.args.a + 1 > 2 };`,
		"permit (principal, action, resource)\n  when { 1 + };",
		`permit (principal == Usr::"x", action, resource);`,
		`permit (principal, action, resource) when { context.requestID == "x" };`,
		`@id("x") permit (principal, action, resource); @id("x") forbid (principal, action, resource);`,
		`@approval("ops") permit (principal, action, resource);`,
		`@approval("ops") permit (principal, action, resource); permit (principal == Caller::"bob", action, resource);`,
		`@approval("Ops") permit (principal, action, resource);`,
		`@approval("ops") forbid (principal, action, resource);`,
		`@approval("a") @approval("b") permit (principal, action, resource);`,
		`@self_approval("allowed") permit (principal, action == Action::"Approve", resource) when { context.selfApproval };`,
		`permit (principal, action, resource); permit (principal, action in [Action::"Approve"], resource) when { context.args has n && context.args.n > 1 };`,
		"permit (principal, action, resource) when { \"\xff\" };",
		`permit (principal, action, resource) when { 99999999999999999999 == 1 };`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		fsys := fstest.MapFS{
			"fuzz.cedar": {Data: text},
		}
		e, err := load(fsys, "dir")
		if err != nil {
			errs := flatten(err)
			for _, e := range errs {
				if !loadErrorLine.MatchString(e.Error()) {
					t.Fatalf("load error %q lacks the file:line:column prefix", e)
				}
			}
			return
		}
		if refs := e.Refs(); !slices.Equal(refs, []string{"fuzz"}) {
			t.Fatalf("Refs() = %v, want [fuzz]", refs)
		}
		for _, req := range []Request{
			{Caller: "alice", Action: ActionRunTool, ToolID: "workspace.readFile", Driver: "workspace", PolicyRef: "fuzz"},
			{Caller: "bob", Action: ActionCallTool, ToolID: "x", Driver: "y", PolicyRef: "fuzz", RunID: "r",
				Args: map[string]any{"path": "docs/a", "n": json.Number("5"), "a": json.Number("9223372036854775807")}},
		} {
			d := e.Decide(context.Background(), req)
			if d.RuleID == "" || d.Reason == "" || !strings.HasPrefix(d.PolicySetDigest, "sha256:") {
				t.Fatalf("Decide = %+v: missing rule id, reason or digest", d)
			}
			if d.Allow && (d.RuleID == RuleDefaultDeny || d.RuleID == RulePolicyError || len(d.Errors) > 0) {
				t.Fatalf("Decide = %+v: allowed with a deny rule or errors", d)
			}
			if d.RuleID == RulePolicyError && strings.Contains(d.Reason, "internal failure") {
				t.Fatalf("Decide = %+v: evaluator crashed", d)
			}
			if d.ApprovalRequired && (d.Allow || !approvalGroup.MatchString(d.Approvers)) {
				t.Fatalf("Decide = %+v: approval required with an allow or without a valid group", d)
			}
		}
		for _, a := range []ApprovalRequest{
			{Approver: "bob", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}}, Requester: "alice", Group: "ops",
				ToolID: "workspace.shell", Driver: "workspace", RequestID: "r", PolicyRef: "fuzz", Args: map[string]any{"n": json.Number("2")}},
			{Approver: "bob", ApproverAttrs: CallerAttributes{Groups: []string{"ops"}}, Requester: "bob", Group: "ops",
				ToolID: "workspace.shell", Driver: "workspace", RequestID: "r", PolicyRef: "fuzz"},
		} {
			d := e.DecideApproval(context.Background(), a)
			if d.ApprovalRequired || d.RuleID == "" || d.Reason == "" || strings.Contains(d.Reason, "internal failure") {
				t.Fatalf("DecideApproval = %+v", d)
			}
			p := func() *loadedPolicy {
				for i := range e.sets["fuzz"].policies {
					if lp := &e.sets["fuzz"].policies[i]; lp.ruleID == d.RuleID {
						return lp
					}
				}
				return nil
			}()
			if d.Allow && (p == nil || !p.grantsApprove || (a.Approver == a.Requester && !p.selfApproval)) {
				t.Fatalf("DecideApproval = %+v: allowed by a policy that may not authorise this approver", d)
			}
		}
	})
}
