package workspace

import (
	"encoding/json"

	"github.com/toolgate/toolgate/drivers"
)

// The argument schemas of the operations, as JSON Schema 2020-12, for
// clients that show tools to a model. They say what parseCreate,
// parseRead, parseEdit, parseDelete and parseShell accept, no more: every
// one refuses unknown arguments, so every schema has
// additionalProperties false. The driver still checks every call itself.

// pathSchema is a path argument: relative, at most maxPathInputBytes as
// spelled (maxPathChars once canonical).
func pathSchema(what string) map[string]any {
	return map[string]any{
		"type": "string", "minLength": 1, "maxLength": maxPathInputBytes,
		"description": what + ", relative to the workspace root; no leading '/' and no '..'",
	}
}

var encodingSchema = map[string]any{
	"type": "string", "enum": []string{encodingUTF8, encodingBase64},
	"description": "how content is spelled; default utf-8",
}

// objectSchema is a closed object schema.
func objectSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// operationSchemas are the schemas by operation.
func operationSchemas() map[string]map[string]any {
	return map[string]map[string]any{
		opCreateFile: objectSchema(map[string]any{
			"path": pathSchema("the file to create"),
			"content": map[string]any{"type": "string", "maxLength": maxContentBytes,
				"description": "the file's content, in encoding; at most 10 MiB once decoded"},
			"encoding": encodingSchema,
			"overwrite": map[string]any{"type": "boolean",
				"description": "replace an existing file; default false"},
		}, "path", "content"),
		opReadFile: objectSchema(map[string]any{
			"path":     pathSchema("the file to read"),
			"encoding": encodingSchema,
		}, "path"),
		opEditFile: objectSchema(map[string]any{
			"path": pathSchema("the file to edit"),
			"edits": map[string]any{
				"type": "array", "minItems": 1, "maxItems": maxEdits,
				"description": "search-and-replace steps, applied in order",
				"items": objectSchema(map[string]any{
					"oldContent": map[string]any{"type": "string", "minLength": 1, "maxLength": maxContentBytes,
						"description": "text that occurs exactly once in the file"},
					"newContent": map[string]any{"type": "string", "maxLength": maxContentBytes,
						"description": "what replaces it"},
				}, "oldContent", "newContent"),
			},
		}, "path", "edits"),
		opDeleteFile: objectSchema(map[string]any{
			"path": pathSchema("the file to delete"),
		}, "path"),
		opShell: objectSchema(map[string]any{
			"command": map[string]any{"type": "string", "minLength": 1, "maxLength": maxCommandChars,
				"description": "a shell command line (sh -c), run in the workspace sandbox"},
			"cwd": map[string]any{"type": "string", "minLength": 1, "maxLength": maxPathInputBytes,
				"description": "folder to run in, relative to the workspace root; default the root"},
			"timeout": map[string]any{"type": "integer",
				"minimum": minTimeout.Milliseconds(), "maximum": maxTimeout.Milliseconds(),
				"description": "milliseconds before the command is killed"},
			shellEnvArg: map[string]any{
				"type":                 "object",
				"propertyNames":        map[string]any{"pattern": envNamePattern.String()},
				"additionalProperties": map[string]any{"type": "string"},
				"description":          "environment variables of the command",
			},
		}, "command"),
	}
}

// shellEnvArg is the shell's argument holding the environment the caller
// hands the command.
const shellEnvArg = "env"

var _ drivers.Describer = (*Driver)(nil)

// Describe implements drivers.Describer: an operation's schema and hints;
// the shell's env is the caller's environment.
func (d *Driver) Describe(target string) drivers.Target {
	return d.targets[target]
}

// describeOperations describes every operation.
func describeOperations() map[string]drivers.Target {
	out := make(map[string]drivers.Target, len(Operations()))
	for _, op := range Operations() {
		t := drivers.Target{InputSchema: inputSchema(op), Hints: hints(op)}
		if op == opShell {
			t.EnvArg = shellEnvArg
		}
		out[op] = t
	}
	return out
}

// InputSchema is the schema of an operation, nil for another target.
func (d *Driver) InputSchema(target string) json.RawMessage { return inputSchema(target) }

func inputSchema(target string) json.RawMessage {
	s, ok := operationSchemas()[target]
	if !ok {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		// Maps of strings, numbers and booleans always encode.
		return nil
	}
	return b
}

// Hints are an operation's effects: readFile changes nothing; deleteFile,
// and shell (which may do anything in the workspace), may destroy data.
// createFile and editFile write, but refuse to clobber by default
// (createFile without overwrite) or change only what they are told.
func (d *Driver) Hints(target string) drivers.Hints { return hints(target) }

func hints(target string) drivers.Hints {
	switch target {
	case opReadFile:
		return drivers.Hints{ReadOnly: true}
	case opDeleteFile, opShell:
		return drivers.Hints{Destructive: true}
	}
	return drivers.Hints{}
}
