package gateway

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
)

func TestConfiguredInputSchemaReachesTheCatalogAsJSON(t *testing.T) {
	t.Parallel()
	cfg, err := config.ParseConfig([]byte("drivers: {w: {type: workspace, root: w}}\n" +
		"tools: {t.x: {driver: w, target: readFile, input_schema: {type: object, properties: {n: {type: integer, maximum: 3}}}}}"))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := catalogTools(cfg, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tools["t.x"].InputSchema); got != `{"properties":{"n":{"maximum":3,"type":"integer"}},"type":"object"}` {
		t.Errorf("tool schema %s", got)
	}
}

// describingDriver knows the schema of target "known", and hints.
type describingDriver struct {
	countingDriver
	schema string
	hints  drivers.Hints
}

func (d *describingDriver) Describe(target string) drivers.Target {
	if target != "known" {
		return drivers.Target{Hints: d.hints}
	}
	return drivers.Target{InputSchema: json.RawMessage(d.schema), Hints: d.hints}
}

func TestCatalogSchemaIsConfigThenDriverThenAnyObject(t *testing.T) {
	t.Parallel()
	drv := map[string]drivers.Driver{
		"desc":   &describingDriver{schema: `{"type":"object","properties":{"d":{"type":"string"}},"additionalProperties":false}`},
		"broken": &describingDriver{schema: `{"type":"array"}`},
		"plain":  &countingDriver{},
	}
	tools := map[string]Tool{
		"configured": {Driver: "desc", Target: "known", InputSchema: json.RawMessage(`{"type":"object","properties":{"c":{"type":"string"}}}`)},
		"described":  {Driver: "desc", Target: "known"},
		"unknown":    {Driver: "desc", Target: "other"},
		"plain":      {Driver: "plain", Target: "x"},
		"broken":     {Driver: "broken", Target: "known"},
		"withenv":    {Driver: "desc", Target: "known", CallerEnv: []string{"TOKEN"}},
	}
	g := catalogGateway(t, drv, tools, `@id("all") permit (principal, action, resource);`)
	got := map[string]string{}
	for _, e := range g.Catalog() {
		got[e.ID] = string(e.InputSchema)
	}
	want := map[string]string{
		"configured": `{"type":"object","properties":{"c":{"type":"string"}}}`,
		"described":  `{"type":"object","properties":{"d":{"type":"string"}},"additionalProperties":false}`,
		"unknown":    `{"type":"object"}`,
		"plain":      `{"type":"object"}`,
		"broken":     `{"type":"object"}`,
		"withenv": `{"additionalProperties":false,"properties":{"_env":{"additionalProperties":false,"description":"environment variables of the call",` +
			`"properties":{"TOKEN":{"type":"string"}},"type":"object"},"d":{"type":"string"}},"type":"object"}`,
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: schema %s, want %s", id, got[id], w)
		}
	}
}

func TestToolHintsComeFromTheDriverThenTags(t *testing.T) {
	t.Parallel()
	drv := map[string]drivers.Driver{
		"ro":  &describingDriver{hints: drivers.Hints{ReadOnly: true}},
		"del": &describingDriver{hints: drivers.Hints{Destructive: true}},
	}
	tools := map[string]Tool{
		"reads":         {Driver: "ro", Target: "x"},
		"deletes":       {Driver: "del", Target: "x"},
		"tagged":        {Driver: "del", Target: "x", Tags: []string{"read-only", "idempotent", "network"}},
		"tagged-delete": {Driver: "ro", Target: "x", Tags: []string{"destructive"}},
	}
	g := catalogGateway(t, drv, tools, `@id("all") permit (principal, action, resource);`)
	str := func(b *bool) string {
		if b == nil {
			return "-"
		}
		if *b {
			return "y"
		}
		return "n"
	}
	got := map[string]string{}
	for _, e := range g.Catalog() {
		h := e.Hints
		got[e.ID] = str(h.ReadOnly) + str(h.Destructive) + str(h.Idempotent) + str(h.OpenWorld)
	}
	want := map[string]string{"reads": "yn--", "deletes": "-y--", "tagged": "ynyy", "tagged-delete": "yy--"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: hints %s (read-only, destructive, idempotent, open-world), want %s", id, got[id], w)
		}
	}
}
