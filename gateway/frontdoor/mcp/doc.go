// Package mcpdoor serves the Model Context Protocol (MCP) as a front door:
// Streamable HTTP at /mcp, on the official Go SDK, stateless, so that
// every MCP client gets the catalog's tools with the gateway's
// authentication, Cedar decision, redaction and evidence.
//
// One SDK server holds the whole catalog; tools/list is filtered per
// caller through policy (Gateway.ToolsAllowedAs), and tools/call is one
// RunTool call (Gateway.Run, front_door "mcp"). The SDK serves protocol
// versions 2026-07-28 (stateless: server/discover, per-request _meta) and
// 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05 (initialize, answered
// without a session) on the one endpoint.
//
// # tools/call
//
//	gateway outcome                       MCP answer
//	allow, ran, exit 0                    content: stdout as text (omitted if empty), stderr as a
//	                                      second text "stderr:\n…"; structuredContent = data
//	                                      (and data's JSON as text when stdout is empty)
//	allow, exit ≠ 0                       the same with isError: true
//	deny                                  isError, text "Denied by policy rule <rule_id>: <reason>"
//	                                      (and "Suggestion: …" when the rule has one)
//	pending approval                      2026-07-28 with elicitation: input_required with a
//	                                      sealed requestState; else isError naming the approval
//	InvalidArgument                       isError with the message (the model can fix its call)
//	AlreadyExists                         isError "idempotency key reused for a different call"
//	Aborted                               isError "still running; retry later with the same …"
//	any other error                       JSON-RPC error -32010, data {requestId, retryable,
//	                                      evidenceRefs}
//	name not served                       the SDK's -32602 "unknown tool"
//
// # _meta
//
// Read on tools/call: io.github.toolgate/idempotencyKey (the request_id,
// verbatim), io.github.toolgate/runId, …/stepId, …/policyRef (RunTool's
// ctx), and traceparent (W3C; kept with the request, never hashed).
// Written on every result: io.github.toolgate/requestId, …/evidenceRefs,
// …/engineRef, …/decision {decision, ruleId, reason}, …/exitCode when the
// tool ran, …/approval {approvalId, ruleId, approvers, expiresAt} when one
// is pending.
//
// # Approvals
//
// A call policy holds for approval answers a 2026-07-28 client that
// declared elicitation with an input-required result: an elicitation
// asking it to get the call approved, and a requestState sealed with
// HMAC-SHA256 (state_key_file) binding the request id, caller, tool,
// canonical request hash and a 15-minute expiry. The client's answer to
// the elicitation only means "retry now": the call runs once an approver
// approves it (DecideApproval, or toolgate.approvals.decide with
// approval_tools), never on the client's say-so. Every other client gets
// a tool error naming the approval and the idempotency key to call again
// with.
//
// # Streams
//
// subscriptions/listen (2026-07-28) gets notifications/tools/list_changed
// after each policy reload; at most MaxListensPerCaller per caller (then
// JSON-RPC error -32011), and all end when the servers drain. Older
// clients have no stream in stateless mode; list_ttl bounds their cache.
package mcpdoor
