package browse

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// hostile is tool output, and store-written fields, that would run script
// if a page put it in as markup.
const hostile = `<img src=x onerror=alert(1)><script>alert(2)</script></pre><svg onload=alert(3)>`

// assertText fails if body holds any of the hostile markup unescaped.
func assertText(t *testing.T, body string) {
	t.Helper()
	for _, raw := range []string{"<img src=x", "<script>alert", "<svg onload", "onerror=alert(1)>"} {
		if strings.Contains(body, raw) {
			t.Fatalf("page holds %q unescaped:\n%s", raw, body)
		}
	}
	if !strings.Contains(body, "&lt;script&gt;alert(2)&lt;/script&gt;") && !strings.Contains(body, `\u003cscript\u003e`) {
		t.Fatalf("page does not show the hostile output as text")
	}
}

func TestHostileEvidenceRendersAsText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "xss-1", caller: "eve" + hostile, tool: "workspace.readFile", runID: "run-x", rule: "r" + hostile,
		reason: hostile, stdout: hostile + " [REDACTED:aws-key] tail"})
	c := f.serve(t, Options{})
	pages := []string{"/requests", "/requests/xss-1", "/runs/run-x", "/requests?caller=" + url.QueryEscape(hostile)}
	for _, p := range pages {
		t.Run(p, func(t *testing.T) {
			resp, body := c.get(p)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d\n%s", p, resp.StatusCode, body)
			}
			if p == "/requests?caller="+url.QueryEscape(hostile) {
				if strings.Contains(body, "<script>alert") {
					t.Fatal("the filter echoes markup")
				}
				return
			}
			assertText(t, body)
		})
	}
	_, body := c.get("/requests/xss-1")
	if !strings.Contains(body, `<mark class="redacted">[REDACTED:aws-key]</mark>`) {
		t.Fatalf("the redaction marker is not highlighted:\n%s", body)
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "r1", caller: "alice", tool: "workspace.readFile"})
	c := f.serve(t, Options{})
	for _, p := range []string{"/requests", "/requests/r1", "/requests/nope", "/static/console.js", "/static/console.css", "/verify", "/requests/r1/proof"} {
		t.Run(p, func(t *testing.T) {
			resp, _ := c.get(p)
			csp := resp.Header.Get("Content-Security-Policy")
			for _, want := range []string{"frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) && !strings.Contains(csp, "sandbox") {
					t.Errorf("CSP %q lacks %q", csp, want)
				}
			}
			if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
				t.Errorf("CSP %q allows inline or foreign script", csp)
			}
			if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("framing or sniffing allowed: %v", resp.Header)
			}
		})
	}
}

func TestPagesHaveNoInlineScriptOrStyle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "r1", caller: "alice", tool: "workspace.readFile", runID: "run-1"})
	c := f.serve(t, Options{})
	for _, p := range []string{"/requests", "/requests/r1", "/runs/run-1", "/verify"} {
		_, body := c.get(p)
		for _, bad := range []string{"<script>", "style=", "<style", "onclick", "onload", "javascript:"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s holds %q", p, bad)
			}
		}
	}
}

func TestPostsNeedTheSessionsCSRFTokenAndTheSameOrigin(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "r1", caller: "alice", tool: "workspace.readFile"})
	c := f.serve(t, Options{})
	c.get("/verify") // starts the session, reads the token
	if c.csrf == "" {
		t.Fatal("the verify page carries no CSRF token")
	}
	tests := []struct {
		name   string
		form   url.Values
		header http.Header
		want   int
	}{
		{name: "no token", form: url.Values{}, want: http.StatusForbidden},
		{name: "a wrong token", form: url.Values{"csrf": {strings.Repeat("A", len(c.csrf))}}, want: http.StatusForbidden},
		{name: "another site's page", form: url.Values{"csrf": {c.csrf}}, header: http.Header{"Origin": {"https://evil.example"}}, want: http.StatusForbidden},
		{name: "a cross-site fetch", form: url.Values{"csrf": {c.csrf}}, header: http.Header{"Sec-Fetch-Site": {"cross-site"}}, want: http.StatusForbidden},
		{name: "an opaque origin", form: url.Values{"csrf": {c.csrf}}, header: http.Header{"Origin": {"null"}}, want: http.StatusForbidden},
		{name: "the session's own form", form: url.Values{"csrf": {c.csrf}}, header: http.Header{"Sec-Fetch-Site": {"same-origin"}}, want: http.StatusSeeOther},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := c.do(http.MethodPost, "/verify", tc.form, tc.header)
			if resp.StatusCode != tc.want {
				t.Fatalf("POST /verify: %d, want %d\n%s", resp.StatusCode, tc.want, body)
			}
		})
	}
}

