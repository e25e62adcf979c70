package tpmjs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Probe limits.
const (
	maxProbeBody    = 64 << 10 // bytes read of a /health or /info answer
	maxEngineName   = 48
	maxEngineVer    = 32
	maxAdvertised   = 24 * time.Hour // larger advertised limits are ignored as bogus
	engineUnknown   = "tpmjs"
	enginePrefix    = "tpmjs:"
	defaultExecName = "executor"
)

// probeLoop probes the executor now and then every probe interval until ctx
// ends.
func (d *Driver) probeLoop(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(d.probeInterval)
	defer t.Stop()
	for {
		d.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe asks /health and /info once and records what they tell. Failures
// are logged and otherwise ignored: what an earlier probe learned stays.
func (d *Driver) probe(ctx context.Context) {
	body, err := d.get(ctx, d.healthURL)
	if ctx.Err() == nil {
		d.noteProbe(time.Now(), err)
	}
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("tpmjs health probe failed", "driver", d.name, "error", err)
		}
	} else if engine, protocol, ok := engineFromHealth(body); ok {
		d.mu.Lock()
		d.healthEngine = engine
		if protocol != "" {
			d.executorProtocol = protocol
		}
		d.mu.Unlock()
	}

	body, err = d.get(ctx, d.infoURL)
	if err != nil {
		// /info is optional in the protocol; the Deno executor has none.
		if ctx.Err() == nil {
			d.log.Debug("tpmjs info probe failed", "driver", d.name, "error", err)
		}
		return
	}
	engine, maxExec, ok := parseInfo(body)
	if !ok {
		return
	}
	fields, _ := decodeObject(body)
	d.mu.Lock()
	if engine != "" {
		d.infoEngine = engine
	}
	if protocol := protocolOf(fields); protocol != "" {
		d.executorProtocol = protocol
	}
	if maxExec > 0 {
		d.advertisedMax = maxExec
	}
	d.mu.Unlock()
}

// get fetches one probe URL within the health timeout and returns the body
// of a 200 answer.
func (d *Driver) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d.healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	d.setHeaders(req.Header)
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return body, nil
}

// engineFromHealth derives an engine name and the advertised protocol
// version from a /health answer. /health names no executor, only its
// runtime and version, each in the executor's own fields: "runtime" and
// "implementationVersion" (protocol 1.0, the Node templates),
// "denoVersion" and "implementationVersion" (the 1.1 Deno executor), or
// "info": {"runtime"} and "version" (the Deno form of the Vercel template).
func engineFromHealth(body []byte) (engine, protocol string, ok bool) {
	fields, err := decodeObject(body)
	if err != nil {
		return "", "", false
	}
	var info struct {
		Runtime json.RawMessage `json:"runtime"`
	}
	if raw, ok := fields["info"]; ok {
		_ = json.Unmarshal(raw, &info) // an "info" that is no object names nothing
	}
	runtime := stringField(fields["runtime"])
	if runtime == "" {
		runtime = stringField(info.Runtime)
	}
	if runtime == "" && len(fields["denoVersion"]) > 0 {
		runtime = "deno"
	}
	version := stringField(fields["implementationVersion"])
	if version == "" {
		version = stringField(fields["version"])
	}
	name := defaultExecName
	if r := slug(runtime, maxEngineName-len("-executor")); r != "" {
		name = r + "-executor"
	}
	return engineRef(name, version), protocolOf(fields), true
}

// protocolOf returns an answer's "protocolVersion" when it is a short
// version such as "1.0", or "".
func protocolOf(fields map[string]json.RawMessage) string {
	v := stringField(fields["protocolVersion"])
	if v == "" || len(v) > 16 || slug(v, 16) != v {
		return ""
	}
	return v
}

// parseInfo reads the executor's name, version and advertised maximum
// execution time from an /info answer. engine is empty when the answer names
// no executor and maxExec zero when it advertises no usable limit.
func parseInfo(body []byte) (engine string, maxExec time.Duration, ok bool) {
	fields, err := decodeObject(body)
	if err != nil {
		return "", 0, false
	}
	var caps struct {
		MaxExecutionTimeMs json.Number `json:"maxExecutionTimeMs"`
	}
	if raw, ok := fields["capabilities"]; ok && json.Unmarshal(raw, &caps) == nil {
		if ms, err := caps.MaxExecutionTimeMs.Float64(); err == nil && ms >= 1 && ms <= float64(maxAdvertised/time.Millisecond) {
			maxExec = time.Duration(ms * float64(time.Millisecond))
		}
	}
	// An /info without a name says nothing about the engine; keep what
	// /health told instead of replacing it with a generic name.
	if name := stringField(fields["name"]); slug(name, maxEngineName) != "" {
		engine = engineRef(name, stringField(fields["version"]))
	}
	return engine, maxExec, true
}

// engineRef composes "tpmjs:NAME/VERSION" from untrusted text: both parts
// are reduced to short lowercase slugs, so the result never contains spaces,
// control characters or anything else a log or evidence file must escape.
func engineRef(name, version string) string {
	n := slug(name, maxEngineName)
	if n == "" {
		n = defaultExecName
	}
	ref := enginePrefix + n
	if v := slug(version, maxEngineVer); v != "" {
		ref += "/" + v
	}
	return ref
}

// slug lowercases s, keeps a-z, 0-9, ".", "+" and "-", turns every other
// run of characters into a single "-", trims separators at both ends and
// keeps at most limit bytes.
func slug(s string, limit int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '.', r == '+':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
		if b.Len() >= limit {
			break
		}
	}
	out := b.String()
	if len(out) > limit {
		out = out[:limit]
	}
	return strings.Trim(out, "-.+")
}
