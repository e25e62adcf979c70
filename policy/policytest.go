package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TestFileExt ends the name of a policy test file kept beside the policies.
const TestFileExt = ".test.json"

// ErrNoTests is returned by RunTests when a folder holds no test file.
var ErrNoTests = errors.New("no " + TestFileExt + " files")

// RequestSpec is a request as a policy author writes it: in a test file, or
// as the flags of a dry run. Request turns it into the Request the gateway
// would build for the same call.
type RequestSpec struct {
	// Caller is the authenticated caller. Required.
	Caller string `json:"caller"`
	// Groups and Roles are the caller's principal.groups and
	// principal.roles, as the gateway's auth configuration gives them.
	Groups []string `json:"groups,omitempty"`
	Roles  []string `json:"roles,omitempty"`
	// Tool is the tool id. Required.
	Tool string `json:"tool"`
	// Driver is the driver serving the tool; it may be left out for a
	// tool the spec's Catalog names (the tools the default configuration
	// publishes, such as "workspace.readFile").
	Driver string `json:"driver,omitempty"`
	// Action is ActionRunTool, ActionCallTool or ActionApprove. Left out, it
	// is what the gateway uses: CallTool for a nested call (one with a
	// parent_request_id), RunTool otherwise. For ActionApprove, Caller is
	// the approver and Approval is required; Tool, Driver, Args, Ctx and
	// ToolAttributes describe the pending call.
	Action string `json:"action,omitempty"`
	// Approval describes the pending call an Approve request decides.
	Approval *SpecApproval `json:"approval,omitempty"`
	// Args are the tool arguments; numbers must have been decoded with
	// UseNumber, as the gateway decodes them.
	Args map[string]any `json:"args,omitempty"`
	// Ctx is the request's ctx.
	Ctx SpecContext `json:"ctx,omitzero"`
	// ToolAttributes are the catalog facts of the tool.
	ToolAttributes *SpecToolAttributes `json:"tool_attributes,omitempty"`
	// Session is the call's history; left out, the call is a first call.
	Session *SpecSession `json:"session,omitempty"`

	// catalog names the driver of a tool given without one (In).
	catalog Catalog
}

// Catalog stands for the gateway's catalog where a request is decided
// without a gateway (a dry run, a policy test file): it names the driver
// serving a tool id. The policy package knows no driver by name.
type Catalog interface {
	// DriverOf returns the driver serving toolID, false when the catalog
	// has no such tool.
	DriverOf(toolID string) (driver string, ok bool)
}

// In returns s whose tool, given without a driver, takes the driver c
// names; a nil c names none.
func (s RequestSpec) In(c Catalog) RequestSpec {
	s.catalog = c
	return s
}

// SpecSession is the history of a RequestSpec's call, named as Cedar sees
// it: calls, toolCalls and labels are context.session's; callsLastMinute
// and toolCallsLastMinute are context.caller's. CallerLabels are labels
// the caller acquired in earlier runs (@caller_label): the gateway merges
// them into context.session.labels, and so does Request.
type SpecSession struct {
	Calls               int64    `json:"calls"`
	ToolCalls           int64    `json:"toolCalls"`
	Labels              []string `json:"labels,omitempty"`
	CallerLabels        []string `json:"callerLabels,omitempty"`
	CallsLastMinute     int64    `json:"callsLastMinute"`
	ToolCallsLastMinute int64    `json:"toolCallsLastMinute"`
}

// History returns the History s describes, or an error for one no gateway
// could record: a negative count, a tool count above its total, or a
// label the policy language would refuse.
func (s SpecSession) History() (History, error) {
	switch {
	case s.Calls < 0 || s.ToolCalls < 0 || s.CallsLastMinute < 0 || s.ToolCallsLastMinute < 0:
		return History{}, errors.New("session: counts must not be negative")
	case s.ToolCalls > s.Calls:
		return History{}, fmt.Errorf("session: toolCalls %d is more than calls %d", s.ToolCalls, s.Calls)
	case s.ToolCallsLastMinute > s.CallsLastMinute:
		return History{}, fmt.Errorf("session: toolCallsLastMinute %d is more than callsLastMinute %d",
			s.ToolCallsLastMinute, s.CallsLastMinute)
	}
	labels := append(slices.Clone(s.Labels), s.CallerLabels...)
	for _, l := range labels {
		if !ValidLabel(l) {
			return History{}, fmt.Errorf("session: label %q must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'", l)
		}
	}
	return History{Calls: s.Calls, ToolCalls: s.ToolCalls, Labels: sortedUnique(labels),
		CallsLastMinute: s.CallsLastMinute, ToolCallsLastMinute: s.ToolCallsLastMinute}, nil
}

