package mcpdoor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/internal/ident"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The _meta keys the door reads on tools/call and writes on its results.
// They live under io.github.toolgate/, a reverse-DNS prefix of
// toolgate.github.io that the MCP specification does not reserve.
const (
	MetaIdempotencyKey = "io.github.toolgate/idempotencyKey"
	MetaRunID          = "io.github.toolgate/runId"
	MetaStepID         = "io.github.toolgate/stepId"
	MetaPolicyRef      = "io.github.toolgate/policyRef"

	MetaRequestID    = "io.github.toolgate/requestId"
	MetaEvidenceRefs = "io.github.toolgate/evidenceRefs"
	MetaEngineRef    = "io.github.toolgate/engineRef"
	MetaDecision     = "io.github.toolgate/decision"
	MetaExitCode     = "io.github.toolgate/exitCode"
	MetaApproval     = "io.github.toolgate/approval"
)

// JSON-RPC error codes of the door, in the range MCP leaves to
// implementations (-32000 to -32019).
const (
	// codeGatewayUnavailable: the call may not have run to the end; retry
	// with the same idempotency key. data holds requestId, retryable and
	// evidenceRefs.
	codeGatewayUnavailable = -32010
	// codeTooManyListens: a caller already holds MaxListensPerCaller
	// subscriptions/listen streams.
	codeTooManyListens = -32011
	codeInvalidParams  = jsonrpc.CodeInvalidParams
)

// requestIDPattern is the gateway's rule for request ids, checked here
// too so that a bad idempotency key is refused before anything is
// recorded.
const requestIDPattern = ident.RequestID

// freshIDEncoding spells fresh request ids: lowercase base32 without
// padding, 26 characters for 16 random bytes.
var freshIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// toolError is a call the door answers as a tool error (isError) before
// or instead of running it: the model can read it and fix its call.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

// result is the tool error as a result.
func (e *toolError) result() *mcp.CallToolResult { return errorResult(e.msg, nil) }

func toolErrorf(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...)}
}

// callTool serves tools/call: one RunTool call through the gateway, under
// the request's MCP server span.
func (d *Door) callTool(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
	ctx, span := d.gw.Telemetry().StartMCP(ctx, mcpRequest(req))
	defer func() { span.End(mcpErrorType(res, err)) }()
	return d.runCall(ctx, req)
}

// runCall is callTool's call.
func (d *Door) runCall(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	name, meta := req.Params.Name, map[string]any(req.Params.Meta)
	var sealed *approvalState
	if req.Params.RequestState != "" {
		st, err := d.openState(req.Params.RequestState, p.Caller, name, d.now())
		if err != nil {
			return errBadState.result(), nil
		}
		sealed = &st
	}
	rid, err := d.requestID(meta, sealed)
	if err != nil {
		return errorResult(err.Error(), nil), nil
	}
	run, err := d.runRequest(name, req.Params.Arguments, meta, rid)
	if err != nil {
		return errorResult(err.Error(), map[string]any{MetaRequestID: rid}), nil
	}
	run.Ctx.RunId = sessionRunID(ctx, run.Ctx.RunId)
	resp, err := d.gw.Run(ctx, p.Caller, gateway.Call{
		FrontDoor: Name, Request: run, Identity: p.Identity, TraceParent: traceFromMeta(meta),
	})
	if err != nil {
		if sealed != nil && status.Code(err) == codes.AlreadyExists {
			return errorResult("the arguments differ from those of the call waiting for approval; call again", mcp.Meta{MetaRequestID: rid}), nil
		}
		return d.runError(rid, err)
	}
	if pa := resp.GetPendingApproval(); pa != nil {
		if sealed != nil && pa.GetRequestHash() != sealed.Hash {
			return errBadState.result(), nil
		}
		return d.approvalResult(req, p.Caller, rid, resp), nil
	}
	return resultOf(rid, resp), nil
}

