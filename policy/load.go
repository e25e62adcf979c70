package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"github.com/toolgate/toolgate/internal/regularfile"
)

// MaxPolicyFileBytes bounds each file of a policy folder (policies, the
// schema): 10,000 argument rules take a few megabytes, so a larger file is
// a mistake or an attack, and is refused rather than read.
const MaxPolicyFileBytes = 64 << 20

// SchemaFile is the name of the schema in a policy folder.
const SchemaFile = "toolgate.cedarschema"

const policyExt = ".cedar"

// Load reads every <dir>/<policy_ref>.cedar file (names starting with a dot
// are ignored, as are folders) and validates every policy against the
// gateway's built-in schema (see Schema), extended by
// <dir>/toolgate.cedarschema when that exists. A folder schema may only add
// to the built-in one; one that removes or changes a declaration is an
// error naming what it changes. Load also checks that the schema accepts the
// requests and entities Decide builds, so that policies are validated
// against the model the gateway really uses. Annotations other than those
// KnownAnnotations lists are errors.
//
// Every problem found in the policy files is reported, one per line, each
// starting with "<dir>/<file>:<line>:<column>: "; a problem with the schema
// stops the load and names the schema file, with a line where the schema
// parser gives one. Rule ids must be unique within a file and may not
// reuse the names the gateway reports itself (default_deny, policy_error,
// unknown_policy_ref, policy_ref_not_selectable). An empty folder loads;
// every request then gets unknown_policy_ref.
func Load(dir string) (*Engine, error) {
	return load(os.DirFS(dir), dir)
}

// load reads the policy folder from fsys; dir is only used in messages.
func load(fsys fs.FS, dir string) (*Engine, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read policy folder %s: %w", dir, err)
	}
	sc, err := loadSchema(fsys, dir)
	if err != nil {
		return nil, err
	}
	e := &Engine{sets: make(map[string]*policySet), entities: newEntityCache()}
	var errs []error
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, policyExt) || strings.HasPrefix(name, ".") || name == policyExt {
			continue
		}
		// Stat rather than entry.Type: mounted configuration (a Kubernetes
		// ConfigMap, for one) presents files as symbolic links.
		info, err := fs.Stat(fsys, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, name), err))
			continue
		}
		if info.IsDir() {
			continue
		}
		src, err := regularfile.ReadFS(fsys, name, MaxPolicyFileBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, name), err))
			continue
		}
		set, fileErrs := compileSet(filepath.Join(dir, name), name, src, sc)
		if len(fileErrs) > 0 {
			errs = append(errs, fileErrs...)
			continue
		}
		e.sets[strings.TrimSuffix(name, policyExt)] = set
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return e, nil
}

// Annotations a policy may carry (beside those of approval.go). Every other
// annotation is a load error: an annotation the gateway does not implement
// must not be ignored while the permit it marks allows at once.
const (
	// AnnotationID names the rule: rule_id in the evidence.
	AnnotationID = "id"
	// AnnotationReason says why the rule exists: reason in the evidence.
	AnnotationReason = "reason"
)

// KnownAnnotations returns the annotation keys a policy may carry, in the
// order messages list them.
func KnownAnnotations() []string {
	return []string{AnnotationID, AnnotationReason, AnnotationApproval, AnnotationSelfApproval, AnnotationSuggestion,
		AnnotationLabel, AnnotationCallerLabel}
}

// isReservedRuleID reports whether id names a decision the gateway makes
// itself, which no policy may pose as.
func isReservedRuleID(id string) bool {
	switch id {
	case RuleDefaultDeny, RulePolicyError, RuleUnknownPolicyRef, RulePolicyRefNotSelectable, RuleHistoryError,
		RuleNotInApprovalGroup, RuleSelfApprovalDenied:
		return true
	}
	return false
}