// SpecContext is the ctx of a RequestSpec.
type SpecContext struct {
	RequestID       string `json:"request_id,omitempty"`
	RunID           string `json:"run_id,omitempty"`
	StepID          string `json:"step_id,omitempty"`
	PolicyRef       string `json:"policy_ref,omitempty"`
	ParentRequestID string `json:"parent_request_id,omitempty"`
}

// SpecToolAttributes are the catalog facts of a RequestSpec's tool.
type SpecToolAttributes struct {
	Package string   `json:"package,omitempty"`
	Export  string   `json:"export,omitempty"`
	Version string   `json:"version,omitempty"`
	Tags    []string `json:"tags,omitempty"`
	Labels  []string `json:"labels,omitempty"`
}

// SpecApproval is the pending call of an Approve RequestSpec.
type SpecApproval struct {
	// Requester is the pending call's caller. Required.
	Requester string `json:"requester"`
	// Group is the approval rule's @approval group. Required.
	Group string `json:"group"`
}

// IsApproval reports whether s asks DecideApproval rather than Decide.
func (s RequestSpec) IsApproval() bool { return s.Action == ActionApprove }

// ApprovalRequest returns the ApprovalRequest the gateway builds when
// s.Caller decides the pending call s describes, or an error naming the
// field that is missing or wrong.
func (s RequestSpec) ApprovalRequest() (ApprovalRequest, error) {
	if !s.IsApproval() {
		return ApprovalRequest{}, fmt.Errorf("action %q is not %q", s.Action, ActionApprove)
	}
	if s.Approval == nil {
		return ApprovalRequest{}, fmt.Errorf("approval (requester and group) is required for action %q", ActionApprove)
	}
	if s.Session != nil {
		return ApprovalRequest{}, fmt.Errorf("session is for a call; approving one (action %q) is decided without history", ActionApprove)
	}
	call := s
	call.Action, call.Approval = "", nil
	if call.Ctx.ParentRequestID != "" {
		call.Action = ActionCallTool
	}
	call.Caller = s.Approval.Requester
	req, err := call.Request()
	if err != nil {
		return ApprovalRequest{}, fmt.Errorf("approval: %w", err)
	}
	switch {
	case s.Caller == "":
		return ApprovalRequest{}, errors.New("caller (the approver) is required")
	case !approvalGroup.MatchString(s.Approval.Group):
		return ApprovalRequest{}, fmt.Errorf("approval.group %q must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'", s.Approval.Group)
	}
	return ApprovalRequest{
		Approver:      s.Caller,
		ApproverAttrs: CallerAttributes{Groups: s.Groups, Roles: s.Roles},
		ToolID:        req.ToolID,
		Driver:        req.Driver,
		Tool:          req.Tool,
		Requester:     req.Caller,
		RequestID:     req.RequestID,
		PolicyRef:     req.PolicyRef,
		Group:         s.Approval.Group,
		Args:          req.Args,
	}, nil
}

// specRequestID is the request id of a spec that gives none; the gateway
// never sends an empty one.
const specRequestID = "dry-run"

// Request returns the Request the gateway builds for s, or an error naming
// the field that is missing or wrong.
func (s RequestSpec) Request() (Request, error) {
	switch {
	case s.IsApproval():
		return Request{}, fmt.Errorf("action %q is decided by ApprovalRequest, not Request", ActionApprove)
	case s.Approval != nil:
		return Request{}, fmt.Errorf("approval is only for action %q", ActionApprove)
	}
	req := Request{
		Caller:          s.Caller,
		CallerAttrs:     CallerAttributes{Groups: s.Groups, Roles: s.Roles},
		Action:          s.Action,
		ToolID:          s.Tool,
		Driver:          s.Driver,
		RequestID:       s.Ctx.RequestID,
		RunID:           s.Ctx.RunID,
		StepID:          s.Ctx.StepID,
		PolicyRef:       s.Ctx.PolicyRef,
		ParentRequestID: s.Ctx.ParentRequestID,
		Args:            s.Args,
	}
	if s.ToolAttributes != nil {
		req.Tool = ToolAttributes(*s.ToolAttributes)
	}
	if s.Session != nil {
		h, err := s.Session.History()
		if err != nil {
			return Request{}, err
		}
		req.History = h
	}
	if req.Args == nil {
		req.Args = map[string]any{}
	}
	if req.RequestID == "" {
		req.RequestID = specRequestID
	}
	switch {
	case req.Action != "":
	case req.ParentRequestID != "":
		req.Action = ActionCallTool
	default:
		req.Action = ActionRunTool
	}
	if req.Driver == "" && s.catalog != nil {
		if driver, ok := s.catalog.DriverOf(req.ToolID); ok {
			req.Driver = driver
		}
	}
	switch {
	case req.Caller == "":
		return Request{}, errors.New("caller is required")
	case req.ToolID == "":
		return Request{}, errors.New("tool is required")
	case req.Driver == "":
		return Request{}, fmt.Errorf("driver is required for tool %q, which the catalog does not name", req.ToolID)
	case req.Action != ActionRunTool && req.Action != ActionCallTool:
		return Request{}, fmt.Errorf("action %q must be %q or %q", req.Action, ActionRunTool, ActionCallTool)
	}
	return req, nil
}

