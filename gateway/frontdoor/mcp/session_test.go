package mcpdoor

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSessionRunID: _meta runId wins; else the MCP session names the
// history session; else the caller's own (no run id). A header MCP does
// not allow is not taken.
func TestSessionRunID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header, meta, want string
	}{
		{name: "runId given", header: "s1", meta: "run-7", want: "run-7"},
		{name: "MCP session", header: "s1", want: "mcp-session:s1"},
		{name: "neither", want: ""},
		{name: "a space in the session id", header: "s 1", want: ""},
		{name: "an overlong session id", header: strings.Repeat("a", maxSessionID+1), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequestWithContext(context.Background(), "POST", "/mcp", nil)
			if tt.header != "" {
				r.Header.Set("Mcp-Session-Id", tt.header)
			}
			if got := sessionRunID(withSession(r).Context(), tt.meta); got != tt.want {
				t.Errorf("run id %q, want %q", got, tt.want)
			}
		})
	}
}
