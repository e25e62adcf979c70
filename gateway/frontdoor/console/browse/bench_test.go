package browse

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// benchRequests is how many requests the benchmarks' store holds.
const benchRequests = 100_000

var benchStore = sync.OnceValues(func() (*evidence.MemoryStore, error) {
	ctx := context.Background()
	s := evidence.NewMemoryStore()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range benchRequests {
		id := fmt.Sprintf("req-%06d", i)
		at := base.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano)
		arts := map[string]string{
			evidence.ArtifactRequest: fmt.Sprintf(`{"request_id":%q,"caller":"caller-%d","tool_id":"workspace.readFile","args":{},`+
				`"ctx":{"run_id":"run-%d","step_id":"","policy_ref":"policy.default"},"received_at":%q}`, id, i%10, i%1000, at),
			evidence.ArtifactPolicyDecision: fmt.Sprintf(`{"request_id":%q,"caller":"caller-%d","tool_id":"workspace.readFile",`+
				`"driver":"workspace","decision":"allow","rule_id":"read","reason":"r","decided_at":%q}`, id, i%10, at),
			evidence.ArtifactResponse: `{"ok":true,"policy_check":{"decision":"allow","reason":"r"},"evidence_refs":[],"engine_ref":"e"}`,
			evidence.ArtifactManifest: fmt.Sprintf(`{"version":1,"request_id":%q,"outcome":"completed","artifacts":[],"redactions":[]}`, id),
		}
		for name, data := range arts {
			if err := s.Put(ctx, evidence.Key(id, name), []byte(data)); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
})

// benchConsole is a read-only console over benchStore with its index
// built, and the cookie of one session.
var benchConsole = sync.OnceValues(func() (http.Handler, error) {
	store, err := benchStore()
	if err != nil {
		return nil, err
	}
	index := NewIndex(store, nil)
	if err := index.Refresh(context.Background()); err != nil {
		return nil, err
	}
	srv, err := NewServer(Options{Store: store, Index: index})
	if err != nil {
		return nil, err
	}
	return srv.Handler(), nil
})

// BenchmarkRequestsPage is the requests page at 100,000 requests: the
// index's scan for one page of 50 and its rendering, as the browser gets
// it. BenchmarkBareListing, on the same store in the same run, is the
// baseline: one listing of the store's request keys, less than any page
// without an index would cost (it would then read and sort every
// request.json).
func BenchmarkRequestsPage(b *testing.B) {
	h, err := benchConsole()
	if err != nil {
		b.Fatal(err)
	}
	cookie := sessionFor(b, h)
	for _, bc := range []struct{ name, query string }{
		{"newest", ""},
		{"caller", "?caller=caller-7"},
		{"run", "?run=run-999"},
		{"text", "?q=req-0999"},
		{"deep_page", "?after=req-000100"},
		{"no_match", "?caller=nobody"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/requests"+bc.query, nil)
			req.Header.Set("Cookie", cookie)
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET /requests%s: %d", bc.query, rec.Code)
				}
			}
		})
	}
}

// sessionFor starts a read-only session and returns its cookie header.
func sessionFor(b *testing.B, h http.Handler) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/requests", nil))
	for _, c := range rec.Result().Cookies() {
		if c.Name == CookieName {
			return CookieName + "=" + c.Value
		}
	}
	b.Fatal("no session cookie")
	return ""
}

// BenchmarkBareListing lists the request keys of the benchmarks' store
// (see BenchmarkRequestsPage).
func BenchmarkBareListing(b *testing.B) {
	store, err := benchStore()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		keys, err := store.List(context.Background(), "requests/")
		if err != nil || len(keys) != 4*benchRequests {
			b.Fatalf("%d keys, %v", len(keys), err)
		}
	}
}

// BenchmarkIndexRefresh is one refresh of the index when nothing changed:
// what keeping it current costs the console every interval.
func BenchmarkIndexRefresh(b *testing.B) {
	store, err := benchStore()
	if err != nil {
		b.Fatal(err)
	}
	x := NewIndex(store, nil)
	if err := x.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := x.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
