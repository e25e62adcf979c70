package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// The door's own tools, served with approval_tools: an approver working
// from an MCP client lists and decides approvals there. Policy decides
// who may (Action::"Approve"), as over gRPC.
const (
	ToolApprovalsList   = "toolgate.approvals.list"
	ToolApprovalsDecide = "toolgate.approvals.decide"
)

const approvalsListSchema = `{"type":"object","properties":{` +
	`"state":{"type":"string","enum":["pending","approved","denied","expired","consumed","all"],"description":"default pending"},` +
	`"approvalId":{"type":"string"},"requestId":{"type":"string"},"toolId":{"type":"string"},` +
	`"limit":{"type":"integer","minimum":1,"maximum":1000},"pageToken":{"type":"string"}},"additionalProperties":false}`

const approvalsDecideSchema = `{"type":"object","properties":{` +
	`"approvalId":{"type":"string"},"decision":{"type":"string","enum":["approve","deny"]},` +
	`"reason":{"type":"string","maxLength":1024}},"required":["approvalId","decision"],"additionalProperties":false}`

// addApprovalTools registers the approval tools; a catalog tool of the
// same name is a configuration error.
func (d *Door) addApprovalTools() error {
	for _, name := range []string{ToolApprovalsList, ToolApprovalsDecide} {
		if _, clash := d.tools[name]; clash {
			return fmt.Errorf("mcpdoor: approval_tools: the catalog has a tool named %s", name)
		}
		t, h := d.approvalTool(name)
		d.doorTools[name] = true
		d.srv.AddTool(t, h)
	}
	return nil
}

// approvalTool is one approval tool and its handler.
func (d *Door) approvalTool(name string) (*mcp.Tool, mcp.ToolHandler) {
	no := false
	switch name {
	case ToolApprovalsList:
		return &mcp.Tool{
			Name: name, Title: "List approvals",
			Description: "Lists the approvals you may decide or asked for (Toolgate)",
			InputSchema: json.RawMessage(approvalsListSchema),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no, OpenWorldHint: &no},
		}, d.listApprovals
	case ToolApprovalsDecide:
		return &mcp.Tool{
			Name: name, Title: "Decide an approval",
			Description: "Approves or denies a call waiting for approval, if policy lets you (Toolgate)",
			InputSchema: json.RawMessage(approvalsDecideSchema),
			Annotations: &mcp.ToolAnnotations{OpenWorldHint: &no},
		}, d.decideApproval
	}
	return nil, nil
}

// listApprovals serves toolgate.approvals.list.
func (d *Door) listApprovals(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	var in struct {
		State      string `json:"state"`
		ApprovalID string `json:"approvalId"`
		RequestID  string `json:"requestId"`
		ToolID     string `json:"toolId"`
		Limit      int32  `json:"limit"`
		PageToken  string `json:"pageToken"`
	}
	if err := strictArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err.Error(), nil), nil
	}
	resp, err := d.gw.ListApprovalsAs(ctx, p.Caller, p.Identity, &toolgatev1.ListApprovalsRequest{
		State: in.State, ApprovalId: in.ApprovalID, RequestId: in.RequestID, ToolId: in.ToolID,
		Limit: in.Limit, PageToken: in.PageToken,
	})
	if err != nil {
		return errorResult(status.Convert(err).Message(), nil), nil
	}
	return protoResult(resp), nil
}

// decideApproval serves toolgate.approvals.decide.
func (d *Door) decideApproval(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p, err := principalOf(ctx)
	if err != nil {
		return nil, err
	}
	var in struct {
		ApprovalID string `json:"approvalId"`
		Decision   string `json:"decision"`
		Reason     string `json:"reason"`
	}
	if err := strictArgs(req.Params.Arguments, &in); err != nil {
		return errorResult(err.Error(), nil), nil
	}
	a, err := d.gw.DecideApprovalAs(ctx, p.Caller, p.Identity, in.ApprovalID, in.Decision, in.Reason)
	if err != nil {
		return errorResult(status.Convert(err).Message(), nil), nil
	}
	return protoResult(a), nil
}

// strictArgs decodes a tool's arguments into v, refusing unknown keys.
func strictArgs(raw json.RawMessage, v any) error {
	args, err := decodeArguments(raw)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(args) // decoded JSON re-encodes
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return toolErrorf("arguments: %v", err)
	}
	return nil
}

// protoResult is a message as structured content and as its JSON text.
func protoResult(m proto.Message) *mcp.CallToolResult {
	b, err := protojson.MarshalOptions{UseProtoNames: false}.Marshal(m)
	if err != nil {
		return errorResult("the answer could not be encoded", nil)
	}
	var v any
	_ = json.Unmarshal(b, &v)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: v}
}
