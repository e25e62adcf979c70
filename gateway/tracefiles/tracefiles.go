// Package tracefiles keeps drivers' local traces on the gateway host, one
// redacted JSONL file per request. It never imports gateway.
package tracefiles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/internal/ident"
	"github.com/toolgate/toolgate/redact"
)

// New returns the trace writer of the folder dir, redacting with redactor.
func New(dir string, redactor *redact.Redactor) drivers.TraceWriter {
	return &traceFiles{dir: dir, redactor: redactor}
}

// traceFiles keeps a driver's local trace: one JSONL file per request,
// <dir>/<request_id>.jsonl, each line one redacted exchange. Traces stay on
// the gateway host; their paths go to local_evidence_paths, never to
// evidence_refs.
type traceFiles struct {
	dir      string
	redactor *redact.Redactor
	mu       sync.Mutex // one writer at a time keeps lines whole
}

// Write appends t, redacted, to its request's trace file. The environment
// values in the request are secrets of that call, so they are redacted
// wherever they appear in the trace, echoed responses included.
func (w *traceFiles) Write(t drivers.Trace) (string, error) {
	if !ident.RequestID.MatchString(t.RequestID) {
		return "", fmt.Errorf("trace: request id %q cannot name a file", t.RequestID)
	}
	if values := traceEnvValues(t); len(values) > 0 {
		t = hideTraceEnv(t)
		out := w.redactor.Standalone(values...)
		t.Response, _ = out.String(t.Response)
		t.Error, _ = out.String(t.Error)
	}
	raw, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	redacted, _, err := w.redactor.JSON("trace", raw)
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	var line bytes.Buffer
	if err := json.Compact(&line, redacted); err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	line.WriteByte('\n')

	path := filepath.Join(w.dir, t.RequestID+".jsonl")
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	_, err = f.Write(line.Bytes())
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return "", fmt.Errorf("trace: %w", err)
	}
	return path, nil
}

// hideTraceEnv returns t with the environment values of its request
// replaced by a marker in place. The gateway's own values are known
// secrets everywhere anyway; a caller's are hidden here and, where they
// stand alone, in the exchange's response and error, never elsewhere (see
// the gateway's callerSecret).
func hideTraceEnv(t drivers.Trace) drivers.Trace {
	t.Request = maps.Clone(t.Request)
	marker := redact.Marker(redact.RuleKnownSecret)
	switch env := t.Request["env"].(type) {
	case map[string]any:
		hidden := make(map[string]any, len(env))
		for k := range env {
			hidden[k] = marker
		}
		t.Request["env"] = hidden
	case map[string]string:
		hidden := make(map[string]string, len(env))
		for k := range env {
			hidden[k] = marker
		}
		t.Request["env"] = hidden
	}
	return t
}

// traceEnvValues returns the environment values a traced request carried.
func traceEnvValues(t drivers.Trace) []string {
	env, _ := t.Request["env"].(map[string]any)
	var values []string
	for _, v := range env {
		if s, ok := v.(string); ok {
			values = append(values, s)
		}
	}
	if env2, ok := t.Request["env"].(map[string]string); ok {
		for _, v := range env2 {
			values = append(values, v)
		}
	}
	return values
}
