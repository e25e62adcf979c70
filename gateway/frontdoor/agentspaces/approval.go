package agentspaces

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/internal/ownedid"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// maxListPages bounds the pages of pending approvals read to find a run's
// approval when the message does not name it.
const maxListPages = 10

// resume handles an approval decision (structured, or a user message).
// It finds the run's approval among those the sender may see, decides it
// as the sender, and answers with only what the sender may learn. The
// batch's events are its caller's: when the sender is that caller (a
// policy that lets a caller approve its own calls), the held batch runs on
// from the operation that waited and the reply carries its events; any
// other approver is told that the decision is recorded, and the caller
// reads the events by re-sending the batch under its turn. A decision the
// sender may not make gets one answer, whether the run waits or never
// existed (see refusal).
func (d *Door) resume(ctx context.Context, req Request, m message) (Reply, int) {
	if m.Decision == "" {
		return d.answer(req, statusCompleted, errorEvent(d.opts.Now(), m.OperationID, categoryValidation,
			`this runtime runs operations; of user messages only "approved" and "denied" are understood`, nil))
	}
	id, why := d.findApproval(ctx, req, m)
	if id == "" {
		if why == "" {
			return d.refusal(req, m)
		}
		return d.answer(req, statusAwaitingApproval, errorEvent(d.opts.Now(), m.OperationID, categoryValidation, why, nil))
	}
	word := "approve"
	if m.Decision == "denied" {
		word = "deny"
	}
	a, err := d.gw.DecideApprovalAs(ctx, req.Caller, req.Identity, id, word, m.Reason)
	if err != nil {
		if refused(err) {
			return d.refusal(req, m)
		}
		category, st := decisionFailure(err)
		return d.answer(req, st, errorEvent(d.opts.Now(), m.OperationID, category, status.Convert(err).Message(), nil))
	}
	b, held := d.held.take(req.RunID, id)
	if a.GetRequester() != req.Caller {
		return d.answer(req, statusCompleted, Event{
			Type: opMessage, OperationID: m.OperationID, Timestamp: timestamp(d.opts.Now()), Success: ptr(true), ApprovalID: id,
			Message: fmt.Sprintf("approval %s %s; the batch's events are its caller's, who re-sends the batch under its turn to read them", id, m.Decision),
		})
	}
	if !held {
		_, turn, _ := splitRequestID(a.GetRequestId())
		reply, code := d.answer(req, statusError, errorEvent(d.opts.Now(), m.OperationID, categorySystem,
			fmt.Sprintf("approval %s recorded (%s); this gateway no longer holds the paused batch: re-send it with Idempotency-Key %s", id, m.Decision, turn), nil))
		reply.Toolgate.Turn = turn
		return reply, code
	}
	// The caller runs its own batch on, as it authenticates now.
	b.Identity = req.Identity
	return d.runFrom(ctx, b, b.K)
}

// answer is a reply to a message that is not a batch: one event.
func (d *Door) answer(req Request, runStatus string, ev Event) (Reply, int) {
	return Reply{ProtocolVersion: protocolVersion, RunID: req.RunID, Status: runStatus, Events: []Event{ev}}, http.StatusOK
}

// refusal answers a decision its sender may not make: no approval of the
// run that the sender may see, an approval id that names none, or one the
// sender may not decide. It is one answer, with nothing in it but what the
// sender sent, so that it tells a run that waits from one that never
// existed no more than it names an approval or a turn.
func (d *Door) refusal(req Request, m message) (Reply, int) {
	return d.answer(req, statusError, errorEvent(d.opts.Now(), m.OperationID, categoryPolicy,
		"no operation of run "+req.RunID+" waits for an approval you may decide", nil))
}

// refused reports whether DecideApprovalAs refused the sender, rather than
// failed to decide for an approver.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.NotFound, codes.Unauthenticated:
		return true
	}
	return false
}

// decisionFailure maps an error of DecideApprovalAs that is not a refusal
// onto an event category and the run's status: a decision that cannot be
// made (decided already, a bad reason) leaves the run waiting.
func decisionFailure(err error) (category, runStatus string) {
	switch status.Code(err) {
	case codes.FailedPrecondition:
		return categoryPolicy, statusAwaitingApproval
	case codes.InvalidArgument:
		return categoryValidation, statusAwaitingApproval
	}
	return categorySystem, statusError
}

// findApproval returns the approval a decision is about, among those of
// the run the sender may see (decide, or asked for): the one it names,
// else the one a held batch of the run waits for at operationId, else the
// run's only pending one. It returns "" and why when there are several,
// and "" and "" when there is none: a paused batch the sender may not see
// is as if it were not held.
func (d *Door) findApproval(ctx context.Context, req Request, m message) (id, why string) {
	if m.ApprovalID != "" {
		if d.approvalOfRun(ctx, req, m.ApprovalID) {
			return m.ApprovalID, ""
		}
		return "", ""
	}
	var ids []string
	for _, h := range d.held.find(req.RunID, func(h *heldBatch) bool {
		return m.OperationID == "" || h.Ops[h.K].eventID(h.K) == m.OperationID
	}) {
		if d.approvalOfRun(ctx, req, h.ApprovalID) {
			ids = append(ids, h.ApprovalID)
		}
	}
	if len(ids) == 0 {
		ids = d.pendingOfRun(ctx, req)
	}
	switch len(ids) {
	case 0:
		return "", ""
	case 1:
		return ids[0], ""
	}
	return "", "several operations of run " + req.RunID + " wait for an approval you may decide: send approvalId"
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
	local, owned := ownedid.Local(id)
	if !owned {
		return "", "", false
	}
	parts := strings.Split(local, ":")
	if len(parts) != 3 || !runIDPattern.MatchString(parts[0]) || !turnPattern.MatchString(parts[1]) {
		return "", "", false
	}
	return parts[0], parts[1], true
}
