package mcpdoor

import (
	"regexp"
	"strings"
)

// MetaTraceParent is the _meta key of W3C trace context MCP reserves.
const MetaTraceParent = "traceparent"

// traceParentPattern is W3C trace context version 00.
var traceParentPattern = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// traceFromMeta is the call's traceparent when well formed, else "": a
// malformed one is dropped, never an error, as W3C asks of a receiver.
// The all-zero trace and span ids are invalid.
func traceFromMeta(meta map[string]any) string {
	tp, ok := meta[MetaTraceParent].(string)
	if !ok || !traceParentPattern.MatchString(tp) {
		return ""
	}
	if tp[3:35] == strings.Repeat("0", 32) || tp[36:52] == strings.Repeat("0", 16) {
		return ""
	}
	return tp
}
