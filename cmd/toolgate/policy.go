package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/policy"
)

const policyUsage = `usage:
  toolgate policy validate DIR    parse and schema-validate a policy folder ("check" is an alias)
  toolgate policy authorize [flags]  decide one request (or, with --action Approve, one approver) without running it
  toolgate policy test DIR        run the *.test.json files of a policy folder
  toolgate policy schema          print the built-in Cedar schema every policy is validated against
  toolgate policy replay [flags]  decide the calls of an evidence store again under a candidate folder, report the flips
  toolgate policy shadow-report [flags]  the same report for the shadow (log-only) sets' recorded decisions
`

// policyCmd runs the policy subcommands.
func policyCmd(ctx context.Context, args []string, std stdio) int {
	return policyGroup().run(ctx, args, std)
}

// policyGroup is the commands of "toolgate policy".
func policyGroup() group {
	return group{name: "toolgate policy", usage: policyUsage, commands: map[string]command{
		"validate":  policyValidate,
		"check":     policyValidate,
		"authorize": policyAuthorize,
		"test":      policyTest,
		"schema":    policySchema,
		"replay":    policyReplay,
		// The shadow sets' live view, in replay's format.
		"shadow-report": policyShadowReport,
	}}
}

// policySchema prints the built-in Cedar schema.
func policySchema(_ context.Context, args []string, std stdio) int {
	fs := newFlagSet("toolgate policy schema", "", "", std)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitError
	}
	if _, err := std.Out.Write(policy.Schema()); err != nil {
		return std.exit("toolgate policy schema", err)
	}
	return exitOK
}

// policyValidate loads a folder as serve does (every policy validated
// against the built-in schema, extended by the folder's) and prints every
// problem Load reports as file:line:col: message. Exit 1 when there is one.
func policyValidate(_ context.Context, args []string, std stdio) int {
	fs := newFlagSet("toolgate policy validate", "DIR", "", std)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError
	}
	dir := fs.Arg(0)
	engine, err := policy.Load(dir)
	if err != nil {
		fmt.Fprintln(std.Err, err)
		return exitFailure
	}
	refs := engine.Refs()
	fmt.Fprintf(std.Out, "ok: %d policy set(s) in %s: %s\n", len(refs), dir, strings.Join(refs, ", "))
	return exitOK
}

