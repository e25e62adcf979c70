package drivers

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Call is one authorized tool invocation.
type Call struct {
	// RequestID is the caller's stable request identifier. Drivers may use it
	// to correlate logs with downstream systems; they must not use it as a
	// file name without validating it again.
	RequestID string
	// ToolID is the catalog identifier the caller asked for, for example
	// "workspace.readFile".
	ToolID string
	// Target names what to run inside the driver. Its meaning is the
	// driver's own: the workspace driver takes an operation name such as
	// "readFile", the TPMJS driver the export name of the package's tool.
	Target string
	// Package and Version locate the code of a packaged tool (the TPMJS
	// driver: an npm package name and a version, range or dist-tag).
	// Drivers that run no packages ignore them.
	Package, Version string
	// Args are the tool arguments decoded from JSON: map[string]any,
	// []any, string, bool, json.Number, or nil.
	Args map[string]any
	// Env holds environment values the gateway hands to the tool, most of
	// them secrets resolved from the gateway's own environment. The
	// gateway redacts every one of them from the evidence; a driver must
	// never log them.
	Env map[string]string
	// Tools, when set, lets the driver call other tools on behalf of this
	// call (guest code in a sandbox calling the host's tools). Each such
	// call goes through the gateway's whole pipeline.
	Tools ToolCaller
}

// ToolCaller runs nested tool calls for a driver whose downstream calls
// tools back, such as an execbox runner's guest code. The gateway
// implements it: every nested call gets its own policy decision (as
// Action::"CallTool", with the parent's request id in its context), its own
// redaction and its own evidence. A driver knows nothing of that; it only
// sees the outcome.
type ToolCaller interface {
	// Tools lists the tools that may be offered to guest code, sorted by
	// id. Policy still decides each call.
	Tools() []ToolInfo
	// CallTool runs the tool toolID with input (decoded JSON, or nil when
	// the guest passed none) as a nested call of the current call. callID
	// identifies the call within its parent; the same callID always maps
	// to the same nested request id, so a retried parent never runs a
	// nested call twice.
	CallTool(ctx context.Context, callID, toolID string, input any) NestedResult
}

// ToolInfo describes a tool that may be offered to guest code.
type ToolInfo struct {
	ID          string
	Description string
}

// NestedResult is the outcome of a nested call as guest code sees it.
type NestedResult struct {
	// RequestID is the nested call's own request id, under which its
	// evidence is stored.
	RequestID string
	OK        bool
	// Result is the tool's structured output when OK, and also when a
	// tool that ran failed (then Code and Message say how).
	Result any
	// Code and Message explain a failure: Code is one of the execbox error
	// codes ("tool_error" for a denied or failed tool, or one whose call
	// waits for a human's approval, "internal_error"
	// for an unknown tool or a gateway failure, "validation_error" for
	// input the gateway refused).
	Code, Message string
}

