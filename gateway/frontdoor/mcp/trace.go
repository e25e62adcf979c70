package mcpdoor

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/gateway/telemetry"
)

// MetaTraceParent is the _meta key of W3C trace context MCP reserves.
const MetaTraceParent = "traceparent"

// traceParentPattern is W3C trace context version 00.
var traceParentPattern = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// traceFromMeta is the call's traceparent when well formed, else "": a
// malformed one is dropped, never an error, as W3C asks of a receiver.
// The all-zero trace and span ids are invalid.
func traceFromMeta(meta map[string]any) string {
	tp, ok := meta[MetaTraceParent].(string)
	if !ok || !traceParentPattern.MatchString(tp) {
		return ""
	}
	if tp[3:35] == strings.Repeat("0", 32) || tp[36:52] == strings.Repeat("0", 16) {
		return ""
	}
	return tp
}

// protocolVersionPattern is an MCP protocol version, a date.
var protocolVersionPattern = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// mcpRequest describes a tools/call for its span: the tool (a name the
// door serves, so a catalog id), the protocol version when it is one, and
// the trace context of params._meta. The JSON-RPC id is not among them:
// the SDK does not hand it to a tool handler.
func mcpRequest(req *mcp.CallToolRequest) telemetry.MCPRequest {
	meta := map[string]any(req.Params.Meta)
	r := telemetry.MCPRequest{Method: "tools/call", Tool: req.Params.Name, TraceParent: traceFromMeta(meta)}
	if r.TraceParent != "" {
		r.TraceState, _ = meta[telemetry.TraceStateField].(string)
	}
	if v := req.ProtocolVersion(); protocolVersionPattern.MatchString(v) {
		r.ProtocolVersion = v
	}
	if req.Session != nil {
		r.SessionID = req.Session.ID()
	}
	return r
}

// mcpErrorType is the error.type of a tools/call's span: the JSON-RPC
// error code, tool_error for a result with isError, "" for success.
func mcpErrorType(res *mcp.CallToolResult, err error) string {
	var rpcErr *jsonrpc.Error
	switch {
	case errors.As(err, &rpcErr):
		return strconv.FormatInt(rpcErr.Code, 10)
	case err != nil:
		return "_OTHER"
	case res != nil && res.IsError:
		return "tool_error"
	}
	return ""
}
