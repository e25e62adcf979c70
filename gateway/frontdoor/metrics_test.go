package frontdoor_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/telemetry/telemetrytest"
)

// TestPlumbingCountsOversizedBodiesAndTimesAuth: whichever way a door
// meets a body over its cap (the plumbing's cap ending its read, or its
// own lower cap and a 413), the request counts once as a
// max_request_bytes limit hit; a request within the cap, and one without
// a key whose body is never read, count none. Every request's
// authentication is one auth stage observation.
func TestPlumbingCountsOversizedBodiesAndTimesAuth(t *testing.T) {
	auth, err := callerauth.New([]config.KeyConfig{{Caller: "alice", Env: "ALICE_KEY"}},
		func(name string) string { return map[string]string{"ALICE_KEY": "k-alice"}[name] })
	if err != nil {
		t.Fatal(err)
	}
	readAll := func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest) // as a door that does not say 413
		}
	}
	ownCap := func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 10)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}
	}
	readTwice := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.ReadAll(r.Body)
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		key     string
		body    int
		hits    float64
	}{
		{"a body within the cap", readAll, "k-alice", 100, 0},
		{"a body over the plumbing's cap, answered 400 by the door", readAll, "k-alice", 101, 1},
		{"a body over the door's own lower cap, answered 413", ownCap, "k-alice", 50, 1},
		{"a body over both caps, read twice and answered 413", readTwice, "k-alice", 500, 1},
		{"a body without a key is never read", readAll, "", 10_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := telemetry.New(telemetry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := frontdoor.Plumbing{Keys: frontdoor.Keys(auth), MaxBodyBytes: 100, Telemetry: tel}.Wrap(tc.handler)
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/door", strings.NewReader(strings.Repeat("x", tc.body)))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if got := telemetrytest.Value(t, tel.Registry(), telemetry.MetricLimitHits, "limit="+telemetry.LimitMaxRequestBytes); got != tc.hits {
				t.Errorf("max_request_bytes hits: %v, want %v", got, tc.hits)
			}
			if got := telemetrytest.Value(t, tel.Registry(), telemetry.MetricStageDuration, "stage=auth"); got != 1 {
				t.Errorf("auth stage observations: %v, want 1", got)
			}
		})
	}
}
