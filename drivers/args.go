package drivers

import (
	"encoding/json"
	"fmt"
)

// JSONType names the JSON type of a decoded argument value ("a string",
// "an array", …), for messages that tell a caller what was expected and
// what arrived instead.
func JSONType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, float64, int, int64:
		return "a number"
	case []any, []string:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// OmitNulls returns args without their null members, in nested objects as
// well (objects within arrays included; an array's own null elements stay,
// as their positions carry meaning): an argument given as null is an
// argument not given. Clients in strict tool-schema modes send null for
// every optional argument they leave out, and Cedar has no null, so policy
// already sees null as absent; a driver must see the same, since policy
// decides on exactly what runs. A null for a required argument is then a
// missing argument, refused as such. args is not modified: changed reports
// a new map.
func OmitNulls(args map[string]any) (out map[string]any, changed bool) {
	for k, v := range args {
		nv, drop, ch := omitNullsIn(v)
		if !drop && !ch {
			continue
		}
		if !changed {
			out, changed = make(map[string]any, len(args)), true
			for k2, v2 := range args {
				out[k2] = v2
			}
		}
		if drop {
			delete(out, k)
		} else {
			out[k] = nv
		}
	}
	if !changed {
		return args, false
	}
	return out, true
}

// omitNullsIn returns v with the null members of its objects left out;
// drop reports that v itself is null.
func omitNullsIn(v any) (out any, drop, changed bool) {
	switch x := v.(type) {
	case nil:
		return nil, true, false
	case map[string]any:
		m, ch := OmitNulls(x)
		return m, false, ch
	case []any:
		var copied []any
		for i, e := range x {
			if e == nil {
				continue
			}
			ne, _, ch := omitNullsIn(e)
			if !ch {
				continue
			}
			if copied == nil {
				copied = append([]any(nil), x...)
			}
			copied[i] = ne
		}
		if copied == nil {
			return v, false, false
		}
		return copied, false, true
	}
	return v, false, false
}
