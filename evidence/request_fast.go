package evidence

import (
	"encoding/json"
	"strings"
)

// Reading request records quickly. Replay decodes every request.json it
// replays, strictly (encoding/json with unknown fields refused, then a
// pass for duplicate names): after the files' reads, the largest cost of
// replaying a request. decodeRequestFast reads the records gateways write
// in one pass, the arguments kept byte for byte as encoding/json keeps a
// json.RawMessage, and declines to the strict decode whatever it is not
// sure that decode reads the same way: besides what the manifest reader
// declines (manifest_fast.go), an escape anywhere in the arguments, a
// number outside JSON's grammar, nesting deeper than maxFastDepth, an
// object of more than maxFastMembers members, two names of one object
// that encoding/json would take for the same, and a record that says how
// a front door authenticated its caller. FuzzRequestFastDecode holds it to
// the strict decode.

// requestFields are the names decodeRequestFast knows.
var requestFields = [...]string{"request_id", "caller", "tool_id", "args", "ctx", "received_at",
	"canonical_request_hash", "gateway", "parent_request_id", "front_door", "trace_id"}

var requestContextFields = []string{"run_id", "step_id", "policy_ref"}

const (
	// maxFastDepth bounds the nesting of arguments the fast path reads.
	maxFastDepth = 32
	// maxFastMembers bounds the members of one object of the arguments,
	// whose names the fast path compares pairwise.
	maxFastMembers = 32
)

// decodeRequestFast decodes an unsealed request record; ok is false when
// it declines.
func decodeRequestFast(data []byte) (r RequestRecord, ok bool) {
	s := jsonScan{data: data}
	ok = s.object(func(name string) bool {
		switch name {
		case "request_id":
			return s.str(&r.RequestID)
		case "caller":
			return s.str(&r.Caller)
		case "tool_id":
			return s.str(&r.ToolID)
		case "args":
			s.space()
			start := s.i
			if !s.skipValue(0) {
				return false
			}
			r.Args = json.RawMessage(append([]byte(nil), s.data[start:s.i]...))
			return true
		case "ctx":
			return s.object(func(name string) bool {
				switch name {
				case "run_id":
					return s.str(&r.Ctx.RunID)
				case "step_id":
					return s.str(&r.Ctx.StepID)
				}
				return s.str(&r.Ctx.PolicyRef)
			}, requestContextFields)
		case "received_at":
			return s.timestamp(&r.ReceivedAt)
		case "canonical_request_hash":
			return s.str(&r.CanonicalRequestHash)
		case "gateway":
			return s.str(&r.Gateway)
		case "parent_request_id":
			return s.str(&r.ParentRequestID)
		case "front_door":
			return s.str(&r.FrontDoor)
		case "trace_id":
			return s.str(&r.TraceID)
		}
		return false
	}, requestFields[:])
	if !ok || !s.end() {
		return RequestRecord{}, false
	}
	return r, true
}

// skipValue passes over one JSON value, whose bytes it leaves between
// where it began and s.i, and reports whether it is one the strict
// decode would take as it stands (see decodeRequestFast).
func (s *jsonScan) skipValue(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	s.space()
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '{':
		var names []string
		s.i++
		if s.punct('}') {
			return true
		}
		for {
			name, ok := s.plain()
			if !ok || !s.punct(':') || len(names) == maxFastMembers {
				return false
			}
			for _, seen := range names {
				if strings.EqualFold(seen, string(name)) {
					return false
				}
			}
			names = append(names, string(name))
			if !s.skipValue(depth + 1) {
				return false
			}
			if s.punct('}') {
				return true
			}
			if !s.punct(',') {
				return false
			}
		}
	case c == '[':
		return s.array(func() bool { return s.skipValue(depth + 1) })
	case c == '"':
		_, ok := s.plain()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if strings.HasPrefix(string(s.data[s.i:min(len(s.data), s.i+len(lit))]), lit) {
			s.i += len(lit)
			return s.i == len(s.data) || !isLiteralByte(s.data[s.i])
		}
	}
	return false
}

// isLiteralByte reports whether c could continue a literal or a number:
// "truex" and "1x" are not values.
func isLiteralByte(c byte) bool {
	return c == '_' || c == '.' || c == '+' || c == '-' || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// number passes over a number in JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jsonScan) number() bool {
	d := s.data
	if s.i < len(d) && d[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(d) && d[s.i] >= '0' && d[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	start := s.i
	if n := digits(); n == 0 || (n > 1 && d[start] == '0') {
		return false
	}
	if s.i < len(d) && d[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(d) && (d[s.i] == 'e' || d[s.i] == 'E') {
		s.i++
		if s.i < len(d) && (d[s.i] == '+' || d[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return s.i == len(d) || !isLiteralByte(d[s.i])
}
