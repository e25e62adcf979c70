package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cedar-policy/cedar-go/types"
)

// Context builds the Cedar context record that Decide evaluates req against:
// requestId, policyRef (the effective policy_ref) and args always; runId,
// stepId and parentRequestId only when they are non-empty, so that rules can
// test for them with `context has runId`.
func Context(req Request) (types.Record, error) {
	args, err := ArgsValue(req.Args)
	if err != nil {
		return types.Record{}, err
	}
	m := types.RecordMap{
		"requestId": types.String(req.RequestID),
		"policyRef": types.String(effectiveRef(req.PolicyRef)),
		"args":      args,
		"session":   req.History.sessionRecord(),
		"caller":    req.History.callerRecord(),
	}
	if req.RunID != "" {
		m["runId"] = types.String(req.RunID)
	}
	if req.StepID != "" {
		m["stepId"] = types.String(req.StepID)
	}
	if req.ParentRequestID != "" {
		m["parentRequestId"] = types.String(req.ParentRequestID)
	}
	return types.NewRecord(m), nil
}

// ArgsValue maps JSON tool arguments onto a Cedar record. Cedar has no null
// and no floating point, so the mapping is:
//
//   - an object becomes a Record and an array a Set;
//   - a string stays a String and a boolean becomes a Boolean;
//   - null is dropped: the attribute is absent (test it with `has`) and null
//     array elements are left out of the Set;
//   - a number whose value is a whole number within the int64 range becomes a
//     Long, whatever its spelling (1000, 1e3 and 1000.0 are all Long 1000;
//     -0.0 is Long 0), because JSON itself does not distinguish them;
//   - any other number that a Cedar decimal holds exactly (at most four
//     fractional digits, within ±922337203685477.5807) becomes a decimal;
//   - every remaining number becomes a String holding its JSON text, so that
//     no value is silently rounded.
//
// args holds the output of a json.Decoder with UseNumber: map[string]any,
// []any, string, bool, json.Number and nil. float64, int and int64 are
// accepted as well. A nil map yields an empty record.
//
// It is an error, naming the offending path, to pass any other type, an
// invalid json.Number or a non-finite float; to nest deeper than 64 levels;
// or to have more than 1,000 elements in one array or 10,000 in all arrays
// together. The size limits exist because Cedar builds a Set in time that
// grows with the square of its size for some crafted contents (numbers close
// together, sets of sets), which would let one request occupy a CPU for
// seconds.
func ArgsValue(args map[string]any) (types.Record, error) {
	var m argsMapper
	return m.record(args, &argPath{}, 1)
}

// Limits on the arguments a decision accepts; see ArgsValue. Real tool
// arguments are shallow and small. The depth bound also keeps a value built
// in Go with a cycle from exhausting the stack.
const (
	maxArgsDepth        = 64
	maxSetElements      = 1000
	maxTotalSetElements = 10000
)

// argsMapper carries the running totals of one ArgsValue call.
type argsMapper struct {
	setElems int
}

// argPath is the location of a value inside the arguments, built as a
// linked list so that a path string is only rendered for an error.
type argPath struct {
	parent *argPath
	key    string
	index  int // an array index when key is ""
}

func (p *argPath) member(k string) *argPath { return &argPath{parent: p, key: k} }
func (p *argPath) elem(i int) *argPath      { return &argPath{parent: p, index: i} }

func (p *argPath) String() string {
	if p.parent == nil {
		return "args"
	}
	if p.key == "" {
		return p.parent.String() + "[" + strconv.Itoa(p.index) + "]"
	}
	return p.parent.String() + "." + p.key
}

func (m *argsMapper) record(obj map[string]any, path *argPath, depth int) (types.Record, error) {
	if depth > maxArgsDepth {
		return types.Record{}, fmt.Errorf("%s: nested more than %d levels deep", path, maxArgsDepth)
	}
	rm := make(types.RecordMap, len(obj))
	for k, v := range obj {
		if v == nil {
			continue
		}
		cv, err := m.value(v, path.member(k), depth)
		if err != nil {
			return types.Record{}, err
		}
		rm[types.String(k)] = cv
	}
	return types.NewRecord(rm), nil
}

func (m *argsMapper) set(arr []any, path *argPath, depth int) (types.Set, error) {
	if depth > maxArgsDepth {
		return types.Set{}, fmt.Errorf("%s: nested more than %d levels deep", path, maxArgsDepth)
	}
	elems := make([]types.Value, 0, len(arr))
	for i, e := range arr {
		if e == nil {
			continue
		}
		ce, err := m.value(e, path.elem(i), depth)
		if err != nil {
			return types.Set{}, err
		}
		elems = append(elems, ce)
	}
	if len(elems) > maxSetElements {
		return types.Set{}, fmt.Errorf("%s: %d elements; at most %d are accepted in one array", path, len(elems), maxSetElements)
	}
	m.setElems += len(elems)
	if m.setElems > maxTotalSetElements {
		return types.Set{}, fmt.Errorf("%s: more than %d array elements in all arguments together", path, maxTotalSetElements)
	}
	return types.NewSet(elems...), nil
}

