package evidence

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The JSON records a gateway writes for each request, before redaction.
// Field names are the Executor Driver Contract's snake_case ones. The
// gateway writes them, the CLI and auditors' tools read them; one
// definition keeps the two from drifting apart.

// RequestRecord is request.json: the request as received (arguments in
// canonical form, caller secrets hidden) and the claim of its request id.
type RequestRecord struct {
	RequestID string          `json:"request_id"`
	Caller    string          `json:"caller"`
	ToolID    string          `json:"tool_id"`
	Args      json.RawMessage `json:"args"`
	Ctx       RequestContext  `json:"ctx"`
	// ReceivedAt is when the claiming gateway received the request.
	ReceivedAt           time.Time `json:"received_at"`
	CanonicalRequestHash string    `json:"canonical_request_hash"`
	// Gateway names the gateway that claimed the id: "toolgate/<version>@<instance>".
	Gateway         string `json:"gateway"`
	ParentRequestID string `json:"parent_request_id,omitempty"`
	// FrontDoor names the front door the call came in through ("tpmjs",
	// "agent_spaces"); empty for gRPC RunTool calls, so their request.json
	// is unchanged. It is not part of the canonical request hash: a call is
	// the same call whichever door it came through.
	FrontDoor string `json:"front_door,omitempty"`
	// Auth is how a front door authenticated the caller when it was not
	// by an API key (an OAuth access token): never the credential. It is
	// not part of the canonical request hash, so that a retry under a
	// refreshed token is the same request; omitted otherwise.
	Auth *RequestAuth `json:"auth,omitempty"`
	// TraceID is the W3C trace id (32 lowercase hex digits) of the
	// traceparent the caller sent, leading from the evidence to the
	// caller's trace. It is not part of the canonical request hash.
	TraceID string `json:"trace_id,omitempty"`
}

// ParseRequestRecord decodes request.json, which must bind its call: a
// record without its canonical request hash binds nothing.
func ParseRequestRecord(data []byte) (RequestRecord, error) {
	var r RequestRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return RequestRecord{}, err
	}
	if r.CanonicalRequestHash == "" {
		return RequestRecord{}, errors.New("canonical_request_hash is missing")
	}
	return r, nil
}

// RequestAuth is request.json's auth: the method a front door
// authenticated the caller by, and the token's issuer, subject and id.
type RequestAuth struct {
	Method  string `json:"method"`
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	TokenID string `json:"jti,omitempty"`
}

// RequestContext is a request's ctx: what the canonical request hash
// covers besides caller, tool and arguments.
type RequestContext struct {
	RunID     string `json:"run_id"`
	StepID    string `json:"step_id"`
	PolicyRef string `json:"policy_ref"`
}

// DecisionRecord is policy_decision.json: one attempt's policy decision,
// durable before anything runs.
type DecisionRecord struct {
	RequestID       string `json:"request_id"`
	ParentRequestID string `json:"parent_request_id,omitempty"`
	// Attempt numbers the attempt this decision belongs to; 0 in records
	// written before attempts existed, which means 1.
	Attempt         int       `json:"attempt,omitempty"`
	Caller          string    `json:"caller"`
	Action          string    `json:"action"`
	ToolID          string    `json:"tool_id"`
	Driver          string    `json:"driver"`
	Decision        string    `json:"decision"` // "allow", "deny" or "approval_required"
	RuleID          string    `json:"rule_id"`
	Reason          string    `json:"reason"`
	Suggestion      string    `json:"suggestion,omitempty"` // the deciding rule's @suggestion; omitted when it has none
	PolicyRef       string    `json:"policy_ref"`
	PolicySetDigest string    `json:"policy_set_digest"`
	Errors          []string  `json:"errors"`
	DecidedAt       time.Time `json:"decided_at"`
	// Gateway names the gateway that made the decision and owns the
	// attempt (see RequestRecord.Gateway).
	Gateway string `json:"gateway,omitempty"`
	// Shadow is the decision of the shadow policy set, never enforced.
	Shadow *ShadowDecision `json:"shadow,omitempty"`
	// Approval links the decision to the request's approval: on the
	// attempt that asked for it (decision "approval_required"), on the
	// attempt that used it (decision "allow"), and on the final deny an
	// approver's deny or an expiry made.
	Approval *DecisionApproval `json:"approval,omitempty"`
	// History is the session history the decision saw, when the policy
	// set decides on history.
	History *DecisionHistory `json:"history,omitempty"`
	// Principal and Tool are the attributes of the caller and of the tool
	// that Cedar saw (principal.groups and .roles; resource.package,
	// .export, .version and .tags), so that the decision can be made again
	// under another policy set. Records written before they were kept
	// lack them.
	Principal *DecisionPrincipal `json:"principal,omitempty"`
	Tool      *DecisionTool      `json:"tool,omitempty"`
}

