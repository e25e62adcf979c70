package agentspaces

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// maxListPages bounds the pages of pending approvals read to find a run's
// approval when the message does not name it.
const maxListPages = 10

// resume handles an approval decision (structured, or a user message):
// it finds the run's approval, decides it as the sender, and runs the held
// batch on from the operation that waited.
func (d *Door) resume(ctx context.Context, req Request, m message) (Reply, int) {
	reply := Reply{ProtocolVersion: protocolVersion, RunID: req.RunID, Status: statusCompleted}
	fail := func(category, msg string, st string) (Reply, int) {
		reply.Status = st
		reply.Events = []Event{errorEvent(d.opts.Now(), m.OperationID, category, msg, nil)}
		return reply, http.StatusOK
	}
	if m.Decision == "" {
		return fail(categoryValidation, `this runtime runs operations; of user messages only "approved" and "denied" are understood`, statusCompleted)
	}
	id, msg := d.findApproval(ctx, req, m)
	if id == "" {
		return fail(categoryValidation, msg, statusAwaitingApproval)
	}
	word := "approve"
	if m.Decision == "denied" {
		word = "deny"
	}
	a, err := d.gw.DecideApprovalAs(ctx, req.Caller, req.Identity, id, word, m.Reason)
	if err != nil {
		category, st := decisionFailure(err)
		return fail(category, status.Convert(err).Message(), st)
	}
	b, ok := d.held.take(req.RunID, id)
	if !ok {
		_, turn, _ := splitRequestID(a.GetRequestId())
		reply.Toolgate.Turn = turn
		return fail(categorySystem, fmt.Sprintf("approval %s recorded (%s); this gateway no longer holds the paused batch: re-send it with Idempotency-Key %s", id, m.Decision, turn), statusError)
	}
	return d.runFrom(ctx, b, b.K)
}

// decisionFailure maps an error of DecideApprovalAs onto an event
// category and the run's status: a refused decision leaves the run
// waiting.
func decisionFailure(err error) (category, runStatus string) {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.FailedPrecondition, codes.Unauthenticated:
		return categoryPolicy, statusAwaitingApproval
	case codes.NotFound, codes.InvalidArgument:
		return categoryValidation, statusAwaitingApproval
	}
	return categorySystem, statusError
}

// findApproval returns the approval a decision is about: the one it names,
// else the one the run's held batch waits for at operationId, else the
// run's only pending approval the sender may see. It returns "" and why
// when there is no single one.
func (d *Door) findApproval(ctx context.Context, req Request, m message) (id, why string) {
	if m.ApprovalID != "" {
		if !d.approvalOfRun(ctx, req, m.ApprovalID) {
			return "", fmt.Sprintf("approval %s is not one of run %s's that you may decide", truncate(m.ApprovalID), req.RunID)
		}
		return m.ApprovalID, ""
	}
	held := d.held.find(req.RunID, func(h *heldBatch) bool {
		return m.OperationID == "" || h.Ops[h.K].eventID(h.K) == m.OperationID
	})
	if len(held) == 1 {
		return held[0].ApprovalID, ""
	}
	if len(held) > 1 {
		return "", "several operations of run " + req.RunID + " wait for approval: send approvalId"
	}
	ids := d.pendingOfRun(ctx, req)
	switch len(ids) {
	case 1:
		return ids[0], ""
	case 0:
		return "", "no operation of run " + req.RunID + " waits for an approval you may decide"
	}
	return "", "several operations of run " + req.RunID + " wait for approval: send approvalId"
}

// approvalOfRun reports whether approval id is one of run's that the
// sender may see.
func (d *Door) approvalOfRun(ctx context.Context, req Request, id string) bool {
	resp, err := d.gw.ListApprovalsAs(ctx, req.Caller, req.Identity, &toolgatev1.ListApprovalsRequest{ApprovalId: id, State: "all"})
	if err != nil {
		return false
	}
	for _, a := range resp.GetApprovals() {
		if run, _, ok := splitRequestID(a.GetRequestId()); ok && run == req.RunID && a.GetApprovalId() == id {
			return true
		}
	}
	return false
}

// pendingOfRun lists the ids of the run's pending approvals the sender
// may see, reading a bounded number of pages.
func (d *Door) pendingOfRun(ctx context.Context, req Request) []string {
	var ids []string
	page := ""
	for range maxListPages {
		resp, err := d.gw.ListApprovalsAs(ctx, req.Caller, req.Identity, &toolgatev1.ListApprovalsRequest{State: "pending", Limit: 1000, PageToken: page})
		if err != nil {
			return nil
		}
		for _, a := range resp.GetApprovals() {
			if run, _, ok := splitRequestID(a.GetRequestId()); ok && run == req.RunID {
				ids = append(ids, a.GetApprovalId())
			}
		}
		if page = resp.GetNextPageToken(); page == "" {
			break
		}
	}
	return ids
}

// splitRequestID reads back the run and turn of a request id this door
// made.
func splitRequestID(id string) (runID, turn string, ok bool) {
	parts := strings.Split(id, ":")
	if len(parts) != 3 || !runIDPattern.MatchString(parts[0]) || !turnPattern.MatchString(parts[1]) {
		return "", "", false
	}
	return parts[0], parts[1], true
}
