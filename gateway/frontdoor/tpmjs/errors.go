package tpmjsdoor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolgate/toolgate/gateway"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Error codes the door adds to the protocol's set, for outcomes an
// executor does not have.
const (
	codePolicyDenied     = "POLICY_DENIED"
	codeApprovalRequired = "APPROVAL_REQUIRED"
	codeToolNotFound     = "TOOL_NOT_FOUND"
	codeToolExecution    = "TOOL_EXECUTION_ERROR"
	codeInternal         = "INTERNAL_ERROR"
)

// maxErrorMessage bounds an error message taken from a tool's stderr.
const maxErrorMessage = 8 << 10

// reply is the answer to an executed (or decided) call.
type reply struct {
	Success         bool            `json:"success"`
	Output          json.RawMessage `json:"output,omitempty"`
	Error           *protoError     `json:"error,omitempty"`
	ExecutionTimeMs int64           `json:"executionTimeMs"`
	Toolgate        extension       `json:"toolgate"`
}

// extension is what the gateway adds to the protocol's answer; clients of
// the protocol ignore it.
type extension struct {
	RequestID string `json:"request_id"`
	OK        bool   `json:"ok"`
	Decision  string `json:"decision,omitempty"`
	RuleID    string `json:"rule_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Suggestion is the deciding rule's @suggestion: what to do instead.
	Suggestion string `json:"suggestion,omitempty"`
	// RetryAfterMS is a rate-limit deny's retry hint (RunTool's
	// policy_check.retry_after_ms), also sent as the Retry-After header.
	RetryAfterMS       int64            `json:"retry_after_ms,omitempty"`
	EvidenceRefs       []string         `json:"evidence_refs"`
	LocalEvidencePaths []string         `json:"local_evidence_paths,omitempty"`
	EngineRef          string           `json:"engine_ref,omitempty"`
	ExitCode           *int32           `json:"exit_code,omitempty"`
	DownstreamCode     string           `json:"downstream_code,omitempty"`
	PendingApproval    *pendingApproval `json:"pending_approval,omitempty"`
}

// pendingApproval says which approval a held call waits for.
type pendingApproval struct {
	ApprovalID string `json:"approval_id"`
	Reason     string `json:"reason,omitempty"`
	RuleID     string `json:"rule_id,omitempty"`
	Approvers  string `json:"approvers,omitempty"`
	ExpiresAt  string `json:"expires_at,omitempty"`
}

// replyOf maps a RunTool answer onto the protocol's reply.
func replyOf(id string, tool resolved, resp *toolgatev1.RunToolResponse, ms int64) reply {
	pc := resp.GetPolicyCheck()
	rep := reply{ExecutionTimeMs: ms, Toolgate: extension{
		RequestID: id, OK: resp.GetOk(), Decision: pc.GetDecision(), RuleID: pc.GetRuleId(), Reason: pc.GetReason(),
		Suggestion: pc.GetSuggestion(), RetryAfterMS: pc.GetRetryAfterMs(), EvidenceRefs: nonNil(resp.GetEvidenceRefs()), LocalEvidencePaths: resp.GetLocalEvidencePaths(),
		EngineRef: resp.GetEngineRef(),
	}}
	if pa := resp.GetPendingApproval(); pa != nil {
		rep.Toolgate.PendingApproval = &pendingApproval{
			ApprovalID: pa.GetApprovalId(), Reason: pa.GetReason(), RuleID: pa.GetRuleId(), Approvers: pa.GetApprovers(),
		}
		if pa.GetExpiresAt() != nil {
			rep.Toolgate.PendingApproval.ExpiresAt = pa.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)
		}
		rep.Error = &protoError{Code: codeApprovalRequired, Message: pc.GetReason()}
		return rep
	}
	if pc.GetDecision() != "allow" {
		if pc.GetRuleId() == gateway.RuleUnknownTool {
			rep.Error = &protoError{Code: codeToolNotFound, Message: pc.GetReason()}
		} else {
			rep.Error = &protoError{Code: codePolicyDenied,
				Message: fmt.Sprintf("denied by policy rule %s: %s", pc.GetRuleId(), pc.GetReason())}
		}
		return rep
	}
	return withResult(rep, tool, resp.GetToolResult())
}

// withResult fills the reply of an allowed call from its tool result.
func withResult(rep reply, tool resolved, tr *toolgatev1.ToolResult) reply {
	exit := tr.GetExitCode()
	rep.Toolgate.ExitCode = &exit
	rep.Output = outputOf(tr)
	if exit == 0 {
		rep.Success = true
		return rep
	}
	code, message := splitStderr(tr.GetStderr())
	if tool.packaged && code == "TOOL_ERROR" && rep.Output != nil {
		// The tool caught its own failure and answered {"error": true, …}:
		// a real executor reports that as a success carrying the output,
		// and the client surfaces it the same way.
		rep.Success = true
		rep.Toolgate.DownstreamCode = code
		return rep
	}
	rep.Toolgate.DownstreamCode = code
	if !tool.packaged || code == "" {
		code, message = codeToolExecution, strings.TrimSpace(tr.GetStderr())
	} else {
		code = protocolCode(code)
	}
	if message == "" {
		message = fmt.Sprintf("the tool exited with code %d", exit)
	}
	rep.Error = &protoError{Code: code, Message: truncate(message, maxErrorMessage)}
	return rep
}

// outputOf is the tool's output: its structured data, else stdout as JSON,
// else stdout as a string. nil when the tool produced nothing.
func outputOf(tr *toolgatev1.ToolResult) json.RawMessage {
	if tr.GetData() != nil {
		if b, err := json.Marshal(tr.GetData().AsInterface()); err == nil {
			return b
		}
	}
	out := tr.GetStdout()
	if out == "" {
		if tr.GetExitCode() == 0 {
			return json.RawMessage(`""`)
		}
		return nil
	}
	if json.Valid([]byte(out)) {
		return json.RawMessage(strings.TrimSpace(out))
	}
	b, _ := json.Marshal(out)
	return b
}

// splitStderr splits the "CODE: message" form of the tpmjs driver's
// stderr. code is "" when stderr does not start with an upper-case code.
func splitStderr(stderr string) (code, message string) {
	head, rest, ok := strings.Cut(stderr, ": ")
	if !ok || head == "" || len(head) > 64 || strings.TrimLeft(head, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
		return "", strings.TrimSpace(stderr)
	}
	return head, strings.TrimSpace(rest)
}

// protocolCode maps an executor's or the tpmjs driver's error code onto
// the protocol 1.0 set.
func protocolCode(code string) string {
	switch code {
	case "TOOL_EXECUTION_ERROR", "TOOL_EXECUTION_FAILED":
		return codeToolExecution
	case "PACKAGE_NOT_FOUND", "PACKAGE_IMPORT_FAILED":
		return "PACKAGE_NOT_FOUND"
	case "TOOL_NOT_FOUND":
		return codeToolNotFound
	case "TOOL_INVALID", "INVALID_TOOL", "TOOL_CONFIGURATION_REQUIRED", "SCHEMA_UNAVAILABLE":
		return "TOOL_INVALID"
	case "EXECUTION_TIMEOUT":
		return "EXECUTION_TIMEOUT"
	case "INVALID_REQUEST":
		return "INVALID_REQUEST"
	}
	return codeInternal
}

// statusFor maps a RunTool error onto an HTTP status and an error code.
func statusFor(err error) (int, string) {
	switch status.Code(err) {
	case codes.InvalidArgument:
		return http.StatusBadRequest, "INVALID_REQUEST"
	case codes.AlreadyExists:
		return http.StatusConflict, "IDEMPOTENCY_KEY_REUSED"
	case codes.Aborted:
		return http.StatusConflict, "REQUEST_IN_FLIGHT"
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, "EXECUTOR_BUSY"
	case codes.Unavailable:
		return http.StatusServiceUnavailable, "EXECUTOR_UNAVAILABLE"
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, "EXECUTION_TIMEOUT"
	case codes.PermissionDenied:
		return http.StatusForbidden, codePolicyDenied
	case codes.Unauthenticated:
		return http.StatusUnauthorized, "UNAUTHORIZED"
	}
	return http.StatusInternalServerError, codeInternal
}

// runErrorBody is the answer to a RunTool error: the error object and what
// the gateway knows of the evidence written so far.
type runErrorBody struct {
	Success         bool       `json:"success"`
	Error           protoError `json:"error"`
	ExecutionTimeMs int64      `json:"executionTimeMs"`
	Toolgate        extension  `json:"toolgate"`
}

// writeRunError answers a RunTool error.
func (d *Door) writeRunError(w http.ResponseWriter, id string, err error, ms int64) {
	code, protoCode := statusFor(err)
	st, _ := status.FromError(err)
	ext := extension{RequestID: id, EvidenceRefs: []string{}}
	for _, detail := range st.Details() {
		if f, ok := detail.(*toolgatev1.RunToolFailure); ok {
			ext.EvidenceRefs, ext.EngineRef = nonNil(f.GetEvidenceRefs()), f.GetEngineRef()
		}
	}
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	message := st.Message()
	if code == http.StatusInternalServerError {
		d.log.Error("tpmjs door: RunTool failed", "request_id", id, "err", err)
	}
	d.writeJSON(w, code, runErrorBody{Error: protoError{Code: protoCode, Message: message}, ExecutionTimeMs: ms, Toolgate: ext})
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// utf8RuneStart reports whether b starts a UTF-8 sequence.
func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// nonNil returns s, or an empty slice for nil, so JSON shows [].
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