// DecisionPrincipal is the caller's attributes as a decision saw them.
type DecisionPrincipal struct {
	Groups []string `json:"groups"`
	Roles  []string `json:"roles"`
}

// DecisionTool is the tool's catalog attributes as a decision saw them.
type DecisionTool struct {
	Package string   `json:"package"`
	Export  string   `json:"export"`
	Version string   `json:"version"`
	Tags    []string `json:"tags"`
}

// DecisionHistory is what a decision saw of the caller's past and what the
// call added to it: the Cedar facts (context.session and context.caller),
// the caller's history slot they were read at (0: no history yet) and, for
// a call let through, the slot it claimed and the labels it added.
type DecisionHistory struct {
	Slot                uint64   `json:"slot"`
	Calls               int64    `json:"calls"`
	ToolCalls           int64    `json:"tool_calls"`
	Labels              []string `json:"labels"`
	CallsLastMinute     int64    `json:"calls_last_minute"`
	ToolCallsLastMinute int64    `json:"tool_calls_last_minute"`
	// ReadAt is the instant the caller's rate facts were counted at.
	ReadAt            time.Time `json:"read_at,omitzero"`
	Claimed           uint64    `json:"claimed_slot,omitempty"`
	LabelsAdded       []string  `json:"labels_added,omitempty"`
	CallerLabelsAdded []string  `json:"caller_labels_added,omitempty"`
	// RetryAfterMS, on a deny that the passing of time lifts (a rate
	// limit), is how long the caller must wait.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// DecisionApproval is the approval a decision asked for, used or ended by.
type DecisionApproval struct {
	ApprovalID string `json:"approval_id"`
	// Approvers is the @approval group that may approve.
	Approvers string `json:"approvers"`
	// Outcome is ApprovalPending on the attempt that asked; ApprovalApprove,
	// ApprovalDeny, ApprovalExpired or ApprovalUsed on the attempts after
	// it.
	Outcome string `json:"outcome"`
	// ApprovalSHA256 is the hex SHA-256 of the stored approval.json, and
	// Approver who decided; both empty while pending.
	ApprovalSHA256 string `json:"approval_sha256,omitempty"`
	Approver       string `json:"approver,omitempty"`
	// PolicySetChanged is set when the approval was granted under another
	// policy set digest than the one that used it.
	PolicySetChanged bool `json:"policy_set_changed,omitempty"`
	// RequestID is set when the approval was granted for another request
	// of the identical call: the request whose approval_use.json names
	// this one (see ApprovalUseRecord). On a pending decision it names
	// the request whose still pending approval this call waits on instead
	// of asking for one more.
	RequestID string `json:"request_id,omitempty"`
}

// Approval outcomes, in ApprovalRecord.Decision and DecisionApproval.Outcome.
const (
	ApprovalPending = "pending"
	ApprovalApprove = "approve"
	ApprovalDeny    = "deny"
	ApprovalExpired = "expired"
)

// ApprovalRequestRecord is approval_request.json, written create-only when
// policy holds a call back for a human: what is asked, bound to the exact
// call (its canonical hash) and the policy set that asked.
type ApprovalRequestRecord struct {
	RequestID  string `json:"request_id"`
	ApprovalID string `json:"approval_id"`
	// Attempt is the attempt whose decision asked for approval.
	Attempt         int    `json:"attempt"`
	Caller          string `json:"caller"`
	Action          string `json:"action"`
	ToolID          string `json:"tool_id"`
	Driver          string `json:"driver"`
	ParentRequestID string `json:"parent_request_id,omitempty"`
	// CanonicalRequestHash is request.json's: the call approved.
	CanonicalRequestHash string `json:"canonical_request_hash"`
	PolicyRef            string `json:"policy_ref"`
	PolicySetDigest      string `json:"policy_set_digest"`
	// RuleID and Reason are the approval rule's; Approvers its @approval
	// group.
	RuleID      string    `json:"rule_id"`
	Reason      string    `json:"reason"`
	Approvers   string    `json:"approvers"`
	RequestedAt time.Time `json:"requested_at"`
	// ExpiresAt ends both deciding and using the approval: a call not
	// approved and run by then is denied.
	ExpiresAt time.Time `json:"expires_at"`
	// NestedRequestID is set on a parent whose sandboxed guest's call
	// waits for the approval; the approval itself is that nested
	// request's.
	NestedRequestID string `json:"nested_request_id,omitempty"`
	Gateway         string `json:"gateway"`
}

// ApprovalRecord is approval.json, the one decision on an approval
// request: written create-only, so that approving, denying and expiring,
// on any replica, race for a single slot.
type ApprovalRecord struct {
	RequestID  string `json:"request_id"`
	ApprovalID string `json:"approval_id"`
	// Decision is ApprovalApprove, ApprovalDeny or ApprovalExpired.
	Decision string `json:"decision"`
	// Approver is the deciding caller; the gateway's engine ref for an
	// expiry.
	Approver  string    `json:"approver"`
	Reason    string    `json:"reason"`
	DecidedAt time.Time `json:"decided_at"`
	// What the decision is bound to: approval_request.json's hash, policy
	// set digest and rule, and the SHA-256 of its stored bytes.
	CanonicalRequestHash  string `json:"canonical_request_hash"`
	PolicySetDigest       string `json:"policy_set_digest"`
	RuleID                string `json:"rule_id"`
	ApprovalRequestSHA256 string `json:"approval_request_sha256"`
	// Authorization is the Action::"Approve" decision that let Approver
	// decide; absent for an expiry.
	Authorization *ApproverDecision `json:"authorization,omitempty"`
	Gateway       string            `json:"gateway"`
}

// ApproverDecision is the policy decision that authorised an approver.
type ApproverDecision struct {
	PolicyRef       string `json:"policy_ref"`
	PolicySetDigest string `json:"policy_set_digest"`
	RuleID          string `json:"rule_id"`
	Reason          string `json:"reason"`
}

// ShadowDecision is a shadow policy set's decision on a call.
type ShadowDecision struct {
	PolicyRef       string `json:"policy_ref"`
	Decision        string `json:"decision"`
	RuleID          string `json:"rule_id"`
	Reason          string `json:"reason"`
	PolicySetDigest string `json:"policy_set_digest"`
	// Differs is set when the shadow would allow what was denied, or
	// deny what was allowed.
	Differs bool `json:"differs"`
}

// Dispatch states, in DispatchRecord.State.
const (
	// Dispatched: the call was about to be handed to its driver. From
	// here on the tool may have run, and the attempt is never repeated.
	Dispatched = "dispatched"
	// NotDispatched: the attempt ended before the tool could have run
	// (proved by the gateway or the driver); a retry opens the next one.
	NotDispatched = "not_dispatched"
)

// DispatchRecord is dispatch.json, an attempt's dispatch slot, and
// not_dispatched.json. Whoever writes an attempt's dispatch.json first
// (create-only) settles the attempt: the gateway that owns it, just before
// it calls the driver (State Dispatched); or the owner, a retry or the
// recovery sweep closing an attempt that never got that far (State
// NotDispatched). not_dispatched.json, written only by the owner after its
// own Dispatched marker, closes an attempt the driver proved never
// reached the tool.
type DispatchRecord struct {
	RequestID string `json:"request_id"`
	Attempt   int    `json:"attempt"`
	State     string `json:"state"` // Dispatched or NotDispatched
	// Reason says why an attempt was not dispatched.
	Reason string `json:"reason,omitempty"`
	// Gateway names the gateway that wrote the record.
	Gateway string    `json:"gateway"`
	At      time.Time `json:"at"`
}

// RunRecord is what tool_result.json says of every run, whether it ended
// with a result (ToolResultRecord) or broke (BrokenRunRecord).
type RunRecord struct {
	RequestID  string    `json:"request_id"`
	Driver     string    `json:"driver"`
	Target     string    `json:"target"`
	Engine     string    `json:"engine_ref"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
}

// ToolResultRecord is tool_result.json of a tool that ran: what its driver
// returned.
type ToolResultRecord struct {
	RunRecord
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Data     any    `json:"data,omitempty"`
	// Evidence is what the driver put on record beside the result.
	Evidence map[string]any `json:"evidence,omitempty"`
}

// BrokenRunRecord is tool_result.json of a run whose driver failed after
// the tool had started: there is no result (no exit code, no output), only
// why, the nested calls the gateway ran for it (so that a side effect of
// guest code never lacks a trace in its parent's record), and what the
// driver knew.
type BrokenRunRecord struct {
	RunRecord
	// Error is the driver's failure, as the caller was told it.
	Error       string             `json:"error"`
	NestedCalls []NestedCallRecord `json:"nested_calls"`
	Evidence    map[string]any     `json:"evidence,omitempty"`
}

// NestedCallRecord is a parent's account of one tool call its sandboxed
// code made.
type NestedCallRecord struct {
	CallID    string `json:"call_id"`
	ToolID    string `json:"tool_id"`
	RequestID string `json:"request_id"`
	OK        bool   `json:"ok"`
	// Code is the execbox error code the guest was answered with.
	Code string `json:"code,omitempty"`
	// Recorded is set when the call has evidence of its own under
	// RequestID (it was claimed); calls refused before that have none.
	Recorded bool `json:"recorded"`
}

// ResponseRecord is response.json: the contract's Response, exactly what
// the caller received, with its optional fields omitted when empty.
type ResponseRecord struct {
	OK                 bool                `json:"ok"`
	ToolResult         *ResponseToolResult `json:"tool_result,omitempty"`
	PolicyCheck        ResponsePolicyCheck `json:"policy_check"`
	EvidenceRefs       []string            `json:"evidence_refs"`
	LocalEvidencePaths []string            `json:"local_evidence_paths,omitempty"`
	EngineRef          string              `json:"engine_ref"`
	RunID              string              `json:"run_id,omitempty"`
	StepID             string              `json:"step_id,omitempty"`
	// PendingApproval is set on a reply that waits for a human approval;
	// such a reply is never stored as response.json, which is final.
	PendingApproval *ResponsePendingApproval `json:"pending_approval,omitempty"`
}

// ResponsePendingApproval is a reply's pending_approval.
type ResponsePendingApproval struct {
	ApprovalID  string    `json:"approval_id"`
	Reason      string    `json:"reason"`
	ExpiresAt   time.Time `json:"expires_at"`
	RuleID      string    `json:"rule_id"`
	Approvers   string    `json:"approvers"`
	RequestHash string    `json:"request_hash"`
}

// ResponseToolResult is a response's tool_result.
type ResponseToolResult struct {
	ExitCode int32           `json:"exit_code"`
	Stdout   string          `json:"stdout"`
	Stderr   string          `json:"stderr"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// ResponsePolicyCheck is a response's policy_check.
type ResponsePolicyCheck struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	RuleID   string `json:"rule_id,omitempty"`
	// Suggestion is the deciding rule's @suggestion; omitted when it has
	// none, so such responses keep their bytes.
	Suggestion string `json:"suggestion,omitempty"`
	// RetryAfterMS is a rate-limit deny's retry hint (PolicyCheck
	// retry_after_ms); omitted when there is none.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// attemptsFolder holds the artifacts of every attempt after the first.
const attemptsFolder = "attempts/"

// AttemptArtifact returns the name, within its request's folder, of an
// attempt's artifact (ArtifactPolicyDecision, ArtifactDispatch or
// ArtifactNotDispatched). The first attempt's artifacts lie in the
// request's folder itself, where a request that never needed a retry has
// them; attempt n > 1 keeps its own in "attempts/<n>/".
func AttemptArtifact(attempt int, name string) string {
	if attempt <= 1 {
		return name
	}
	return attemptsFolder + strconv.Itoa(attempt) + "/" + name
}

// AttemptKey returns the key of an attempt's artifact (see AttemptArtifact).
func AttemptKey(requestID string, attempt int, name string) string {
	return Key(requestID, AttemptArtifact(attempt, name))
}

// ParseAttemptKey splits a key of a request's folder into the attempt it
// belongs to and the artifact's name. Keys of the first attempt's
// artifacts, and keys that belong to the request as a whole, have attempt
// 1. ok is false for a key outside requestID's folder or with a malformed
// attempt number.
func ParseAttemptKey(requestID, key string) (attempt int, name string, ok bool) {
	rest, inFolder := strings.CutPrefix(key, RequestPrefix(requestID))
	if !inFolder {
		return 0, "", false
	}
	num, name, nested := strings.Cut(strings.TrimPrefix(rest, attemptsFolder), "/")
	if !strings.HasPrefix(rest, attemptsFolder) || !nested {
		return 1, rest, true
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 2 || strconv.Itoa(n) != num || strings.Contains(name, "/") {
		return 0, "", false
	}
	return n, name, true
}

// IsArtifactKey reports whether key names an artifact a gateway writes
// for requestID: one of the request's own, or one of an attempt after the
// first. A gateway lists only these in the manifests it signs, so that
// anything else found in a request's folder stays outside its signature.
func IsArtifactKey(requestID, key string) bool {
	n, name, ok := ParseAttemptKey(requestID, key)
	switch {
	case !ok:
		return false
	case n > 1:
		return slices.Contains(attemptArtifacts, name)
	}
	switch name {
	case ArtifactRequest, ArtifactPolicyDecision, ArtifactDispatch, ArtifactNotDispatched, ArtifactToolResult,
		ArtifactResponse, ArtifactManifest, ArtifactApprovalRequest, ArtifactApproval, ArtifactApprovalUse:
		return true
	}
	return false
}

// ParseDispatchRecord decodes dispatch.json or not_dispatched.json and
// checks that it belongs to the given request and attempt.
// Like ParseManifest it is strict: unknown fields, fields given twice and
// trailing data are rejected, so that a reader and the verifier cannot see
// two different records in one file.
func ParseDispatchRecord(data []byte, requestID string, attempt int) (DispatchRecord, error) {
	var d DispatchRecord
	if err := decodeStrict(data, &d); err != nil {
		return DispatchRecord{}, fmt.Errorf("evidence: dispatch record: %w", err)
	}
	switch {
	case d.RequestID != requestID:
		return DispatchRecord{}, fmt.Errorf("evidence: dispatch record: request_id is %q, want %q", d.RequestID, requestID)
	case d.Attempt != attempt:
		return DispatchRecord{}, fmt.Errorf("evidence: dispatch record: attempt is %d, want %d", d.Attempt, attempt)
	case d.State != Dispatched && d.State != NotDispatched:
		return DispatchRecord{}, fmt.Errorf("evidence: dispatch record: state %q is not %q or %q", d.State, Dispatched, NotDispatched)
	}
	return d, nil
}