func sortedAnnotationKeys(ann cedar.Annotations) []types.AnnotationKey {
	keys := make([]types.AnnotationKey, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// schemaCheck validates policies against the schema in force: the built-in
// one, extended by the folder's.
type schemaCheck struct {
	v *validate.Validator
	// contextAttrs holds the context attributes any action declares.
	contextAttrs map[types.String]bool
}

// checkModel validates the entities and requests Decide builds against the
// schema, with every optional context attribute both present and absent.
func checkModel(v *validate.Validator) error {
	caller := types.NewEntityUID("Caller", "caller")
	driver := types.NewEntityUID("Driver", "driver")
	tool := types.NewEntityUID("Tool", "tool")
	for _, ent := range []types.Entity{
		callerEntity(caller, CallerAttributes{}),
		callerEntity(caller, CallerAttributes{Groups: []string{"ops"}, Roles: []string{"admin"}}),
		{UID: driver},
		toolEntity(tool, driver, "driver", ToolAttributes{}),
		toolEntity(tool, driver, "driver", ToolAttributes{Package: "@scope/pkg", Export: "run", Version: "1.0.0", Tags: []string{"a", "b"}}),
	} {
		if err := v.Entity(ent); err != nil {
			return fmt.Errorf("entity %s: %w", ent.UID, err)
		}
	}
	for _, action := range []string{ActionRunTool, ActionCallTool} {
		for _, req := range []Request{
			{RequestID: "r"},
			{RequestID: "r", RunID: "run", StepID: "step", ParentRequestID: "parent", PolicyRef: "p",
				History: History{Calls: 2, ToolCalls: 1, Labels: []string{"sensitive"}, CallsLastMinute: 2, ToolCallsLastMinute: 1}},
		} {
			cctx, err := Context(req)
			if err != nil {
				return err
			}
			err = v.Request(cedar.Request{
				Principal: caller,
				Action:    types.NewEntityUID("Action", types.String(action)),
				Resource:  tool,
				Context:   cctx,
			})
			if err != nil {
				return err
			}
		}
	}
	for _, self := range []bool{false, true} {
		a := ApprovalRequest{Approver: "caller", Requester: "requester", RequestID: "r", Group: "ops"}
		if self {
			a.Requester = a.Approver
		}
		cctx, err := ApprovalContext(a)
		if err != nil {
			return err
		}
		err = v.Request(cedar.Request{
			Principal: caller,
			Action:    types.NewEntityUID("Action", ActionApprove),
			Resource:  tool,
			Context:   cctx,
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// compileSet parses and validates one policy file. path is used in messages,
// file (the base name) in positions and generated rule ids.
func compileSet(path, file string, src []byte, sc *schemaCheck) (set *policySet, errs []error) {
	// The parser and the experimental validator are third-party code run on
	// operator input; a crash in either must become a load error.
	defer func() {
		if r := recover(); r != nil {
			set, errs = nil, []error{fmt.Errorf("%s: internal failure while loading: %v", path, r)}
		}
	}()

	if !utf8.Valid(src) {
		line, col := lineCol(src, invalidUTF8Offset(src))
		return nil, []error{fmt.Errorf("%s:%d:%d: invalid UTF-8", path, line, col)}
	}
	list, err := parsePolicies(file, src, parseChunk)
	if err != nil {
		return nil, []error{parseError(path, src, err)}
	}

	sum := sha256.Sum256(src)
	set = &policySet{
		file:        file,
		digest:      "sha256:" + hex.EncodeToString(sum[:]),
		policies:    make([]loadedPolicy, len(list)),
		byID:        make(map[cedar.PolicyID]*loadedPolicy, len(list)),
		byResource:  make(map[types.EntityUID][]int),
		byPrincipal: make(map[types.EntityUID][]int),
	}
	firstUse := make(map[string]cedar.Position)
	known := KnownAnnotations()
	for i, p := range list {
		// Built only for a policy with a problem: at 10,000 rules, formatting
		// every position was a cost of its own.
		problem := func(format string, args ...any) {
			pos := p.Position()
			errs = append(errs, fmt.Errorf("%s:%d:%d: "+format, append([]any{path, pos.Line, pos.Column}, args...)...))
		}
		id := cedar.PolicyID("policy" + strconv.Itoa(i))
		ann := p.Annotations()
		ruleID := file + ":" + string(id)
		if rid, ok := ann[AnnotationID]; ok {
			ruleID = string(rid)
			switch {
			case ruleID == "":
				problem("@id must not be empty")
			case isReservedRuleID(ruleID):
				problem("@id(%q) is reserved for decisions the gateway makes itself", ruleID)
			}
			if prev, dup := firstUse[ruleID]; dup {
				problem("@id(%q) is already used by the policy at line %d", ruleID, prev.Line)
			} else {
				firstUse[ruleID] = p.Position()
			}
		}
		for _, key := range sortedAnnotationKeys(ann) {
			if !slices.Contains(known, string(key)) {
				problem("policy %q: unknown annotation @%s (a policy may carry @%s); an annotation the gateway does not implement is refused rather than ignored",
					ruleID, key, strings.Join(known, ", @"))
			}
		}
		problems := append(approvalAnnotationProblems(p), suggestionProblems(p)...)
		problems = append(problems, labelAnnotationProblems(p)...)
		for _, msg := range append(problems, sc.policy(p)...) {
			problem("policy %q: %s", ruleID, msg)
		}

		_, marked := ann[AnnotationApproval]
		labels, callerLabels := policyLabels(p)
		set.policies[i] = loadedPolicy{
			labels: labels, callerLabels: callerLabels,
			id: id, policy: p, ruleID: ruleID, reason: string(ann[AnnotationReason]),
			suggestion:    string(ann[AnnotationSuggestion]),
			approval:      string(ann[AnnotationApproval]),
			grantsApprove: p.Effect() == cedar.Permit && !marked && namesApprove(p),
			selfApproval:  string(ann[AnnotationSelfApproval]) == SelfApprovalAllowed,
		}
		set.byID[id] = &set.policies[i]
		set.history = set.history || usesHistory(p)
		ast := (*xast.Policy)(p.AST())
		if eq, ok := ast.Resource.(xast.ScopeTypeEq); ok {
			set.byResource[eq.Entity] = append(set.byResource[eq.Entity], i)
		} else if eq, ok := ast.Principal.(xast.ScopeTypeEq); ok {
			set.byPrincipal[eq.Entity] = append(set.byPrincipal[eq.Entity], i)
		} else {
			set.general = append(set.general, i)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return set, nil
}

// policy returns the schema violations of p.
//
// Cedar's validator types a `has` test on an attribute the schema does not
// declare as always false and then skips the right-hand side of `&&`. That
// is what lets rules read the open args record (declared empty) behind
// `context.args has x && …`, but it would also hide a misspelt context
// attribute there, so context attributes are checked separately everywhere.
func (sc *schemaCheck) policy(p *cedar.Policy) []string {
	ast := (*xast.Policy)(p.AST())
	var msgs []string
	unknown := make(map[types.String]bool)
	argsRead := make(map[types.String]bool) // X in context.args.X
	for _, cond := range ast.Conditions {
		xast.Inspect(xast.NewNode(cond.Body), func(n xast.IsNode) bool {
			var attr types.String
			switch n := n.(type) {
			case xast.NodeTypeAccess:
				if a, ok := n.Arg.(xast.NodeTypeAccess); ok && isContext(a.Arg) && a.Value == "args" {
					argsRead[n.Value] = true
				}
				if !isContext(n.Arg) {
					return true
				}
				attr = n.Value
			case xast.NodeTypeHas:
				if !isContext(n.Arg) {
					return true
				}
				attr = n.Value
			default:
				return true
			}
			if !sc.contextAttrs[attr] && !unknown[attr] {
				unknown[attr] = true
				msgs = append(msgs, fmt.Sprintf("context has no attribute `%s` (the schema declares %s)", attr, attrList(sc.contextAttrs)))
			}
			return true
		})
	}
	if err := sc.v.Policy("", ast); err != nil {
		for _, e := range flatten(err) {
			msg := e.Error()
			if rest, ok := strings.CutPrefix(msg, "attribute `"); ok {
				if name, _, ok := strings.Cut(rest, "` in context for "); ok {
					switch attr := types.String(name); {
					case unknown[attr]:
						continue // already reported above, more plainly
					case argsRead[attr] && !sc.contextAttrs[attr]:
						// The validator reports a tool argument read without
						// `has` as missing from the context, once per action.
						msg = fmt.Sprintf("tool argument `%s` is read without a `has` test; write `context.args has %s && …`", name, name)
					}
				}
			}
			if !slices.Contains(msgs, msg) {
				msgs = append(msgs, msg)
			}
		}
	}
	return msgs
}

func isContext(n xast.IsNode) bool {
	v, ok := n.(xast.NodeTypeVariable)
	return ok && v.Name == "context"
}

func attrList(attrs map[types.String]bool) string {
	names := make([]string, 0, len(attrs))
	for a := range attrs {
		names = append(names, string(a))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// inputPos matches the location cedar-go's policy parser writes into its
// messages: it names no file, only "<input>:line:column".
var inputPos = regexp.MustCompile(`\s*<input>:(\d+):(\d+):?`)

// parseError rewrites a policy parser error as "path:line:col: message".
// Some parser errors carry no position (an out-of-range integer literal, for
// one); those are placed at the start of the first statement that fails to
// parse on its own.
func parseError(path string, src []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "parser error: ")
	if m := inputPos.FindStringSubmatchIndex(msg); m != nil {
		line, _ := strconv.Atoi(msg[m[2]:m[3]])
		col, _ := strconv.Atoi(msg[m[4]:m[5]])
		// "parse error at <input>:2:14 \";\": invalid primary" reads
		// "parse error near \";\": invalid primary" once the location moves
		// to the front.
		before := strings.TrimSpace(msg[:m[0]])
		if b, ok := strings.CutSuffix(before, " at"); ok {
			before = b + " near"
		}
		msg = strings.TrimSpace(before + " " + strings.TrimSpace(msg[m[1]:]))
		if line > 0 {
			if !strings.HasPrefix(msg, "parse error") {
				msg = "parse error: " + msg
			}
			return fmt.Errorf("%s:%d:%d: %s", path, line, col, msg)
		}
	}
	if !strings.HasPrefix(msg, "parse error") {
		msg = "parse error: " + msg
	}
	line, col := lineCol(src, failingStatement(src))
	return fmt.Errorf("%s:%d:%d: %s", path, line, col, msg)
}

// failingStatement returns the offset where the first policy statement that
// does not parse on its own begins.
func failingStatement(src []byte) int {
	for _, st := range statements(src) {
		if _, err := cedar.NewPolicyListFromBytes("", src[st.start:st.end]); err != nil {
			return st.start
		}
	}
	return 0
}

type span struct{ start, end int }

// statements splits a policy document at the semicolons that end its
// statements, skipping semicolons in strings and comments. Each span starts
// at the statement's first byte that is neither space nor comment.
func statements(src []byte) []span {
	var out []span
	start := -1
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(string(src[i+2:]), "*/")
			if end < 0 {
				i = len(src)
			} else {
				i += 2 + end + 1
			}
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			continue
		}
		if start < 0 {
			start = i
		}
		switch c {
		case '"':
			for i++; i < len(src) && src[i] != '"'; i++ {
				if src[i] == '\\' {
					i++
				}
			}
		case ';':
			out = append(out, span{start, i + 1})
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, span{start, len(src)})
	}
	return out
}

// lineCol converts a byte offset to a 1-based line and a 1-based column
// counted in characters, as Cedar reports positions.
func lineCol(src []byte, off int) (line, col int) {
	off = min(max(off, 0), len(src))
	before := src[:off]
	line = 1 + strings.Count(string(before), "\n")
	lastNL := strings.LastIndexByte(string(before), '\n')
	return line, 1 + utf8.RuneCount(before[lastNL+1:])
}

func invalidUTF8Offset(src []byte) int {
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(src)
}
