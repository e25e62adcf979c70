package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/redact"
)

// callerSecret is one environment value a caller hands a tool: args._env of
// a tool with caller_env, or the environment argument its driver names
// (drivers.Target.EnvArg: a workspace shell's args.env). It is a secret of
// the call, but one the caller chose, so it must not become a way to erase
// text from the call's own evidence: it is replaced in place in
// request.json and redacted from the tool's output only where it stands
// alone (redact.Redactor.Standalone), never from the gateway's own fields.
type callerSecret struct {
	arg, name, value string
}

// path returns the secret's JSON path in request.json.
func (s callerSecret) path() string {
	p := "$.args." + s.arg
	if ident.EnvName.MatchString(s.name) {
		return p + "." + s.name
	}
	return p + "[" + strconv.Quote(s.name) + "]"
}

// callerSecrets collects the environment values the caller hands the tool
// and refuses, before anything is recorded, a value too short or too common
// to be a secret (redact.CheckCallerSecret): such a value, redacted from
// the output, would erase ordinary words. The words the evidence of this
// call is made of (tool ids, driver names, the request's own ids, the
// decision words) count as common. The error names the variable, never the
// value.
func (g *Gateway) callerSecrets(caller string, c call, tool Tool, callerEnv map[string]string, params map[string]any) ([]callerSecret, error) {
	var out []callerSecret
	for _, name := range slices.Sorted(maps.Keys(callerEnv)) {
		out = append(out, callerSecret{arg: callerEnvArg, name: name, value: callerEnv[name]})
	}
	// The driver's environment argument is the caller's own, like
	// args._env; the driver checks its shape later, so only string values
	// are collected here.
	if arg := g.describe(tool).EnvArg; arg != "" && arg != callerEnvArg {
		if env, ok := params[arg].(map[string]any); ok {
			for _, name := range slices.Sorted(maps.Keys(env)) {
				if v, ok := env[name].(string); ok {
					out = append(out, callerSecret{arg: arg, name: name, value: v})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	reserved := append([]string{caller, c.ToolID, c.RequestID, c.RunID, c.StepID, c.PolicyRef, c.ParentRequestID,
		tool.Driver, tool.Target, tool.Package, tool.Version, g.engineBase, decisionWord(true), decisionWord(false)},
		g.catalogIDs()...)
	for name := range g.drivers {
		reserved = append(reserved, name)
	}
	for _, s := range out {
		if err := redact.CheckCallerSecret(s.value, reserved...); err != nil {
			return nil, invalidf("args.%s.%s: environment values are secrets of the call and must be at least %d bytes and not a common word: %v",
				s.arg, s.name, redact.MinCallerSecretLen, err)
		}
	}
	return out, nil
}

// hideCallerSecrets returns the arguments to record in request.json: args
// with each caller secret replaced by its marker, in place. Each replacement
// is reported in the manifest like any other redaction.
func (r *recorder) hideCallerSecrets(args map[string]any, secrets []callerSecret) (json.RawMessage, error) {
	shown := maps.Clone(args)
	marker := redact.Marker(redact.RuleCallerSecret)
	cloned := map[string]map[string]any{}
	for _, s := range secrets {
		inner, ok := cloned[s.arg]
		if !ok {
			orig, isMap := args[s.arg].(map[string]any)
			if !isMap {
				continue
			}
			inner = maps.Clone(orig)
			cloned[s.arg], shown[s.arg] = inner, inner
		}
		inner[s.name] = marker
		r.report.Add(evidence.Redaction{
			Rule: redact.RuleCallerSecret, Artifact: evidence.ArtifactRequest, Path: s.path(),
			Fingerprint: r.redactor.Fingerprint([]byte(s.value)),
		})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(shown); err != nil {
		return nil, fmt.Errorf("encode request.json args: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// redactOutput removes the caller's secrets from what the tool produced,
// where they stand alone, and records the findings for tool_result.json
// and response.json, which both carry that output. The artifacts are
// redacted as a whole afterwards, as every artifact is.
func (r *recorder) redactOutput(res drivers.Result) (drivers.Result, error) {
	if r.output == nil {
		return res, nil
	}
	note := func(findings []redact.Finding, field string, inResponse bool) {
		for _, f := range findings {
			path := "$." + field + f.Path[min(1, len(f.Path)):]
			r.report.Add(evidence.Redaction{Rule: f.Rule, Artifact: evidence.ArtifactToolResult, Path: path, Offset: f.Offset, Fingerprint: f.Fingerprint})
			if inResponse {
				r.report.Add(evidence.Redaction{Rule: f.Rule, Artifact: evidence.ArtifactResponse, Path: "$.tool_result." + path[2:], Offset: f.Offset, Fingerprint: f.Fingerprint})
			}
		}
	}
	var findings []redact.Finding
	res.Stdout, findings = r.output.String(res.Stdout)
	note(findings, "stdout", true)
	res.Stderr, findings = r.output.String(res.Stderr)
	note(findings, "stderr", true)
	var err error
	if res.Data, findings, err = r.redactOutputValue(res.Data); err != nil {
		return res, fmt.Errorf("tool_result.data: %w", err)
	}
	note(findings, "data", true)
	if res.Evidence != nil {
		var ev any
		if ev, findings, err = r.redactOutputValue(res.Evidence); err != nil {
			return res, fmt.Errorf("tool_result.evidence: %w", err)
		}
		res.Evidence, _ = ev.(map[string]any)
		note(findings, "evidence", false)
	}
	return res, nil
}

// redactOutputValue passes a driver's structured output through the
// caller-secret redactor by way of JSON, the form drivers promise it has.
func (r *recorder) redactOutputValue(v any) (any, []redact.Finding, error) {
	if v == nil {
		return nil, nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	out, findings, err := r.output.JSON("", raw)
	if err != nil || len(findings) == 0 {
		return v, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var redacted any
	if err := dec.Decode(&redacted); err != nil {
		return nil, nil, err
	}
	return redacted, findings, nil
}
