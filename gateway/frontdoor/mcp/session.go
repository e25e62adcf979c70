package mcpdoor

import (
	"context"
	"net/http"
)

// A call's session, for the policies that decide on history, is its
// ctx.run_id: _meta runId when the client gives one (the orchestrator's
// run); else the MCP session the call came in, named "mcp-session:<id>"
// from the Mcp-Session-Id header, so that one MCP session is one history
// session; else none, and the gateway keeps one session per caller.

// sessionRunPrefix marks a run id the door made from an MCP session.
const sessionRunPrefix = "mcp-session:"

// maxSessionID bounds the Mcp-Session-Id the door takes as a session.
const maxSessionID = 128

type sessionKey struct{}

// withSession returns r carrying its Mcp-Session-Id, when it is one MCP
// allows (visible ASCII) and not overlong; otherwise r as is.
func withSession(r *http.Request) *http.Request {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" || len(id) > maxSessionID {
		return r
	}
	for i := range len(id) {
		if id[i] < 0x21 || id[i] > 0x7e {
			return r
		}
	}
	return r.WithContext(context.WithValue(r.Context(), sessionKey{}, id))
}

// sessionRunID is the run id of a call whose _meta gave runID: runID, else
// the MCP session's, else "".
func sessionRunID(ctx context.Context, runID string) string {
	if runID != "" {
		return runID
	}
	if id, ok := ctx.Value(sessionKey{}).(string); ok {
		return sessionRunPrefix + id
	}
	return ""
}
