// Package tlog holds the wire formats of Toolgate's transparency log: the
// log entries that commit to each request, the signed-note checkpoints
// that commit to the log, and the C2SP tlog-proof files that prove one
// entry's inclusion offline.
//
// Every parser here is strict: it accepts only the bytes its own
// marshaller would write, so a flipped bit anywhere in a stored entry,
// checkpoint or proof is an error rather than a silently repaired value.
// The upstream parsers (golang.org/x/mod/sumdb/note,
// github.com/transparency-dev/formats) decode base64 loosely, accept
// leading zeros and repair missing newlines; this package checks what they
// let through.
//
// The package is pure: it reads and writes no store, and imports neither
// evidence nor gateway.
package tlog

import "errors"

// Errors a caller can tell apart with errors.Is. Every error this package
// returns wraps one of them or says plainly which argument was wrong.
var (
	// ErrMalformed: the bytes are not in the canonical form of the format.
	ErrMalformed = errors.New("tlog: malformed")
	// ErrUnknownKey: a signature is by no key the caller trusts (no log key
	// signed the checkpoint, or, in strict mode, a line nobody can check).
	ErrUnknownKey = errors.New("tlog: signed by no trusted key")
	// ErrBadSignature: a trusted key's signature does not verify.
	ErrBadSignature = errors.New("tlog: bad signature")
	// ErrWitnessThreshold: too few trusted witnesses cosigned.
	ErrWitnessThreshold = errors.New("tlog: witness threshold not met")
	// ErrNotIncluded: the inclusion proof does not lead to the checkpoint.
	ErrNotIncluded = errors.New("tlog: entry not included")
)
