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
	// "readFile".
	Target string
	// Args are the tool arguments decoded from JSON: map[string]any,
	// []any, string, bool, json.Number, or nil.
	Args map[string]any
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
