package browse

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// call describes one request the tests store.
type call struct {
	id, caller, tool, runID, parent, decision, rule, reason, stdout string
	at                                                              time.Time
	// tamper stores another tool_result.json than the manifest lists.
	tamper bool
}

// fixture is a signed store of calls.
type fixture struct {
	store  *evidence.MemoryStore
	signer *evidence.Signer
	pub    ed25519.PublicKey
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := evidence.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{store: evidence.NewMemoryStore(), signer: s, pub: pub}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// add stores c's artifacts and a signed manifest.
func (f *fixture) add(t testing.TB, c call) {
	t.Helper()
	ctx := context.Background()
	if c.decision == "" {
		c.decision, c.rule = "allow", "workspace_read_only"
	}
	if c.at.IsZero() {
		c.at = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	}
	arts := map[string][]byte{
		evidence.ArtifactRequest: mustJSON(t, evidence.RequestRecord{RequestID: c.id, Caller: c.caller, ToolID: c.tool,
			Args: json.RawMessage(`{"path":"notes.txt"}`), Ctx: evidence.RequestContext{RunID: c.runID, PolicyRef: "policy.default"},
			ReceivedAt: c.at, ParentRequestID: c.parent, CanonicalRequestHash: "sha256:00", Gateway: "toolgate/test@a"}),
		evidence.ArtifactPolicyDecision: mustJSON(t, evidence.DecisionRecord{RequestID: c.id, Caller: c.caller, Action: "RunTool",
			ToolID: c.tool, Driver: "workspace", Decision: c.decision, RuleID: c.rule, Reason: c.reason, PolicyRef: "policy.default", DecidedAt: c.at}),
		evidence.ArtifactResponse: mustJSON(t, evidence.ResponseRecord{OK: true, EngineRef: "toolgate/test@a"}),
	}
	if c.decision == "allow" {
		arts[evidence.ArtifactToolResult] = mustJSON(t, evidence.ToolResultRecord{RunRecord: evidence.RunRecord{RequestID: c.id, Driver: "workspace"}, Stdout: c.stdout})
	}
	m := evidence.Manifest{Version: evidence.ManifestVersion, RequestID: c.id, Outcome: evidence.OutcomeCompleted, CreatedAt: c.at,
		CanonicalRequestHash: "sha256:00", EngineRef: "toolgate/test@a"}
	for name, data := range arts {
		key := evidence.Key(c.id, name)
		m.Artifacts = append(m.Artifacts, evidence.Digest(key, data))
		if c.tamper && name == evidence.ArtifactToolResult {
			data = []byte(strings.Replace(string(data), "notes", "NOTES", 1) + " ")
		}
		if err := f.store.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.signer.Sign(&m); err != nil {
		t.Fatal(err)
	}
	data, err := evidence.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Put(ctx, evidence.Key(c.id, evidence.ArtifactManifest), data); err != nil {
		t.Fatal(err)
	}
}

// serve starts a console over the fixture.
func (f *fixture) serve(t testing.TB, opts Options) *client {
	t.Helper()
	index := NewIndex(f.store, nil)
	if err := index.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Index = f.store, index
	opts.Verify.TrustedKeys = []ed25519.PublicKey{f.pub}
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &client{t: t, base: ts.URL, hc: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// client is a browser without JavaScript: it keeps the session cookie
// (sent by hand, since the cookie is Secure and the test server plain
// HTTP) and the last CSRF token a page carried.
type client struct {
	t      testing.TB
	base   string
	hc     *http.Client
	cookie string
	csrf   string
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a request and returns the response with its body read.
func (c *client) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != "" {
		req.Header.Set("Cookie", CookieName+"="+c.cookie)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == CookieName {
			c.cookie = ck.Value
		}
	}
	if m := csrfRE.FindStringSubmatch(string(data)); m != nil {
		c.csrf = m[1]
	}
	return resp, string(data)
}

func (c *client) get(path string) (*http.Response, string) {
	return c.do(http.MethodGet, path, nil, nil)
}

// post sends a form with the session's CSRF token.
func (c *client) post(path string, form url.Values) (*http.Response, string) {
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf") == "" {
		form.Set("csrf", c.csrf)
	}
	return c.do(http.MethodPost, path, form, nil)
}

// fakeAccess signs in the keys of a map and lets each person read only
// the calls of the callers in their readable list.
type fakeAccess struct {
	keys     map[string]string
	readable map[string][]string
}

func (a fakeAccess) SignIn(_ context.Context, key string) (Person, error) {
	if name, ok := a.keys[key]; ok && key != "" {
		return Person{Name: name}, nil
	}
	return Person{}, fmt.Errorf("unknown key")
}

func (a fakeAccess) MayRead(_ context.Context, p Person, s *Summary) bool {
	for _, c := range a.readable[p.Name] {
		if c == s.Caller {
			return true
		}
	}
	return false
}