// TestCase is one test of a test file: a request and the decision expected
// for it.
type TestCase struct {
	// Name identifies the case in reports; unique within its file.
	Name    string      `json:"name"`
	Request RequestSpec `json:"request"`
	Expect  Expectation `json:"expect"`
}

// Expectation is what a TestCase expects Decide (or, for an Approve
// request, DecideApproval) to return.
type Expectation struct {
	// Decision is "allow", "deny" or "approval_required" (Decision.Word).
	// Required. An Approve request is never "approval_required".
	Decision string `json:"decision"`
	// RuleID, when set, must equal the decision's rule id.
	RuleID string `json:"rule_id,omitempty"`
	// Approvers, when set, must equal the decision's @approval group.
	Approvers string `json:"approvers,omitempty"`
	// Suggestion, when set, must equal the deciding rule's @suggestion.
	Suggestion string `json:"suggestion,omitempty"`
}

// TestResult is the outcome of one TestCase.
type TestResult struct {
	// File is the test file's path.
	File string
	Case TestCase
	// Got is what the engine decided.
	Got Decision
	// Mismatches lists, one per line of a report, how Got differs from the
	// expectation; it is empty when the case passed.
	Mismatches []string
}

// Passed reports whether the case got what it expected.
func (r TestResult) Passed() bool { return len(r.Mismatches) == 0 }

// Report is the outcome of RunTests, in file name order, then case order.
type Report struct {
	Results []TestResult
}

// Failed returns the number of failing cases.
func (r Report) Failed() int {
	n := 0
	for _, res := range r.Results {
		if !res.Passed() {
			n++
		}
	}
	return n
}

// Passed returns the number of passing cases.
func (r Report) Passed() int { return len(r.Results) - r.Failed() }

// RunTests loads the policies of dir and runs every test file
// (<dir>/*.test.json) against them; cat names the drivers of the tools
// a test gives without one. A failing case is a result, not an
// error; the error reports a folder that does not load, a test file that is
// malformed (every such problem, each naming its file) or, as ErrNoTests, a
// folder without test files.
func RunTests(ctx context.Context, dir string, cat Catalog) (Report, error) {
	engine, err := Load(dir)
	if err != nil {
		return Report{}, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Report{}, fmt.Errorf("read policy folder %s: %w", dir, err)
	}
	var (
		rep   Report
		errs  []error
		files int
	)
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, TestFileExt) || strings.HasPrefix(name, ".") || entry.IsDir() {
			continue
		}
		files++
		path := filepath.Join(dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		cases, err := ParseTestFile(path, src, cat)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, tc := range cases {
			rep.Results = append(rep.Results, runCase(ctx, engine, path, tc))
		}
	}
	if len(errs) > 0 {
		return Report{}, errors.Join(errs...)
	}
	if files == 0 {
		return Report{}, fmt.Errorf("%s: %w", dir, ErrNoTests)
	}
	return rep, nil
}

// runCase decides tc's request; ParseTestFile has already checked that it
// forms a valid Request.
func runCase(ctx context.Context, e *Engine, file string, tc TestCase) TestResult {
	res := TestResult{File: file, Case: tc}
	var err error
	if res.Got, err = decide(ctx, e, tc.Request); err != nil {
		res.Mismatches = []string{err.Error()}
		return res
	}
	got := res.Got.Word()
	why := fmt.Sprintf("(rule_id %s: %s)", res.Got.RuleID, res.Got.Reason)
	if got != tc.Expect.Decision {
		res.Mismatches = append(res.Mismatches, fmt.Sprintf("decision: want %s, got %s %s", tc.Expect.Decision, got, why))
	}
	if tc.Expect.RuleID != "" && tc.Expect.RuleID != res.Got.RuleID {
		res.Mismatches = append(res.Mismatches, fmt.Sprintf("rule_id: want %s, got %s %s", tc.Expect.RuleID, res.Got.RuleID, why))
	}
	if tc.Expect.Approvers != "" && tc.Expect.Approvers != res.Got.Approvers {
		res.Mismatches = append(res.Mismatches, fmt.Sprintf("approvers: want %s, got %q %s", tc.Expect.Approvers, res.Got.Approvers, why))
	}
	if tc.Expect.Suggestion != "" && tc.Expect.Suggestion != res.Got.Suggestion {
		res.Mismatches = append(res.Mismatches, fmt.Sprintf("suggestion: want %q, got %q %s", tc.Expect.Suggestion, res.Got.Suggestion, why))
	}
	return res
}