func TestSignInCookieAndWhoSeesWhat(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "alice-1", caller: "alice", tool: "workspace.readFile", runID: "shared"})
	f.add(t, call{id: "bob-1", caller: "bob", tool: "workspace.readFile", runID: "shared"})
	acc := fakeAccess{keys: map[string]string{"k-alice": "alice"}, readable: map[string][]string{"alice": {"alice"}}}
	c := f.serve(t, Options{Access: acc})

	if resp, _ := c.get("/requests"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/signin" {
		t.Fatalf("unsigned GET /requests: %d %s, want a redirect to /signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := c.do(http.MethodPost, "/signin", url.Values{"key": {"wrong"}}, nil); resp.StatusCode != http.StatusUnauthorized || c.cookie != "" {
		t.Fatalf("a wrong key: %d, cookie %q", resp.StatusCode, c.cookie)
	}
	resp, _ := c.do(http.MethodPost, "/signin", url.Values{"key": {"k-alice"}}, nil)
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == CookieName {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict, Path=/", ck)
	}
	if strings.Contains(ck.Value, "k-alice") {
		t.Fatal("the cookie carries the API key")
	}
	_, body := c.get("/requests")
	if !strings.Contains(body, "alice-1") || strings.Contains(body, "bob-1") {
		t.Fatalf("alice's listing: want her call only:\n%s", body)
	}
	for _, p := range []string{"/requests/bob-1", "/requests/bob-1/proof", "/requests/..%2F..%2Fetc", "/requests/bob-1%2Fmanifest.json"} {
		if resp, body := c.get(p); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "workspace.readFile") {
			t.Errorf("GET %s: %d, want 404 without its evidence", p, resp.StatusCode)
		}
	}
	if _, body := c.get("/runs/shared"); strings.Contains(body, "bob-1") {
		t.Error("the run page shows a call alice may not read")
	}
	c.post("/signout", nil)
	if resp, _ := c.get("/requests"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d, want a redirect", resp.StatusCode)
	}
}

