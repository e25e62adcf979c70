package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ScanArgs walks the args field of an encoded RunToolRequest and
// refuses it, before anything is decoded, when it holds more than
// maxNodes values or nests deeper than maxDepth. It allocates
// nothing. A message it cannot parse is left to proto.Unmarshal, which
// says what is wrong with it; the values counted before the damage still
// count. Repeated args fields are merged by protobuf, so their counts add.
func ScanArgs(b []byte, maxNodes, maxDepth int) error {
	s := argsScan{budget: maxNodes, maxNodes: maxNodes, maxDepth: maxDepth}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != 3 {
			continue
		}
		if err := s.object(v, 1); err != nil {
			return err
		}
	}
}

// argsScan counts the values of a google.protobuf.Struct on the wire.
type argsScan struct{ budget, maxNodes, maxDepth int }

// Field numbers of google.protobuf.Struct, its map entries, Value and
// ListValue that hold nested values.
const (
	structFields     = 1 // Struct.fields, map entries
	entryValue       = 2 // map entry value
	valueStructValue = 5 // Value.struct_value
	valueListValue   = 6 // Value.list_value
	listValues       = 1 // ListValue.values
)

// object scans a Struct at depth (args itself is depth 1, as for
// checkStruct).
func (s *argsScan) object(b []byte, depth int) error {
	if depth > s.maxDepth {
		return fmt.Errorf("args: nested deeper than %d levels", s.maxDepth)
	}
	for {
		num, entry, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != structFields {
			continue
		}
		for {
			num, v, rest, ok := nextMessage(entry)
			if !ok {
				break
			}
			entry = rest
			if num != entryValue {
				continue
			}
			if err := s.value(v, depth); err != nil {
				return err
			}
		}
	}
}

// list scans a ListValue whose items sit at depth.
func (s *argsScan) list(b []byte, depth int) error {
	if depth > s.maxDepth {
		return fmt.Errorf("args: nested deeper than %d levels", s.maxDepth)
	}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		if num != listValues {
			continue
		}
		if err := s.value(v, depth); err != nil {
			return err
		}
	}
}

// value counts one Value and scans what it nests.
func (s *argsScan) value(b []byte, depth int) error {
	if s.budget--; s.budget < 0 {
		return fmt.Errorf("args: more than %d values, the limit", s.maxNodes)
	}
	for {
		num, v, rest, ok := nextMessage(b)
		if !ok {
			return nil
		}
		b = rest
		var err error
		switch num {
		case valueStructValue:
			err = s.object(v, depth+1)
		case valueListValue:
			err = s.list(v, depth+1)
		}
		if err != nil {
			return err
		}
	}
}

// nextMessage returns the next length-delimited field of the message b,
// its number and what follows it, skipping fields of other wire types. ok
// is false at the end of b and at bytes that do not parse.
func nextMessage(b []byte) (num protowire.Number, v, rest []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, nil, nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return 0, nil, nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, nil, nil, false
		}
		return num, v, b[n:], true
	}
	return 0, nil, nil, false
}
