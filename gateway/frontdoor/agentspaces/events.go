package agentspaces

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// Event types the door emits besides the operations' own.
const (
	eventError            = "error"
	eventPolicyDenied     = "policyDenied"
	eventApprovalRequired = "approvalRequired"
)

// Error categories of error events.
const (
	categoryValidation = "validation"
	categoryPolicy     = "policy"
	categoryTimeout    = "timeout"
	categorySystem     = "system"
)

// Statuses of a reply.
const (
	statusCompleted        = "completed"
	statusAwaitingApproval = "awaiting_approval"
	statusError            = "error"
)

// Event is one event of a reply, in the protocol's shape: the spec's
// fields at the top level, Toolgate's own under "toolgate".
type Event struct {
	Type          string `json:"type"`
	OperationID   string `json:"operationId,omitempty"`
	Timestamp     string `json:"timestamp"`
	OperationType string `json:"operationType,omitempty"`
	// Path or Command says what a file or shell operation was about.
	Path    *string `json:"path,omitempty"`
	Command *string `json:"command,omitempty"`
	Success *bool   `json:"success,omitempty"`
	// createFile, readFile, editFile
	BytesWritten *int64  `json:"bytesWritten,omitempty"`
	Content      *string `json:"content,omitempty"`
	Encoding     string  `json:"encoding,omitempty"`
	Size         *int64  `json:"size,omitempty"`
	EditsApplied *int64  `json:"editsApplied,omitempty"`
	// shell
	ExitCode   *int64  `json:"exitCode,omitempty"`
	Stdout     *string `json:"stdout,omitempty"`
	Stderr     *string `json:"stderr,omitempty"`
	DurationMs *int64  `json:"durationMs,omitempty"`
	TimedOut   bool    `json:"timedOut,omitempty"`
	Error      string  `json:"error,omitempty"`
	// error, policyDenied, approvalRequired
	Category   string            `json:"category,omitempty"`
	Message    string            `json:"message,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Suggestion string            `json:"suggestion,omitempty"`
	Details    map[string]string `json:"details,omitempty"`
	ApprovalID string            `json:"approvalId,omitempty"`
	ExpiresAt  string            `json:"expiresAt,omitempty"`
	// Toolgate carries what the protocol has no field for.
	Toolgate *EventExtension `json:"toolgate,omitempty"`
}

// EventExtension is the "toolgate" object of an event: the RunTool call
// behind it.
type EventExtension struct {
	RequestID    string         `json:"request_id,omitempty"`
	EvidenceRefs []string       `json:"evidence_refs,omitempty"`
	RuleID       string         `json:"rule_id,omitempty"`
	Category     string         `json:"category,omitempty"`
	Code         string         `json:"code,omitempty"`
	Driver       map[string]any `json:"driver,omitempty"`
	// RetryAfterMS, on a policyDenied event, is a rate-limit deny's retry
	// hint (RunTool's policy_check.retry_after_ms).
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// timestamp formats an event's time.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// errorEvent is an error event about op (operationId "" for none).
func errorEvent(now time.Time, operationID, category, msg string, details map[string]string) Event {
	return Event{Type: eventError, OperationID: operationID, Timestamp: timestamp(now), Category: category, Message: msg, Details: details}
}

func ptr[T any](v T) *T { return &v }

// messageEvent acknowledges a message operation.
func messageEvent(now time.Time, op operation) Event {
	return Event{Type: opMessage, OperationID: op.ID, Timestamp: timestamp(now), Success: ptr(true)}
}

// outcome is what one operation's RunTool call means for the batch.
type outcome struct {
	event Event
	// stop ends the batch with status.
	stop   bool
	status string
	// pending is set when the call waits for an approval.
	pending *toolgatev1.PendingApproval
}

// callOutcome turns the answer of op's RunTool call into its event.
func callOutcome(now time.Time, op operation, requestID string, resp *toolgatev1.RunToolResponse) outcome {
	ext := &EventExtension{RequestID: requestID, EvidenceRefs: resp.GetEvidenceRefs(), RuleID: resp.GetPolicyCheck().GetRuleId()}
	pc := resp.GetPolicyCheck()
	if p := resp.GetPendingApproval(); p != nil {
		// A held call's reply also says deny: look at it first.
		k, v := op.detail()
		ev := Event{
			Type: eventApprovalRequired, OperationID: op.ID, Timestamp: timestamp(now), OperationType: op.Type,
			Reason: p.GetReason(), Details: map[string]string{k: v, "policy": p.GetRuleId()},
			ApprovalID: p.GetApprovalId(), Toolgate: ext,
		}
		if p.GetExpiresAt() != nil {
			ev.ExpiresAt = timestamp(p.GetExpiresAt().AsTime())
		}
		return outcome{event: ev, stop: true, status: statusAwaitingApproval, pending: p}
	}
	if pc.GetDecision() != "allow" {
		ext.RetryAfterMS = pc.GetRetryAfterMs()
		return outcome{event: Event{
			Type: eventPolicyDenied, OperationID: op.ID, Timestamp: timestamp(now), OperationType: op.Type,
			Reason: fmt.Sprintf("%s (rule %s)", pc.GetReason(), pc.GetRuleId()), Suggestion: pc.GetSuggestion(), Toolgate: ext,
		}}
	}
	return outcome{event: resultEvent(now, op, resp.GetToolResult(), ext)}
}

// resultEvent is the operation's own event, from what the driver
// reported: its data holds the event's fields.
func resultEvent(now time.Time, op operation, tr *toolgatev1.ToolResult, ext *EventExtension) Event {
	data := tr.GetData().GetStructValue().AsMap()
	ev := Event{Type: op.Type, OperationID: op.ID, Timestamp: timestamp(now), Toolgate: ext}
	k, v := op.detail()
	if s, ok := data[k].(string); ok {
		v = s
	}
	if k == "command" {
		ev.Command = ptr(v)
	} else {
		ev.Path = ptr(v)
	}
	success, _ := data["success"].(bool)
	ev.Success = ptr(success)
	ev.Error, _ = data["error"].(string)
	ext.Category, _ = data["category"].(string)
	switch op.Type {
	case opCreateFile:
		ev.BytesWritten = number(data, "bytesWritten")
	case opReadFile:
		ev.Size = number(data, "size")
		if success {
			ev.Content = ptr(tr.GetStdout())
			ev.Encoding, _ = data["encoding"].(string)
		}
	case opEditFile:
		ev.EditsApplied = number(data, "editsApplied")
	case opShell:
		ev.ExitCode = ptr(int64(tr.GetExitCode()))
		ev.Stdout, ev.Stderr = ptr(tr.GetStdout()), ptr(tr.GetStderr())
		ev.DurationMs = number(data, "durationMs")
		ev.TimedOut, _ = data["timedOut"].(bool)
	}
	ext.Driver = map[string]any{}
	for key, val := range data {
		if !eventFields[key] {
			ext.Driver[key] = val
		}
	}
	if len(ext.Driver) == 0 {
		ext.Driver = nil
	}
	if !success && ev.Error == "" && op.Type != opShell {
		ev.Error = tr.GetStderr()
	}
	return ev
}

// eventFields are the driver's data keys that are the protocol's own
// event fields; the rest goes under toolgate.driver.
var eventFields = map[string]bool{
	"type": true, "path": true, "command": true, "success": true, "error": true, "category": true,
	"bytesWritten": true, "encoding": true, "size": true, "editsApplied": true,
	"exitCode": true, "durationMs": true, "timedOut": true,
}

func number(data map[string]any, key string) *int64 {
	if f, ok := data[key].(float64); ok {
		return ptr(int64(f))
	}
	return nil
}

// failureOutcome turns an error of Run into an error event and says
// whether the batch goes on. A refused operation (invalid, or its request
// id already used for other content) is skipped; a failure of the gateway
// or its store ends the batch, since the next operation may depend on this
// one.
func failureOutcome(now time.Time, op operation, requestID string, err error) outcome {
	st := status.Convert(err)
	ev := errorEvent(now, op.ID, categorySystem, st.Message(), nil)
	ev.Toolgate = &EventExtension{RequestID: requestID, Code: st.Code().String()}
	switch st.Code() {
	case codes.InvalidArgument:
		ev.Category = categoryValidation
		return outcome{event: ev}
	case codes.AlreadyExists:
		ev.Category = categoryValidation
		ev.Message = "this operation's request id " + requestID + " was used for another operation (a re-sent batch must be the same): " + st.Message()
		return outcome{event: ev}
	case codes.PermissionDenied:
		ev.Category = categoryPolicy
		return outcome{event: ev}
	case codes.DeadlineExceeded:
		ev.Category = categoryTimeout
	}
	return outcome{event: ev, stop: true, status: statusError}
}