func TestSessionsExpire(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := newSessions(time.Hour, 2, clock)
	tok, _, err := s.create(Person{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(&http.Cookie{Name: CookieName, Value: tok})
	if _, _, ok := s.get(r); !ok {
		t.Fatal("a fresh session is not found")
	}
	if _, _, err := s.create(Person{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.create(Person{Name: "c"}); err == nil {
		t.Fatal("a full table of live sessions took one more")
	}
	now = now.Add(time.Hour)
	if _, _, ok := s.get(r); ok {
		t.Fatal("an expired session is still valid")
	}
	if _, _, err := s.create(Person{Name: "c"}); err != nil {
		t.Fatalf("expired sessions were not dropped: %v", err)
	}
	// A token's expiry ends its session first.
	tok, _, err = s.create(Person{Name: "d", Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := http.NewRequest(http.MethodGet, "/", nil)
	r2.AddCookie(&http.Cookie{Name: CookieName, Value: tok})
	now = now.Add(time.Minute)
	if _, _, ok := s.get(r2); ok {
		t.Fatal("a session outlived the token it came from")
	}
}

func TestTamperedRequestIsFlagged(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "good", caller: "alice", tool: "workspace.readFile"})
	f.add(t, call{id: "bad", caller: "alice", tool: "workspace.readFile", tamper: true})
	c := f.serve(t, Options{})
	tests := []struct{ id, want string }{
		{"good", `id="verdict">` + "\n  Verified"},
		{"bad", `id="verdict">` + "\n  Tampered with: mismatch"},
	}
	for _, tc := range tests {
		_, body := c.get("/requests/" + tc.id)
		if !strings.Contains(body, tc.want) {
			t.Errorf("%s: want %q in\n%s", tc.id, tc.want, body)
		}
	}
}

func TestVerifyPageRunsVerifyAllAndReports(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 5 {
		f.add(t, call{id: fmt.Sprintf("r%d", i), caller: "alice", tool: "workspace.readFile"})
	}
	f.add(t, call{id: "tampered", caller: "alice", tool: "workspace.readFile", tamper: true})
	c := f.serve(t, Options{})
	c.get("/verify")
	if resp, _ := c.post("/verify", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, body = c.get("/verify"); strings.Contains(body, "Finished") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(body, "6 of about 6 requests checked") || !strings.Contains(body, "1 failed (1 tampered with)") {
		t.Fatalf("verify page:\n%s", body)
	}
	resp, report := c.get("/verify/report")
	if resp.Header.Get("Content-Disposition") == "" || strings.Count(report, "\n") != 6 || !strings.Contains(report, `"verdict":"mismatch"`) {
		t.Fatalf("report %v:\n%s", resp.Header, report)
	}
}

func TestApprovalArgumentsAreFoldedNeverCut(t *testing.T) {
	t.Parallel()
	long := `"` + strings.Repeat("é", 300) + `<script>"`
	got := foldArgs([]byte(`{"b":` + long + `,"a":1}`))
	if len(got) != 2 || got[0].Path != "a" || got[1].Path != "b" {
		t.Fatalf("args %+v", got)
	}
	b := got[1]
	if !b.Long || b.Value != long || len(b.Head)+b.Rest != len(long) || !strings.HasPrefix(long, b.Head) {
		t.Fatalf("folded %+v: the whole value must stay, its head a prefix", b)
	}
}

func TestIndexQueryFiltersAndPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 120 {
		caller := "alice"
		if i%3 == 0 {
			caller = "bob"
		}
		f.add(t, call{id: fmt.Sprintf("req-%03d", i), caller: caller, tool: "workspace.readFile", runID: fmt.Sprintf("run-%d", i%4), at: base.Add(time.Duration(i) * time.Minute)})
	}
	x := NewIndex(f.store, nil)
	if err := x.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := func(*Summary) bool { return true }
	tests := []struct {
		name  string
		f     Filter
		first string
		n     int
		next  bool
	}{
		{name: "newest first, pages of 50", f: Filter{Limit: 50}, first: "req-119", n: 50, next: true},
		{name: "the next page", f: Filter{Limit: 50, After: "req-070"}, first: "req-069", n: 50, next: true},
		{name: "by caller", f: Filter{Limit: 50, Caller: "bob"}, first: "req-117", n: 40},
		{name: "by run", f: Filter{Limit: 50, RunID: "run-1"}, first: "req-117", n: 30},
		{name: "free text", f: Filter{Limit: 50, Query: "-11"}, first: "req-119", n: 10},
		{name: "time range", f: Filter{Limit: 50, From: base.Add(10 * time.Minute), To: base.Add(20 * time.Minute)}, first: "req-019", n: 10},
		{name: "state", f: Filter{Limit: 50, State: "completed", Decision: "allow", Rule: "workspace_read_only", Tool: "workspace.readFile"}, first: "req-119", n: 50, next: true},
		{name: "nothing", f: Filter{Limit: 50, Decision: "deny"}, n: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := x.Query(tc.f, all)
			if len(p.Rows) != tc.n || (tc.n > 0 && p.Rows[0].ID != tc.first) || (p.Next != "") != tc.next {
				first := ""
				if len(p.Rows) > 0 {
					first = p.Rows[0].ID
				}
				t.Fatalf("%d rows from %q, next %q; want %d from %q, next %v", len(p.Rows), first, p.Next, tc.n, tc.first, tc.next)
			}
		})
	}
}

// countingStore counts the listings of a store.
type countingStore struct {
	*evidence.MemoryStore
	lists atomic.Int64
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]string, error) {
	c.lists.Add(1)
	return c.MemoryStore.List(ctx, prefix)
}

func (c *countingStore) Walk(ctx context.Context, prefix string, fn func(string) error) error {
	c.lists.Add(1)
	return c.MemoryStore.Walk(ctx, prefix, fn)
}

func TestMadeUpIDsDoNotListTheStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "r1", caller: "alice", tool: "workspace.readFile"})
	store := &countingStore{MemoryStore: f.store}
	index := NewIndex(store, nil)
	if err := index.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Options{Store: store, Index: index})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	before := store.lists.Load()
	for i := range 20 {
		resp, err := http.Get(fmt.Sprintf("%s/requests/made-up-%d", ts.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("a made-up id: %d", resp.StatusCode)
		}
	}
	if n := store.lists.Load() - before; n != 0 {
		t.Fatalf("20 made-up ids listed the store %d times", n)
	}
}

func TestSlowDecisionsEndThePageInTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 600 {
		f.add(t, call{id: fmt.Sprintf("r%03d", i), caller: "alice", tool: "workspace.readFile", at: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)})
	}
	x := NewIndex(f.store, nil)
	if err := x.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	slow := func(*Summary) bool { time.Sleep(time.Millisecond); return false }
	p := x.Query(Filter{Limit: 50, Deadline: time.Now().Add(50 * time.Millisecond)}, slow)
	if !p.Partial || p.Next == "" || p.Scanned >= 600 || p.Scanned == 0 {
		t.Fatalf("page %+v: want a partial page that goes on", p)
	}
	rest := x.Query(Filter{Limit: 50, After: p.Next}, func(*Summary) bool { return true })
	if len(rest.Rows) == 0 || rest.Rows[0].ID != fmt.Sprintf("r%03d", 599-p.Scanned) {
		t.Fatalf("the next page starts at %v, want right after the %d scanned", rest.Rows, p.Scanned)
	}
}

func TestVerifyReportShowsOnlyWhatThePersonMayRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.add(t, call{id: "alice-1", caller: "alice", tool: "workspace.readFile"})
	f.add(t, call{id: "bob-bad", caller: "bob", tool: "workspace.readFile", tamper: true})
	acc := fakeAccess{keys: map[string]string{"k-alice": "alice"}, readable: map[string][]string{"alice": {"alice"}}}
	c := f.serve(t, Options{Access: acc})
	c.do(http.MethodPost, "/signin", url.Values{"key": {"k-alice"}}, nil)
	c.get("/verify")
	if resp, _ := c.post("/verify", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, body = c.get("/verify"); strings.Contains(body, "Finished") {
			break
		}
	}
	if strings.Contains(body, "bob-bad") {
		t.Fatalf("the verify page names a request alice may not read:\n%s", body)
	}
	_, report := c.get("/verify/report")
	if !strings.Contains(report, "alice-1") || strings.Contains(report, "bob-bad") {
		t.Fatalf("alice's report:\n%s", report)
	}
}

func TestFailedSignInsAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acc := fakeAccess{keys: map[string]string{"k-alice": "alice"}, readable: map[string][]string{"alice": {"alice"}}}
	c := f.serve(t, Options{Access: acc})
	for i := range 10 {
		if resp, _ := c.do(http.MethodPost, "/signin", url.Values{"key": {fmt.Sprintf("guess-%d", i)}}, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", i, resp.StatusCode)
		}
	}
	if resp, _ := c.do(http.MethodPost, "/signin", url.Values{"key": {"k-alice"}}, nil); resp.StatusCode != http.StatusTooManyRequests || c.cookie != "" {
		t.Fatalf("the eleventh try, with the right key: %d, want 429 and no session", resp.StatusCode)
	}
}

func TestThrottleWindowEndsAndTableStaysBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th := newSignInThrottle(func() time.Time { return now })
	th.maxAddrs = 3
	for range 10 {
		th.failed("a")
	}
	if th.allowed("a") || !th.allowed("b") {
		t.Fatal("a should be locked out, b not")
	}
	now = now.Add(time.Minute)
	if !th.allowed("a") {
		t.Fatal("the window ended, a is still locked out")
	}
	for i := range 10 {
		th.failed(fmt.Sprintf("addr-%d", i))
	}
	if len(th.byAddr) > 3 {
		t.Fatalf("%d addresses held, want at most 3", len(th.byAddr))
	}
}
