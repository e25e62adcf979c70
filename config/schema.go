package config

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
)

// InputSchemaJSON is the configured input_schema as JSON, or nil.
func (t ToolConfig) InputSchemaJSON() json.RawMessage {
	if t.InputSchema == nil {
		return nil
	}
	b, err := json.Marshal(t.InputSchema)
	if err != nil {
		// checkInputSchema refused it at load.
		return nil
	}
	return b
}

// checkInputSchema checks a configured input_schema: JSON, an object
// schema, and one that compiles (its $refs local).
func checkInputSchema(m map[string]any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("not expressible as JSON (keys must be strings): %w", err)
	}
	return CheckSchemaJSON(b)
}

// CheckSchemaJSON checks that schema compiles as JSON Schema 2020-12 and
// describes an object.
func CheckSchemaJSON(schema json.RawMessage) error {
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("not a JSON Schema: %w", err)
	}
	if s.Type != "object" {
		return errors.New(`want "type": object at the top: tool arguments are an object`)
	}
	if _, err := s.Resolve(&jsonschema.ResolveOptions{}); err != nil {
		return fmt.Errorf("does not compile: %w", err)
	}
	return nil
}
