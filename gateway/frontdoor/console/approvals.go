package console

import (
	"context"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// approvalGateway is what the inbox needs of the gateway: its own
// listing and decision of approvals, so that a decision made in the
// browser is the one DecideApproval makes.
type approvalGateway interface {
	ListApprovalsAs(ctx context.Context, caller string, identity *gateway.Identity, req *toolgatev1.ListApprovalsRequest) (*toolgatev1.ListApprovalsResponse, error)
	DecideApprovalAs(ctx context.Context, caller string, identity *gateway.Identity, id, decision, reason string) (*toolgatev1.Approval, error)
}

type approvals struct{ g approvalGateway }

// maxHeld bounds the inbox's listing.
const maxHeld = 200

func (a approvals) Held(ctx context.Context, p browse.Person) ([]browse.HeldCall, error) {
	resp, err := a.g.ListApprovalsAs(ctx, p.Name, identityOf(p), &toolgatev1.ListApprovalsRequest{State: "pending", Limit: maxHeld})
	if err != nil {
		return nil, err
	}
	out := make([]browse.HeldCall, 0, len(resp.GetApprovals()))
	for _, ap := range resp.GetApprovals() {
		out = append(out, browse.HeldCall{
			ApprovalID: ap.GetApprovalId(), RequestID: ap.GetRequestId(), Tool: ap.GetToolId(), Requester: ap.GetRequester(),
			RuleID: ap.GetRuleId(), Reason: ap.GetReason(), Approvers: ap.GetApprovers(), State: ap.GetState(),
			RequestedAt: ap.GetRequestedAt().AsTime(), ExpiresAt: ap.GetExpiresAt().AsTime(),
		})
	}
	return out, nil
}

func (a approvals) Decide(ctx context.Context, p browse.Person, id, decision, reason string) (string, error) {
	ap, err := a.g.DecideApprovalAs(ctx, p.Name, identityOf(p), id, decision, reason)
	if err != nil {
		return "", err
	}
	return ap.GetState(), nil
}
