package drivers

import "errors"

// EvidenceError is an error from Driver.Run that carries what the driver
// knows of a run that produced no Result: a downstream that broke after the
// tool had started (for example a sandbox whose guest code had already
// called tools). The gateway still reports the error as UNAVAILABLE, and
// records Evidence, redacted, in the failed call's tool_result.json.
type EvidenceError struct {
	Err error
	// Evidence holds facts for the record, as Result.Evidence does.
	Evidence map[string]any
}

func (e *EvidenceError) Error() string { return e.Err.Error() }

func (e *EvidenceError) Unwrap() error { return e.Err }

// ErrorEvidence returns the evidence carried by err or any error it wraps
// (see EvidenceError), or nil when there is none.
func ErrorEvidence(err error) map[string]any {
	var e *EvidenceError
	if errors.As(err, &e) {
		return e.Evidence
	}
	return nil
}
