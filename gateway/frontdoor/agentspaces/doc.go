// Package agentspaces is the Agent Spaces front door: it serves the
// operations/events protocol of Agent Spaces agents
// (POST /v1/runs/{runId}/operations) on a front-door listener and turns
// each operation of a batch into one RunTool call of the workspace driver,
// through the gateway's own pipeline (gateway.Run): the same
// authentication, policy decision, redaction and evidence as a gRPC
// RunTool call, recorded with front_door "agent_spaces".
//
// # Batches
//
// Operations run strictly in order and each yields one event. A failed
// operation does not stop the batch; a malformed one is an "error" event of
// category "validation" and is skipped; a policy deny is a "policyDenied"
// event. An operation that policy holds for a human's approval stops the
// batch: the reply has status "awaiting_approval" and ends with an
// "approvalRequired" event naming the approval (approvalId). message
// operations are non-executing: they make no RunTool call and leave no
// evidence.
//
// # Idempotency
//
// The request id of operation i of a batch is <runId>:<turn>:<i>, owned by
// the batch's caller (internal/ownedid: an owner tag of the caller's name
// before it), where the turn is the request's Idempotency-Key header, or a
// fresh one that the reply echoes in that header. Neither runId nor turn
// may hold ':', so the ids of two runs or two turns never meet; and since
// the ids are the caller's own, neither do two callers' ids under one run
// id and turn, and the gateway refuses anyone else a claim on them.
// Re-sending a batch with its turn replays the stored answers: nothing
// runs twice, and an operation changed in between is an error event (the
// gateway's ALREADY_EXISTS).
//
// # Approvals
//
// A structured {"approval": {operationId, decision, reason}} message, or a
// user message "approved" / "denied", decides the approval as its sender
// (gateway.DecideApprovalAs: the sender must be an approver). A batch's
// events are its caller's: an approver is answered with the decision
// alone, and the caller re-sends the batch under its turn, which replays
// what ran and picks the approval up. Only a caller whom policy lets
// approve its own calls has its paused batch run on in the reply to its
// decision: such a batch is held in memory on the instance that paused
// it, at most Config.PausedBatches of them, each until its approval
// expires; elsewhere the reply tells it to re-send. A decision its sender
// may not make gets one answer, the same for a run that waits and one that
// never existed, naming no approval, turn or request id.
package agentspaces