// Trace is one exchange between a driver and its downstream, for the local
// trace a driver may keep. Drivers hand traces to a TraceWriter instead of
// writing them, so the gateway can redact them first.
type Trace struct {
	RequestID string `json:"request_id"`
	// Time is when the exchange started, RFC 3339 with nanoseconds.
	Time       string         `json:"time"`
	DurationMS int64          `json:"duration_ms"`
	Method     string         `json:"method"`
	URL        string         `json:"url"`
	Request    map[string]any `json:"request,omitempty"`
	Status     int            `json:"status,omitempty"`
	Response   string         `json:"response,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// TraceWriter records traces of one driver. Write returns the local path of
// the file the trace went to, for the response's local_evidence_paths.
type TraceWriter interface {
	Write(t Trace) (path string, err error)
}

// Result is what a tool produced. A tool that ran and failed is a Result
// with a non-zero ExitCode, not an error.
type Result struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Data is optional structured output; it must be encodable as JSON.
	Data any
	// Evidence holds facts the driver wants on record beside the result
	// (for example which nested calls a sandbox made). The gateway stores
	// it, redacted, in tool_result.json; the caller does not receive it.
	Evidence map[string]any
}

// Driver runs tool calls against one downstream system.
//
// Run returns an error only when the downstream could not be reached or the
// exchange broke (the contract's "throw"); the gateway reports such errors to
// the caller as UNAVAILABLE. An error may carry evidence (EvidenceError). The context carries the call's deadline; a driver
// must stop work and return promptly once it is done.
type Driver interface {
	Run(ctx context.Context, call Call) (Result, error)
	// Engine names the downstream engine for engine_ref, for example
	// "workspace" or "tpmjs-executor/1.2.0".
	Engine() string
}

// ErrUnknownTarget is returned (wrapped) by drivers asked to run a target
// they do not serve.
var ErrUnknownTarget = errors.New("unknown target")

// Normalizer is implemented by a driver whose arguments name resources
// (files, folders, packages). It is the rule every such driver follows:
// policy sees exactly what runs. A section (Config) whose canonical forms
// depend on the arguments alone implements it too, so that decisions made
// without a running gateway (toolgate policy authorize) see the same
// arguments.
//
// The gateway calls Normalize before the call is hashed, recorded or
// decided. The canonical arguments it returns are what Cedar's context
// holds, what request.json records and what the driver's Run receives; a
// value that has no canonical form is refused with INVALID_ARGUMENT before
// the request id is claimed. A driver must therefore never re-interpret a
// canonical value (no cleaning, case folding, link following or other
// resolution of its own after the decision): if two spellings could reach
// one resource, Normalize maps them to one spelling; if a spelling cannot be
// resolved without touching the resource (a ".." through a link), Normalize
// refuses it. Run should refuse a value that is not canonical, so that a Go
// caller bypassing the gateway gets a refusal rather than a second
// interpretation.
type Normalizer interface {
	// Normalize returns args with every argument of target that names a
	// resource in canonical form. It must not modify args: when anything
	// changes it returns a new map, and changed is true. Arguments it does
	// not own, and values of the wrong type, are returned as they are (Run
	// reports those). A refusal is an *ArgError.
	Normalize(target string, args map[string]any) (canonical map[string]any, changed bool, err error)
}

// ArgError is a refusal of one argument: Arg names it, Err the rule it
// breaks.
type ArgError struct {
	Arg string
	Err error
}

func (e *ArgError) Error() string { return e.Arg + ": " + e.Err.Error() }

func (e *ArgError) Unwrap() error { return e.Err }

// Bounded is implemented by a driver that bounds how long one Run can
// take, whatever its call asks for. The gateway's recovery uses the longest
// bound of its drivers to tell a dispatched call that was abandoned (its
// gateway stopped) from one that may still be running.
type Bounded interface {
	// MaxRunTime is the longest one Run can take, kills and clean-up
	// included.
	MaxRunTime() time.Duration
}

// Sealed is implemented by a driver whose runs can affect nothing outside
// the run except through Call.Tools: guest code in a sandbox that holds no
// network, no files and no secrets of the host, whose every effect on the
// world is a nested tool call the gateway makes (and gates, and records).
// For such a run, "nothing was dispatched" follows from "no nested call was
// dispatched", so the gateway may discard the run and run it again; for a
// run that is not sealed it may never do so. A driver that cannot vouch for
// what its downstream can reach (a shell, a package's code, a runner whose
// guest has network access) must not implement it.
type Sealed interface {
	// Sealed reports whether every run of the driver is sealed.
	Sealed() bool
}

// Describer is implemented by a driver that knows what its targets take
// and do: clients that show tools to a model (an MCP client's tools/list)
// show the schema and hints, and the gateway treats the caller's
// environment argument as a secret of the call.
type Describer interface {
	// Describe returns what the driver knows of target; the zero Target
	// when it knows nothing.
	Describe(target string) Target
}

// Target is what a driver knows of one of its targets.
type Target struct {
	// InputSchema is the argument schema (JSON Schema 2020-12,
	// "type":"object"), or nil when the driver does not know it. It may
	// be shared between calls: read it, never change it.
	InputSchema json.RawMessage
	// Hints are the target's effects.
	Hints Hints
	// EnvArg names the argument whose object value is environment the
	// caller hands the tool (a shell's env). The gateway treats each of
	// its string values as a secret of the call: it is checked, recorded
	// only as a marker and redacted from the output, exactly as the
	// values of a tool's caller_env. Empty when no argument is.
	EnvArg string
}

// Hints are what a driver knows of what a target does, for clients that
// tell a model (MCP tool annotations). A false field claims nothing.
type Hints struct {
	// ReadOnly: the target changes nothing it can reach.
	ReadOnly bool
	// Destructive: the target may delete or overwrite what it reaches.
	Destructive bool
}
