package config

import "testing"

func TestInputSchemaConfigIsChecked(t *testing.T) {
	const ws = "drivers: {w: {type: workspace, root: w}}\n"
	for _, tc := range []struct{ name, yaml, wantErr string }{
		{"an object schema is accepted", ws + "tools: {t.x: {driver: w, target: readFile, input_schema: {type: object, properties: {path: {type: string}}, required: [path]}}}", ""},
		{"an array schema is refused", ws + "tools: {t.x: {driver: w, target: readFile, input_schema: {type: array}}}", "tools.t.x.input_schema"},
		{"a schema without a type is refused", ws + "tools: {t.x: {driver: w, target: readFile, input_schema: {properties: {}}}}", "tools.t.x.input_schema"},
		{"a reference to nothing is refused", ws + "tools: {t.x: {driver: w, target: readFile, input_schema: {type: object, properties: {a: {$ref: '#/$defs/none'}}}}}", "does not compile"},
		{"a keyword of the wrong type is refused", ws + "tools: {t.x: {driver: w, target: readFile, input_schema: {type: object, required: path}}}", "tools.t.x.input_schema"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkConfigError(t, tc.yaml, tc.wantErr) })
	}
}
