package execbox

import (
	"encoding/json"

	"github.com/toolgate/toolgate/drivers"
)

var _ drivers.Describer = (*Driver)(nil)

// Describe implements drivers.Describer: a schema, and no hints, since
// guest code may do whatever the tools it calls do.
func (d *Driver) Describe(string) drivers.Target { return d.described }

// InputSchema is the schema of every target: code.run's
// arguments (parseArgs), whatever the catalog names it. timeoutMs is held
// to the driver's time limit, which a call may lower but never raise.
func (d *Driver) InputSchema(string) json.RawMessage {
	s := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "minLength": 1, "maxLength": maxCodeBytes,
				"description": "JavaScript; the catalog's tools are in scope as providers"},
			"providers": map[string]any{"type": "array", "items": map[string]any{"type": "string"},
				"description": "the providers to offer; default all"},
			"timeoutMs": map[string]any{"type": "integer", "minimum": 1, "maximum": max(d.timeout.Milliseconds(), 1),
				"description": "milliseconds the run may take; default the limit"},
		},
		"required":             []string{"code"},
		"additionalProperties": false,
	}
	b, err := json.Marshal(s)
	if err != nil {
		// Maps of strings and numbers always encode.
		return nil
	}
	return b
}