// policyAuthorize decides one request as the gateway would, without running
// anything: a call, or with --action Approve an approver of a pending call.
// Exit 0 on allow, 1 on deny and on approval_required (the call does not
// run yet), 2 on a usage or load error.
func policyAuthorize(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs := newFlagSet("toolgate policy authorize", "--caller C --tool T [flags]", "", std)
	dir := fs.String("policies", "policies", "policy `folder`")
	var spec policy.RequestSpec
	fs.StringVar(&spec.Caller, "caller", "", "caller `name` (required), as authentication would set it")
	fs.StringVar(&spec.Tool, "tool", "", "tool `id` (required), e.g. workspace.readFile")
	fs.StringVar(&spec.Driver, "driver", "", "`driver` serving the tool (required unless the default catalog names it, as it does workspace.*)")
	fs.StringVar(&spec.Action, "action", "", "RunTool, CallTool or Approve (default CallTool with --parent-request-id, else RunTool)")
	var pending policy.SpecApproval
	fs.StringVar(&pending.Requester, "requester", "", "with --action Approve: the pending call's caller (--caller is the approver)")
	fs.StringVar(&pending.Group, "group", "", "with --action Approve: the approval rule's @approval `group`")
	argsJSON := fs.String("args", "{}", "tool arguments as a JSON `object`")
	fs.StringVar(&spec.Ctx.RequestID, "request-id", "", "ctx request `id` (default dry-run)")
	fs.StringVar(&spec.Ctx.PolicyRef, "policy-ref", "", "ctx.policy_ref (default policy.default)")
	fs.StringVar(&spec.Ctx.RunID, "run-id", "", "ctx.run_id")
	fs.StringVar(&spec.Ctx.StepID, "step-id", "", "ctx.step_id")
	fs.StringVar(&spec.Ctx.ParentRequestID, "parent-request-id", "", "the RunTool request whose sandbox made this nested call")
	var attrs policy.SpecToolAttributes
	fs.StringVar(&attrs.Package, "package", "", "tool attribute package")
	fs.StringVar(&attrs.Export, "export", "", "tool attribute export")
	fs.StringVar(&attrs.Version, "version", "", "tool attribute version")
	tags := fs.String("tags", "", "tool attribute tags, comma-separated")
	groups := fs.String("groups", "", "the caller's groups (principal.groups), comma-separated")
	roles := fs.String("roles", "", "the caller's roles (principal.roles), comma-separated")
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	sessionFile := fs.String("session-json", "", "`file` holding the call's history: "+
		`{"calls", "toolCalls", "labels", "callerLabels", "callsLastMinute", "toolCallsLastMinute"}`)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "toolgate policy authorize: "+format+"\n", a...)
		return exitError
	}
	if *sessionFile != "" {
		var err error
		if spec.Session, err = readSession(*sessionFile); err != nil {
			return fail("--session-json: %v", err)
		}
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	dec := json.NewDecoder(strings.NewReader(*argsJSON))
	dec.UseNumber() // as the gateway decodes arguments for policy
	if err := dec.Decode(&spec.Args); err != nil || dec.More() {
		return fail("--args: want one JSON object: %v", err)
	}
	attrs.Tags = splitList(*tags)
	spec.Groups, spec.Roles = splitList(*groups), splitList(*roles)
	if attrs.Package != "" || attrs.Export != "" || attrs.Version != "" || len(attrs.Tags) > 0 {
		spec.ToolAttributes = &attrs
	}
	if pending != (policy.SpecApproval{}) {
		spec.Approval = &pending
	}
	cat, err := defaultCatalog()
	if err != nil {
		return fail("%v", err)
	}
	explain, err := dryRun(spec.In(cat), cat)
	if err != nil {
		return fail("%v", err)
	}
	engine, err := policy.Load(*dir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	x := explain(ctx, engine)
	if *asJSON {
		err = writeExplanationJSON(stdout, x)
	} else {
		err = writeExplanation(stdout, x)
	}
	if err != nil {
		return fail("%v", err)
	}
	if !x.Allow {
		return exitFailure
	}
	return exitOK
}

// readSession reads the history file of --session-json, strictly: a
// misspelt fact would otherwise be a silent zero.
func readSession(path string) (*policy.SpecSession, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s policy.SpecSession
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: want one JSON object", path)
	}
	return &s, nil
}

// dryRun checks spec and returns the question it asks of an engine: a
// decision on a call or, for --action Approve, on an approver. Workspace
// arguments are normalised first, as the gateway does before deciding.
func dryRun(spec policy.RequestSpec, cat catalog) (func(context.Context, *policy.Engine) policy.Explanation, error) {
	if !spec.IsApproval() {
		req, err := spec.Request()
		if err == nil {
			req, err = cat.canonical(req)
		}
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, e *policy.Engine) policy.Explanation { return e.Explain(ctx, req) }, nil
	}
	a, err := spec.ApprovalRequest()
	if err != nil {
		return nil, err
	}
	canon, err := cat.canonical(policy.Request{ToolID: a.ToolID, Driver: a.Driver, Args: a.Args})
	if err != nil {
		return nil, err
	}
	a.Args = canon.Args
	return func(ctx context.Context, e *policy.Engine) policy.Explanation { return e.ExplainApproval(ctx, a) }, nil
}

// explanationJSON is the --json form of a policy.Explanation; its field
// names follow the gateway's policy_decision evidence.
type explanationJSON struct {
	Decision        string        `json:"decision"`
	Approvers       string        `json:"approvers,omitempty"`
	RuleID          string        `json:"rule_id"`
	Reason          string        `json:"reason"`
	Suggestion      string        `json:"suggestion,omitempty"`
	PolicyRef       string        `json:"policy_ref"`
	PolicySetDigest string        `json:"policy_set_digest"`
	Matched         []matchedJSON `json:"matched"`
	Errors          []string      `json:"errors"`
}

