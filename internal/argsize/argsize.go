// Package argsize holds the limits on a call's arguments, in one place for
// the gateway (which enforces them on the canonical arguments) and the
// HTTP front doors (which must refuse a body no call could come out of
// before they decode it), and a scan that checks the shape of a JSON text
// against them without building anything.
//
// The doors' bodies are bounded by the arguments' limits plus a small
// envelope (the protocol's own fields), so that what a door reads and
// decodes for one request is bounded by what a gRPC call may carry, not by
// what a caller chooses to send.
package argsize

import (
	"errors"
	"fmt"
)

// Limits on a call's arguments.
const (
	// MaxBytes bounds the arguments encoded as canonical JSON.
	MaxBytes = 1 << 20
	// MaxDepth bounds their nesting (the arguments object is level 1).
	MaxDepth = 32
	// MaxNodes bounds the values in them (every object member, list item
	// and scalar counts one), which bounds what decoding them allocates.
	MaxNodes = 1 << 16
)

// Bounds of a door's body: the arguments plus an envelope for the
// protocol's fields (tool name, ids, request metadata, a sealed approval
// state, an Agent Spaces batch's operation types and ids).
const (
	// EnvelopeBytes is the room a body has beside its arguments.
	EnvelopeBytes = 64 << 10
	// EnvelopeNodes is the number of values a body may hold beside its
	// arguments.
	EnvelopeNodes = 4 << 10
	// EnvelopeDepth is how deep a body may nest its arguments (an MCP
	// call's sit at params.arguments, level 3).
	EnvelopeDepth = 4
	// MaxBodyBytes is the largest body a door may take: no call could be
	// built from a larger one without padding or escapes, and a door's
	// max_body_bytes may not exceed it.
	MaxBodyBytes = MaxBytes + EnvelopeBytes
	// MaxBodyDepth and MaxBodyNodes bound a body's JSON shape.
	MaxBodyDepth = MaxDepth + EnvelopeDepth
	MaxBodyNodes = MaxNodes + EnvelopeNodes
)

// maxScanDepth is the deepest ScanJSON can follow; deeper limits are
// clamped to it.
const maxScanDepth = 128

// ErrTooDeep and ErrTooManyValues are the ways a scan fails.
var (
	ErrTooDeep       = errors.New("nested too deep")
	ErrTooManyValues = errors.New("too many values")
)

// ScanJSON checks that the JSON text b nests no deeper than maxDepth and
// holds no more than maxNodes values (object members and list items count
// one each, as scalars and containers do; keys do not), before anything
// is decoded from it. It allocates nothing and does not validate: a text
// that is no JSON is left to the decoder that follows, which says what is
// wrong with it. Its errors wrap ErrTooDeep or ErrTooManyValues.
func ScanJSON(b []byte, maxDepth, maxNodes int) error {
	maxDepth = min(maxDepth, maxScanDepth)
	var isObject [maxScanDepth + 1]bool
	depth, nodes := 0, 0
	expectKey := false
	count := func() error {
		if nodes++; nodes > maxNodes {
			return fmt.Errorf("more than %d values: %w", maxNodes, ErrTooManyValues)
		}
		return nil
	}
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case ' ', '\t', '\n', '\r', ':':
			i++
		case ',':
			expectKey = depth > 0 && isObject[depth]
			i++
		case '{', '[':
			if err := count(); err != nil {
				return err
			}
			if depth++; depth > maxDepth {
				return fmt.Errorf("nested deeper than %d levels: %w", maxDepth, ErrTooDeep)
			}
			isObject[depth] = c == '{'
			expectKey = c == '{'
			i++
		case '}', ']':
			if depth > 0 {
				depth--
			}
			expectKey = false
			i++
		case '"':
			if !expectKey {
				if err := count(); err != nil {
					return err
				}
			}
			expectKey = false
			i = skipString(b, i+1)
		default:
			if err := count(); err != nil {
				return err
			}
			expectKey = false
			i = skipScalar(b, i)
		}
	}
	return nil
}

// skipString returns the index after the string whose contents start at
// i, or len(b) when it does not end.
func skipString(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return len(b)
}

// skipScalar returns the index after the number or literal at i.
func skipScalar(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r', ',', ':', '{', '}', '[', ']', '"':
			return i
		}
	}
	return i
}
