package gateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// ApprovalOptions tune the calls policy holds for a human's approval.
type ApprovalOptions struct {
	// TTL is how long an approval may be decided and used; 0 means
	// DefaultApprovalTTL.
	TTL time.Duration
	// Notifier, if set, is told of every approval asked for and decided.
	Notifier Notifier
}

// Notifier is told of approvals as they are asked for and decided, so that
// people can be shown them. Notify must not block: it is called on the
// call's path, after the evidence is stored.
type Notifier interface {
	Notify(ev ApprovalEvent)
}

// Approval event types, in ApprovalEvent.Type.
const (
	EventApprovalPending = "approval.pending"
	EventApprovalDecided = "approval.decided"
)

// ApprovalEvent is what a Notifier is told: the approval as
// ListApprovals would show it, and whether it was asked for or decided.
type ApprovalEvent struct {
	// Type is EventApprovalPending or EventApprovalDecided.
	Type string
	// Approval is the approval, its arguments redacted as its evidence
	// records them.
	Approval *toolgatev1.Approval
}

// DecideApproval implements the ToolGateway service.
func (g *Gateway) DecideApproval(ctx context.Context, req *toolgatev1.DecideApprovalRequest) (*toolgatev1.DecideApprovalResponse, error) {
	return nil, status.Error(codes.Unimplemented, "DecideApproval is not implemented yet")
}

// ListApprovals implements the ToolGateway service.
func (g *Gateway) ListApprovals(ctx context.Context, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "ListApprovals is not implemented yet")
}
