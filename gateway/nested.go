package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// action is the Cedar action a call is decided as.
func (c call) action() string {
	if c.ParentRequestID != "" {
		return policy.ActionCallTool
	}
	return policy.ActionRunTool
}

// Execbox error codes the gateway answers nested calls with.
const (
	nestedToolError       = "tool_error"
	nestedInternalError   = "internal_error"
	nestedValidationError = "validation_error"
)

// nestedCaller runs the tool calls that one parent call's sandboxed code
// makes, each through the whole pipeline: a claim under its own request id,
// a decision as Action::"CallTool" with the parent in its context,
// redaction, evidence. Guest code can therefore reach no tool that the
// caller could not call directly under the same policy.
type nestedCaller struct {
	g      *Gateway
	caller string
	parent call
	// parentDriver's own tools are not offered: a sandbox starting
	// sandboxes would nest without bound.
	parentDriver string

	// cannotWait, when set, says why this run may not be paused for a
	// guest's call that needs approval (see guestWait).
	cannotWait string
	// approved, set on the run that follows the approval of a guest's
	// call, names that call: the first call of this run with its canonical
	// hash uses its request id, and so its approval.
	approved *approvedGuestCall

	// made lists the calls run so far, in the order they ended: the
	// gateway's own account, kept whatever the driver reports.
	mu   sync.Mutex
	made []evidence.NestedCallRecord
	// inFlight counts the calls begun and not yet ended.
	inFlight int
	// blocked, once set, says why the run may no longer be paused: a call
	// of it was (or may have been) dispatched, or was in flight when
	// another one had to wait for approval.
	blocked string
	// waiting is the first call of this run that waits for approval; from
	// then on no call of the run is made.
	waiting *guestWait
	// approvedUsed is set once a call took the approved request id.
	approvedUsed bool
}

// guestWait is a guest's call that waits for a human's approval.
type guestWait struct {
	requestID, toolID string
	approval          *toolgatev1.PendingApproval
	// paused reports what the guest was told: that its parent is paused
	// until the approval is decided.
	paused bool
}

// approvedGuestCall is a guest's call whose approval was granted: its
// canonical hash and its request id.
type approvedGuestCall struct {
	hash, requestID string
}

// maxRelatedRefs bounds the nested calls a failure's status details point
// to: they travel in gRPC trailers. tool_result.json lists them all.
const maxRelatedRefs = 64

// calls returns the nested calls run so far.
func (n *nestedCaller) calls() []evidence.NestedCallRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.made)
}

// CallTool runs one nested call, translates its outcome for the guest and
// keeps the gateway's own account of it.
func (n *nestedCaller) CallTool(ctx context.Context, callID, toolID string, input any) drivers.NestedResult {
	r, recorded := n.callTool(ctx, callID, toolID, input)
	n.mu.Lock()
	n.made = append(n.made, evidence.NestedCallRecord{
		CallID: callID, ToolID: toolID, RequestID: r.RequestID, OK: r.OK, Code: r.Code, Recorded: recorded,
	})
	n.mu.Unlock()
	return r
}

// Tools lists the catalog's tools, except those of the parent's driver.
func (n *nestedCaller) Tools() []drivers.ToolInfo {
	var out []drivers.ToolInfo
	for _, id := range n.g.catalogIDs() {
		t := n.g.tools[id]
		if t.Driver == n.parentDriver {
			continue
		}
		out = append(out, drivers.ToolInfo{ID: id, Description: t.Description})
	}
	return out
}

// callTool runs one nested call and translates its outcome for the guest.
// recorded reports whether the call has evidence of its own.
func (n *nestedCaller) callTool(ctx context.Context, callID, toolID string, input any) (_ drivers.NestedResult, recorded bool) {
	id := nestedRequestID(n.parent.RequestID, callID)
	fail := func(code, format string, args ...any) (drivers.NestedResult, bool) {
		return drivers.NestedResult{RequestID: id, Code: code, Message: fmt.Sprintf(format, args...)}, recorded
	}
	if w := n.begin(); w != nil {
		// Nothing more of this run may have an effect: it is to be run
		// again once the approval is decided, or it could not wait.
		return fail(nestedToolError, "tool %s not called: the parent request %s stopped making tool calls when guest call %s "+
			"had to wait for approval %s; nothing ran", toolID, n.parent.RequestID, w.requestID, w.approval.GetApprovalId())
	}
	defer n.end()
	// The parent's session ends a call's context when the execution runs
	// out of time; a call that had not started by then never does: no
	// claim, no decision, no evidence.
	if err := ctx.Err(); err != nil {
		return fail(nestedInternalError, "nested call %s not started: the execution ran out of time (%v)", id, err)
	}
	if t, ok := n.g.tools[toolID]; !ok || t.Driver == n.parentDriver {
		return fail(nestedInternalError, "unknown tool %q", toolID)
	}
	args, err := nestedArgs(input)
	if err != nil {
		return fail(nestedValidationError, "input for tool %s: %v", toolID, err)
	}
	c, err := parseRequest(&toolgatev1.RunToolRequest{
		RequestId: id,
		ToolId:    toolID,
		Args:      args,
		Ctx: &toolgatev1.RunContext{
			RunId: n.parent.RunID, StepId: n.parent.StepID, PolicyRef: n.parent.PolicyRef,
		},
	})
	if err != nil {
		return fail(nestedValidationError, "input for tool %s: %v", toolID, err)
	}
	// The guest acts for the parent's caller: with the groups and roles
	// it proved, under the parent's trace.
	c.ParentRequestID, c.Identity, c.TraceID = n.parent.RequestID, n.parent.Identity, n.parent.TraceID
	if approved := n.useApproved(ctx, c); approved != "" {
		id, c.RequestID = approved, approved
	}
	resp, err := n.runTraced(ctx, c)
	recorded = err == nil || hasEvidence(err)
	if err != nil {
		if recorded {
			// A failure after the claim may follow a dispatch.
			n.block("guest call %s of this run may have run (%s)", id, status.Code(err))
		}
		code := nestedInternalError
		if status.Code(err) == codes.InvalidArgument {
			// An argument with no canonical form: the guest's input.
			code = nestedValidationError
		}
		return fail(code, "nested call %s: %s", id, status.Convert(err).Message())
	}
	if pa := resp.GetPendingApproval(); pa != nil {
		return fail(nestedToolError, "%s", n.await(id, toolID, pa))
	}
	if pc := resp.GetPolicyCheck(); pc.GetDecision() != "allow" {
		return fail(nestedToolError, "tool %s denied by policy (rule %s): %s", toolID, pc.GetRuleId(), pc.GetReason())
	}
	n.block("guest call %s of this run was dispatched", id)
	tr := resp.GetToolResult()
	result, err := nestedResult(tr)
	if err != nil {
		return fail(nestedInternalError, "result of tool %s: %v", toolID, err)
	}
	if !resp.GetOk() {
		// The tool ran and failed: the guest gets its whole result, as on
		// success, beside the code.
		code := nestedToolError
		if inputRefused(tr) {
			code = nestedValidationError
		}
		r, _ := fail(code, "tool %s failed with exit code %d: %s", toolID, tr.GetExitCode(), tr.GetStderr())
		r.Result = result
		return r, recorded
	}
	return drivers.NestedResult{RequestID: id, OK: true, Result: result}, recorded
}