// requestID is the call's request_id: the client's idempotency key
// verbatim, else the one sealed in an approval's requestState, else
// fresh. A key and a state that disagree are refused.
func (d *Door) requestID(meta map[string]any, sealed *approvalState) (string, error) {
	key, present, err := metaString(meta, MetaIdempotencyKey)
	if err != nil {
		return "", err
	}
	switch {
	case present && !requestIDPattern.MatchString(key):
		return "", toolErrorf("_meta %q: must match %s", MetaIdempotencyKey, requestIDPattern)
	case present && sealed != nil && key != sealed.RequestID:
		return "", toolErrorf("_meta %q: differs from the request the requestState belongs to", MetaIdempotencyKey)
	case present:
		return key, nil
	case sealed != nil:
		return sealed.RequestID, nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mcpdoor: a fresh request id: %w", err)
	}
	return "mcp-" + freshIDEncoding.EncodeToString(b[:]), nil
}

// metaString reads an optional string of _meta; another type is an error.
func metaString(meta map[string]any, key string) (string, bool, error) {
	v, ok := meta[key]
	if !ok || v == nil {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, toolErrorf("_meta %q: want a string", key)
	}
	return s, true, nil
}

// policyRef is the set a request is decided by: the caller's
// _meta policyRef, else policy_ref.
func (d *Door) policyRef(meta map[string]any) (string, error) {
	ref, present, err := metaString(meta, MetaPolicyRef)
	if err != nil || !present {
		return d.cfg.PolicyRef, err
	}
	return ref, nil
}

// runRequest builds the RunTool request of a tools/call: the arguments
// (a JSON object, numbers kept exact as the other doors keep them), and
// ctx from _meta.
func (d *Door) runRequest(name string, raw json.RawMessage, meta map[string]any, rid string) (*toolgatev1.RunToolRequest, error) {
	args, err := decodeArguments(raw)
	if err != nil {
		return nil, err
	}
	s, err := structpb.NewStruct(args)
	if err != nil {
		return nil, toolErrorf("arguments: %v", err)
	}
	rc := &toolgatev1.RunContext{}
	if rc.RunId, _, err = metaString(meta, MetaRunID); err != nil {
		return nil, err
	}
	if rc.StepId, _, err = metaString(meta, MetaStepID); err != nil {
		return nil, err
	}
	if rc.PolicyRef, err = d.policyRef(meta); err != nil {
		return nil, err
	}
	return &toolgatev1.RunToolRequest{RequestId: rid, ToolId: name, Args: s, Ctx: rc}, nil
}

// decodeArguments decodes a call's arguments: an object, or absent or
// null for none.
func decodeArguments(raw json.RawMessage) (map[string]any, error) {
	args := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return args, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil || args == nil {
		return nil, toolErrorf("arguments: want a JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, toolErrorf("arguments: data after the JSON object")
	}
	return args, nil
}

// resultOf maps a RunTool answer onto a tool result: a deny is a tool
// error naming the rule, a tool that ran gives its output, a non-zero exit
// is a tool error.
func resultOf(rid string, resp *toolgatev1.RunToolResponse) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{}, Meta: resultMeta(rid, resp)}
	pc := resp.GetPolicyCheck()
	if pc.GetDecision() != "allow" {
		text := fmt.Sprintf("Denied by policy rule %s: %s", pc.GetRuleId(), pc.GetReason())
		if pc.GetSuggestion() != "" {
			text += "\nSuggestion: " + pc.GetSuggestion()
		}
		res.Content = append(res.Content, &mcp.TextContent{Text: text})
		res.IsError = true
		return res
	}
	tr := resp.GetToolResult()
	if tr == nil {
		// Allowed but not run cannot happen without an error; a result
		// that says nothing ran is still the honest answer.
		res.Content = append(res.Content, &mcp.TextContent{Text: "the tool did not run"})
		res.IsError = true
		return res
	}
	if tr.GetStdout() != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: tr.GetStdout()})
	}
	if tr.GetStderr() != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: "stderr:\n" + tr.GetStderr()})
	}
	if tr.GetData() != nil {
		res.StructuredContent = tr.GetData().AsInterface()
		if tr.GetStdout() == "" {
			// MCP asks for structured output also as text, for clients
			// that show only content.
			if b, err := protojson.Marshal(tr.GetData()); err == nil {
				res.Content = append(res.Content, &mcp.TextContent{Text: string(b)})
			}
		}
	}
	res.IsError = tr.GetExitCode() != 0
	return res
}

