package frontdoor_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// fixedKeys is a KeyChecker with one key, so the benchmark measures the
// plumbing rather than SHA-256.
type fixedKeys struct{}

func (fixedKeys) Enabled() bool { return true }
func (fixedKeys) CallerForKey(key string) (string, bool) {
	return "alice", key == "k"
}

// BenchmarkPlumbing is the cost the plumbing adds to a request, in
// process: a bare mux against the same mux behind Wrap, with the key in
// the path.
func BenchmarkPlumbing(b *testing.B) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /execute-tool", func(w http.ResponseWriter, r *http.Request) {
		frontdoor.CallerFrom(r.Context())
		w.WriteHeader(http.StatusOK)
	})
	wrapped := frontdoor.Plumbing{Keys: fixedKeys{}}.Wrap(mux)
	for _, bc := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"bare-mux", mux, "/execute-tool"},
		{"plumbing-path-key", wrapped, "/k/k//execute-tool"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest("POST", "http://127.0.0.1:8787"+bc.path, strings.NewReader("{}"))
				rec := httptest.NewRecorder()
				bc.h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}