type matchedJSON struct {
	RuleID      string `json:"rule_id"`
	Effect      string `json:"effect"`
	Reason      string `json:"reason"`
	Approval    string `json:"approval,omitempty"`
	Suggestion  string `json:"suggestion,omitempty"`
	Position    string `json:"position"`
	Determining bool   `json:"determining"`
}

func writeExplanationJSON(w io.Writer, x policy.Explanation) error {
	out := explanationJSON{
		Decision:        x.Word(),
		Approvers:       x.Approvers,
		RuleID:          x.RuleID,
		Reason:          x.Reason,
		Suggestion:      x.Suggestion,
		PolicyRef:       x.PolicyRef,
		PolicySetDigest: x.PolicySetDigest,
		Matched:         make([]matchedJSON, 0, len(x.Matched)),
		Errors:          append([]string{}, x.Errors...),
	}
	for _, m := range x.Matched {
		out.Matched = append(out.Matched, matchedJSON(m))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func writeExplanation(w io.Writer, x policy.Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "decision:   %s\n", x.Word())
	if x.ApprovalRequired {
		fmt.Fprintf(&b, "approvers:  a member of %s must approve this exact call\n", x.Approvers)
	}
	fmt.Fprintf(&b, "rule_id:    %s\n", x.RuleID)
	fmt.Fprintf(&b, "reason:     %s\n", x.Reason)
	if x.Suggestion != "" {
		fmt.Fprintf(&b, "suggestion: %s\n", x.Suggestion)
	}
	fmt.Fprintf(&b, "policy_ref: %s", x.PolicyRef)
	if x.PolicySetDigest != "" {
		fmt.Fprintf(&b, " (%s)", x.PolicySetDigest)
	}
	b.WriteString("\n")
	if len(x.Matched) == 0 {
		b.WriteString("matched:    no policy\n")
	} else {
		// The marker singles out the policies that decided, since a
		// matching permit does not decide when a forbid also matches.
		b.WriteString("matched:    (* decided)\n")
		for _, m := range x.Matched {
			mark := " "
			if m.Determining {
				mark = "*"
			}
			fmt.Fprintf(&b, "  %s %s %s at %s", mark, m.Effect, m.RuleID, m.Position)
			if m.Approval != "" {
				fmt.Fprintf(&b, " @approval(%s)", m.Approval)
			}
			if m.Reason != "" {
				fmt.Fprintf(&b, ": %s", m.Reason)
			}
			b.WriteString("\n")
		}
	}
	for _, e := range x.Errors {
		fmt.Fprintf(&b, "error:      %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// policyTest runs a folder's policy tests. Exit 0 when all pass, 1 when one
// fails or there are none, 2 when the policies or a test file do not load.
func policyTest(ctx context.Context, args []string, std stdio) int {
	stdout, stderr := std.Out, std.Err
	fs := newFlagSet("toolgate policy test", "DIR", "", std)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError
	}
	cat, err := defaultCatalog()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	rep, err := policy.RunTests(ctx, fs.Arg(0), cat)
	switch {
	case errors.Is(err, policy.ErrNoTests):
		fmt.Fprintln(stderr, err)
		return exitFailure
	case err != nil:
		fmt.Fprintln(stderr, err)
		return exitError
	}
	var b strings.Builder
	for _, r := range rep.Results {
		for _, m := range r.Mismatches {
			fmt.Fprintf(&b, "%s: test %q: %s\n", r.File, r.Case.Name, m)
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed\n", rep.Passed(), rep.Failed())
	io.WriteString(stdout, b.String())
	if rep.Failed() > 0 {
		return exitFailure
	}
	return exitOK
}

func versionString() string {
	return "toolgate " + gateway.Version
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