// hasEvidence reports whether a failed call's status says that evidence
// was written for it.
func hasEvidence(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if f, ok := d.(*toolgatev1.RunToolFailure); ok && len(f.GetEvidenceRefs()) > 0 {
			return true
		}
	}
	return false
}

// relatedRefs points to the evidence of the nested calls that have some:
// each one's manifest, at most maxRelatedRefs.
func relatedRefs(made []evidence.NestedCallRecord) []string {
	var refs []string
	for _, m := range made {
		if m.Recorded && len(refs) < maxRelatedRefs {
			refs = append(refs, evidence.Key(m.RequestID, evidence.ArtifactManifest))
		}
	}
	return refs
}

// inputRefused reports whether a failed tool result is its driver refusing
// the tool's input rather than the tool failing: exit code 2, the drivers'
// code for refused arguments, marked as a refusal in the driver's own form
// (the workspace's data.category "validation", a TPMJS executor's
// INVALID_REQUEST, an execbox validation_error). A command's own exit
// status 2 is not marked, and stays a tool_error.
func inputRefused(tr *toolgatev1.ToolResult) bool {
	if tr.GetExitCode() != 2 {
		return false
	}
	if tr.GetData().GetStructValue().GetFields()["category"].GetStringValue() == "validation" {
		return true
	}
	stderr := tr.GetStderr()
	return strings.HasPrefix(stderr, nestedValidationError+":") || strings.HasPrefix(stderr, "INVALID_REQUEST:")
}

// nestedArgs turns guest input into tool arguments: an object, or nothing.
func nestedArgs(input any) (*structpb.Struct, error) {
	if input == nil {
		return &structpb.Struct{}, nil
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, err
	}
	var args structpb.Struct
	if err := protojson.Unmarshal(raw, &args); err != nil {
		return nil, fmt.Errorf("want an object of arguments")
	}
	return &args, nil
}

// nestedResult is what guest code receives from a tool that ran, whether
// it succeeded or failed: the tool_result as the caller of RunTool would
// see it.
func nestedResult(tr *toolgatev1.ToolResult) (any, error) {
	out := map[string]any{"exit_code": tr.GetExitCode(), "stdout": tr.GetStdout(), "stderr": tr.GetStderr()}
	if tr.GetData() != nil {
		raw, err := protojson.Marshal(tr.GetData())
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var data any
		if err := dec.Decode(&data); err != nil {
			return nil, err
		}
		out["data"] = data
	}
	return out, nil
}

// plainCallID is a call id that can appear in a request id as it is.
// Real runners' call ids are UUIDs (36 characters), which fit.
var plainCallID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// nestedRequestID derives a nested call's request id from its parent's and
// the runner's call id: "<parent>:<callID>" when that is a valid request
// id, else "<parent, shortened>:n-<digest>". It is a pure function, so the
// same nested call always has the same id and its claim makes it run once.
func nestedRequestID(parent, callID string) string {
	if plainCallID.MatchString(callID) {
		if id := parent + ":" + callID; requestIDPattern.MatchString(id) {
			return id
		}
	}
	sum := sha256.Sum256([]byte(parent + "\x00" + callID))
	prefix := parent
	if len(prefix) > 100 {
		prefix = prefix[:100]
	}
	return prefix + ":n-" + hex.EncodeToString(sum[:8])
}

// runTraced runs a guest's call under an execute_tool span of its own, a
// child of the parent call's driver stage, which ctx carries.
func (n *nestedCaller) runTraced(ctx context.Context, c call) (resp *toolgatev1.RunToolResponse, err error) {
	tc := telemetry.Call{Tool: c.ToolID, RequestID: c.RequestID, Nested: true}
	ctx, span := n.g.telemetry.StartCall(ctx, tc)
	defer func() { span.End(callResult(resp, err)) }()
	return n.g.runValidated(ctx, n.caller, c)
}
