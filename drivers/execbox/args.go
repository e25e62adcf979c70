package execbox

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/drivers"
)

// maxCodeBytes bounds the guest program.
const maxCodeBytes = 1 << 20

// runArgs are the checked arguments of one execution.
type runArgs struct {
	code string
	// providers restricts the offered providers unless allProviders.
	providers    []string
	allProviders bool
	timeout      time.Duration
}

// parseArgs checks the tool arguments: code (required), providers and
// timeoutMs (optional). limit is the configured time limit, which
// timeoutMs may lower but never raise.
func parseArgs(args map[string]any, limit time.Duration) (runArgs, error) {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k != "code" && k != "providers" && k != "timeoutMs" {
			return runArgs{}, fmt.Errorf("unknown argument %q: the arguments are code, providers and timeoutMs", cleanName(k))
		}
	}

	a := runArgs{allProviders: true, timeout: limit}
	switch code := args["code"].(type) {
	case nil:
		return runArgs{}, fmt.Errorf("args.code is required")
	case string:
		switch {
		case code == "":
			return runArgs{}, fmt.Errorf("args.code must not be empty")
		case len(code) > maxCodeBytes:
			return runArgs{}, fmt.Errorf("args.code is %d bytes, more than the limit of %d", len(code), maxCodeBytes)
		case !utf8.ValidString(code):
			return runArgs{}, fmt.Errorf("args.code must be valid UTF-8")
		}
		a.code = code
	default:
		return runArgs{}, fmt.Errorf("args.code must be a string, got %s", drivers.JSONType(code))
	}

	if raw, ok := args["providers"]; ok && raw != nil {
		list, err := stringList(raw)
		if err != nil {
			return runArgs{}, err
		}
		a.providers, a.allProviders = list, false
	}

	if raw, ok := args["timeoutMs"]; ok && raw != nil {
		maxMs := max(limit.Milliseconds(), 1)
		ms, ok := wholeNumber(raw)
		if !ok || ms < 1 || ms > maxMs {
			return runArgs{}, fmt.Errorf("args.timeoutMs must be a whole number of milliseconds between 1 and %d, got %s", maxMs, describe(raw))
		}
		a.timeout = time.Duration(ms) * time.Millisecond
	}
	return a, nil
}

// stringList reads args.providers: a list of strings.
func stringList(raw any) ([]string, error) {
	switch v := raw.(type) {
	case []string:
		return slices.Clone(v), nil
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("args.providers[%d] must be a string, got %s", i, drivers.JSONType(e))
			}
			out[i] = s
		}
		return out, nil
	default:
		return nil, fmt.Errorf("args.providers must be a list of provider names, got %s", drivers.JSONType(raw))
	}
}

// wholeNumber reads an integer from a decoded JSON number.
func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		f, err := n.Float64()
		if err != nil {
			return 0, false
		}
		return wholeNumber(f)
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) || n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case int:
		return int64(n), true
	case int64:
		return n, true
	}
	return 0, false
}

// describe quotes a rejected value briefly.
func describe(v any) string {
	switch n := v.(type) {
	case json.Number:
		return cleanName(string(n))
	case float64, int, int64:
		return fmt.Sprint(n)
	}
	return drivers.JSONType(v)
}