func (m *argsMapper) value(v any, path *argPath, depth int) (types.Value, error) {
	switch v := v.(type) {
	case string:
		return types.String(v), nil
	case bool:
		return types.Boolean(v), nil
	case json.Number:
		return numberValue(string(v), path)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s: number %v has no JSON form", path, v)
		}
		return numberValue(strconv.FormatFloat(v, 'g', -1, 64), path)
	case int:
		return types.Long(v), nil
	case int64:
		return types.Long(v), nil
	case map[string]any:
		return m.record(v, path, depth+1)
	case []any:
		return m.set(v, path, depth+1)
	default:
		return nil, fmt.Errorf("%s: unsupported value of Go type %T", path, v)
	}
}

// numberValue maps one JSON number, given as its text, to a Long, a decimal
// or, when neither holds it exactly, a String of the text. It works on the
// decimal digits rather than through float64 or math/big so that it is exact
// and so that an exponent such as 1e999999999 costs nothing.
func numberValue(text string, path *argPath) (types.Value, error) {
	n, ok := parseNumber(text)
	if !ok {
		return nil, fmt.Errorf("%s: %q is not a JSON number", path, text)
	}
	if n.digits == "" {
		return types.Long(0), nil
	}
	if n.hugeExp {
		return types.String(text), nil
	}
	sign := ""
	if n.neg {
		sign = "-"
	}
	// An int64 has at most 19 digits; anything longer fits neither a Long
	// nor the (smaller) scaled range of a decimal.
	const maxDigits = 19
	if n.exp >= 0 {
		if int64(len(n.digits))+n.exp > maxDigits {
			return types.String(text), nil
		}
		i, err := strconv.ParseInt(sign+n.digits+strings.Repeat("0", int(n.exp)), 10, 64)
		if err != nil {
			return types.String(text), nil
		}
		return types.Long(i), nil
	}
	// A decimal stores value × 10^4 in an int64.
	const decimalPlaces = 4
	if n.exp < -decimalPlaces || int64(len(n.digits))+decimalPlaces+n.exp > maxDigits {
		return types.String(text), nil
	}
	scaled, err := strconv.ParseInt(sign+n.digits+strings.Repeat("0", int(decimalPlaces+n.exp)), 10, 64)
	if err != nil {
		return types.String(text), nil
	}
	d, err := types.NewDecimal(scaled, -decimalPlaces)
	if err != nil {
		return types.String(text), nil
	}
	return d, nil
}

// jsonNumber is a JSON number in the form ±digits × 10^exp, where digits has
// neither leading nor trailing zeros ("" means zero).
type jsonNumber struct {
	neg     bool
	digits  string
	exp     int64
	hugeExp bool // |exponent| ≥ 10^18: far beyond any Long or decimal
}

// parseNumber checks text against the JSON number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and decomposes it.
func parseNumber(text string) (jsonNumber, bool) {
	var n jsonNumber
	s := text
	if strings.HasPrefix(s, "-") {
		n.neg = true
		s = s[1:]
	}
	intPart := leadingDigits(s)
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return n, false
	}
	s = s[len(intPart):]
	var frac string
	if strings.HasPrefix(s, ".") {
		frac = leadingDigits(s[1:])
		if frac == "" {
			return n, false
		}
		s = s[1+len(frac):]
	}
	var exp int64
	if s != "" {
		if s[0] != 'e' && s[0] != 'E' {
			return n, false
		}
		s = s[1:]
		expNeg := false
		if s != "" && (s[0] == '+' || s[0] == '-') {
			expNeg = s[0] == '-'
			s = s[1:]
		}
		expDigits := leadingDigits(s)
		if expDigits == "" || len(expDigits) != len(s) {
			return n, false
		}
		expDigits = strings.TrimLeft(expDigits, "0")
		// An exponent of 10^18 or more could only be offset by a mantissa of
		// that many digits, which no input can have, so the value is far
		// beyond any Long or decimal. Shorter exponents fit an int64 with
		// room for the adjustments below.
		if len(expDigits) > 18 {
			n.hugeExp = true
		} else if expDigits != "" {
			exp, _ = strconv.ParseInt(expDigits, 10, 64)
		}
		if expNeg {
			exp = -exp
		}
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	n.digits = trimmed
	n.exp = exp
	return n, true
}

// leadingDigits returns the longest prefix of s made of ASCII digits.
func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
