package frontdoor_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// TestPlumbingCarriesTheCallersTraceContext: every door's request context
// holds the W3C trace context of its headers, the parent of the call's
// span; one a caller got wrong is ignored and the request served.
func TestPlumbingCarriesTheCallersTraceContext(t *testing.T) {
	auth, err := callerauth.New(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, traceparent, want string }{
		{"a valid traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"none", "", ""},
		{"a malformed one", "00-not-hex-01", ""},
		{"an oversized one", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + strings.Repeat("-0", 2000), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, served := "unset", false
			h := frontdoor.Plumbing{Keys: frontdoor.Keys(auth)}.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, served = telemetry.TraceID(r.Context()), true
			}))
			req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/echo", nil)
			if tc.traceparent != "" {
				req.Header.Set("traceparent", tc.traceparent)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if !served || got != tc.want {
				t.Fatalf("served %v, trace id %q, want %q", served, got, tc.want)
			}
		})
	}
}
