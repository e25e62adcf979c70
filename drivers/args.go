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