// resultMeta is the _meta of every result of a call that reached the
// gateway's decision.
func resultMeta(rid string, resp *toolgatev1.RunToolResponse) mcp.Meta {
	pc := resp.GetPolicyCheck()
	decision := map[string]any{"decision": pc.GetDecision(), "ruleId": pc.GetRuleId(), "reason": pc.GetReason()}
	if pc.GetSuggestion() != "" {
		decision["suggestion"] = pc.GetSuggestion()
	}
	if pc.GetRetryAfterMs() > 0 {
		decision["retryAfterMs"] = pc.GetRetryAfterMs()
	}
	m := mcp.Meta{
		MetaRequestID:    rid,
		MetaEvidenceRefs: nonNil(resp.GetEvidenceRefs()),
		MetaEngineRef:    resp.GetEngineRef(),
		MetaDecision:     decision,
	}
	if tr := resp.GetToolResult(); tr != nil {
		m[MetaExitCode] = tr.GetExitCode()
	}
	if resp.GetRunId() != "" {
		m[MetaRunID] = resp.GetRunId()
	}
	if resp.GetStepId() != "" {
		m[MetaStepID] = resp.GetStepId()
	}
	return m
}

// errorResult is a tool error with text, and meta when known.
func errorResult(text string, meta mcp.Meta) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true, Meta: meta}
}

// runError maps a RunTool error: the caller's mistakes are tool errors,
// the model can act on them; the gateway's trouble is a JSON-RPC error the
// client may retry with the same key.
func (d *Door) runError(rid string, err error) (*mcp.CallToolResult, error) {
	st := status.Convert(err)
	meta := mcp.Meta{MetaRequestID: rid}
	switch st.Code() {
	case codes.InvalidArgument:
		return errorResult(st.Message(), meta), nil
	case codes.AlreadyExists:
		return errorResult("idempotency key reused for a different call: "+st.Message(), meta), nil
	case codes.Aborted:
		return errorResult("still running; retry later with the same idempotency key: "+st.Message(), meta), nil
	}
	data := map[string]any{"requestId": rid, "retryable": retryable(st.Code()), "evidenceRefs": failureRefs(st)}
	if st.Code() != codes.Canceled {
		d.log.Warn("mcp door: a call failed", "request_id", rid, "code", st.Code().String(), "err", st.Message())
	}
	return nil, rpcError(codeGatewayUnavailable, st.Code().String()+": "+st.Message(), data)
}

// retryable reports whether a retry with the same key may succeed.
func retryable(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Internal, codes.Canceled:
		return true
	}
	return false
}

// failureRefs are the evidence refs a RunTool error carries.
func failureRefs(st *status.Status) []string {
	for _, detail := range st.Details() {
		if f, ok := detail.(*toolgatev1.RunToolFailure); ok {
			return nonNil(f.GetEvidenceRefs())
		}
	}
	return []string{}
}

// rpcError is a JSON-RPC error with data.
func rpcError(code int64, msg string, data any) error {
	e := &jsonrpc.Error{Code: code, Message: msg}
	if data != nil {
		if b, err := json.Marshal(data); err == nil {
			e.Data = b
		}
	}
	return e
}

// isInvalidArgument reports a gRPC InvalidArgument status.
func isInvalidArgument(err error) bool { return status.Code(err) == codes.InvalidArgument }

// statusMessage is a gRPC error's message without its code.
func statusMessage(err error) string { return strings.TrimSpace(status.Convert(err).Message()) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
