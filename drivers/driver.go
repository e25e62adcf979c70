// Package drivers defines the interface between the gateway and the systems
// that actually execute tools. A driver knows nothing about policy or
// evidence: the gateway hands it a Call that has already been authorized and
// records whatever Result it returns.
package drivers

import (
	"context"
	"errors"
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
}

// Driver runs tool calls against one downstream system.
//
// Run returns an error only when the downstream could not be reached or the
// exchange broke (the contract's "throw"); the gateway reports such errors to
// the caller as UNAVAILABLE. The context carries the call's deadline; a driver
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