// decide asks the engine what the gateway would for spec: DecideApproval
// for an Approve request, Decide otherwise.
func decide(ctx context.Context, e *Engine, spec RequestSpec) (Decision, error) {
	if spec.IsApproval() {
		a, err := spec.ApprovalRequest()
		if err != nil {
			return Decision{}, err
		}
		return e.DecideApproval(ctx, a), nil
	}
	req, err := spec.Request()
	if err != nil {
		return Decision{}, err
	}
	return e.Decide(ctx, req), nil
}

// checkSpec reports whether spec forms a valid request of either kind.
func checkSpec(spec RequestSpec) error {
	if spec.IsApproval() {
		_, err := spec.ApprovalRequest()
		return err
	}
	_, err := spec.Request()
	return err
}

// ParseTestFile decodes the test file at path (used only in messages)
// strictly: unknown fields, a missing or duplicate name, an expected decision
// other than "allow", "deny" or "approval_required" (and "approval_required"
// for an Approve request), a request that does not form a valid Request
// and a file without tests are all errors. Each problem is reported on its own
// line starting with "<path>: " and naming the case, or with
// "<path>:<line>:<column>: " for malformed JSON. Numbers in args are kept as
// json.Number, as the gateway keeps them. cat names the drivers of the
// tools a test gives without one; each case's Request is in it (In).
func ParseTestFile(path string, src []byte, cat Catalog) ([]TestCase, error) {
	var file struct {
		Tests []json.RawMessage `json:"tests"`
	}
	if err := decodeStrict(src, &file); err != nil {
		if pe, ok := errors.AsType[*positionError](err); ok {
			return nil, fmt.Errorf("%s:%d:%d: %w", path, pe.line, pe.col, pe.err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(file.Tests) == 0 {
		return nil, fmt.Errorf(`%s: "tests" holds no test`, path)
	}
	cases := make([]TestCase, 0, len(file.Tests))
	var errs []error
	seen := make(map[string]bool, len(file.Tests))
	for i, raw := range file.Tests {
		var tc TestCase
		if err := decodeStrict(raw, &tc); err != nil {
			errs = append(errs, fmt.Errorf("%s: tests[%d]: %w", path, i, err))
			continue
		}
		tc.Request = tc.Request.In(cat)
		label := fmt.Sprintf("%s: tests[%d] %q", path, i, tc.Name)
		switch {
		case tc.Name == "":
			errs = append(errs, fmt.Errorf("%s: tests[%d]: name is required", path, i))
		case seen[tc.Name]:
			errs = append(errs, fmt.Errorf("%s: name is already used by an earlier test", label))
		}
		seen[tc.Name] = true
		switch d := tc.Expect.Decision; {
		case d == WordApprovalRequired && tc.Request.IsApproval():
			errs = append(errs, fmt.Errorf(`%s: expect.decision %q is impossible for action %q: an approver is allowed or denied`, label, d, ActionApprove))
		case d != WordAllow && d != WordDeny && d != WordApprovalRequired:
			errs = append(errs, fmt.Errorf(`%s: expect.decision %q must be "allow", "deny" or "approval_required"`, label, d))
		}
		if err := checkSpec(tc.Request); err != nil {
			errs = append(errs, fmt.Errorf("%s: request: %w", label, err))
		}
		cases = append(cases, tc)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cases, nil
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields and trailing data. Malformed JSON is reported as a *positionError.
func decodeStrict(src []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			// Offset counts the offending byte as read.
			return newPositionError(src, int(se.Offset)-1, err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return newPositionError(src, len(src), errors.New("unexpected end of JSON input"))
		}
		return err
	}
	end := int(dec.InputOffset())
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		rest := bytes.TrimLeft(src[end:], " \t\r\n")
		return newPositionError(src, len(src)-len(rest), errors.New("unexpected data after the JSON value"))
	}
	return nil
}

// positionError is a problem at a line and column of a test file.
type positionError struct {
	line, col int
	err       error
}

func newPositionError(src []byte, off int, err error) *positionError {
	line, col := lineCol(src, off)
	return &positionError{line: line, col: col, err: err}
}

func (e *positionError) Error() string { return fmt.Sprintf("%d:%d: %v", e.line, e.col, e.err) }

func (e *positionError) Unwrap() error { return e.err }
