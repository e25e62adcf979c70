package frontdoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/syncbuf"
)

// Two test door kinds: "echo" and "mirror" serve the same handler on the
// patterns their section lists (default: GET /whoami and POST /greedy).
func init() {
	for _, name := range []string{"echo", "mirror"} {
		frontdoor.Register(frontdoor.Kind{Name: name, New: func() frontdoor.Config {
			return &testConfig{Routes: []string{"GET /" + name, "POST /" + name + "/greedy"}}
		}})
	}
}

type testConfig struct {
	frontdoor.Listener `yaml:",inline"`
	// Routes are the patterns served.
	Routes []string `yaml:"routes"`
	// Tokens, when set, make the door a BearerVerifier accepting these
	// bearer tokens for these callers (token → caller).
	Tokens map[string]string `yaml:"tokens"`
	// NoVerifier opens a door that says it authenticates callers but is
	// no BearerVerifier.
	NoVerifier bool `yaml:"no_verifier"`
	// Park adds GET /<name>/park, which holds its request until the door
	// is drained, and makes the door a Drainer.
	Park bool `yaml:"park"`
}

// AuthenticatesCallers implements frontdoor.CallerAuthenticator.
func (c *testConfig) AuthenticatesCallers() bool { return len(c.Tokens) > 0 || c.NoVerifier }

func (c *testConfig) Validate() error {
	if len(c.Routes) == 0 {
		return errors.New("routes: list at least one pattern")
	}
	return c.Listener.Validate()
}

func (c *testConfig) Open(d frontdoor.Deps) (frontdoor.Door, error) {
	if d.Gateway == nil {
		return nil, errors.New("no gateway")
	}
	door := testDoor{name: d.Name, routes: c.Routes}
	switch {
	case c.NoVerifier:
		return door, nil
	case len(c.Tokens) > 0:
		return &tokenDoor{testDoor: door, tokens: c.Tokens}, nil
	case c.Park:
		return &parkDoor{testDoor: door, entered: make(chan struct{}, 16), drained: make(chan struct{})}, nil
	}
	return door, nil
}

// tokenDoor is a test door that verifies bearer tokens from a table and
// counts how often it is asked.
type tokenDoor struct {
	testDoor
	tokens map[string]string
	tried  atomic.Int64
}

// tokenRefused is the typed error of tokenDoor's verifier, which a door
// finds again with errors.As through the plumbing's wrapping.
type tokenRefused struct{ reason string }

func (e *tokenRefused) Error() string { return "token refused: " + e.reason }

func (d *tokenDoor) VerifyBearer(_ context.Context, token string) (frontdoor.Principal, error) {
	d.tried.Add(1)
	caller, ok := d.tokens[token]
	if !ok {
		return frontdoor.Principal{}, &tokenRefused{reason: "unknown token"}
	}
	return frontdoor.Principal{Caller: caller, Identity: &gateway.Identity{
		Method: "test", Subject: caller, Groups: []string{"group-of-" + caller},
	}}, nil
}

// parkDoor is a test door holding GET /<name>/park open until Drain.
type parkDoor struct {
	testDoor
	entered chan struct{}
	drained chan struct{}
	once    sync.Once
}

func (d *parkDoor) Routes(mux *http.ServeMux) {
	d.testDoor.Routes(mux)
	mux.HandleFunc("GET /"+d.name+"/park", func(w http.ResponseWriter, r *http.Request) {
		d.entered <- struct{}{}
		select {
		case <-d.drained:
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	})
}

// Drain implements frontdoor.Drainer.
func (d *parkDoor) Drain() { d.once.Do(func() { close(d.drained) }) }

type testDoor struct {
	name   string
	routes []string
}

// seen is what the test door's handler reports about the request it got.
type seen struct {
	Door       string `json:"door"`
	Caller     string `json:"caller"`
	AuthError  string `json:"auth_error"`
	Path       string `json:"path"`
	RequestURI string `json:"request_uri"`
	AuthHeader string `json:"auth_header"`
	BodyBytes  int    `json:"body_bytes"`
	ReadError  string `json:"read_error"`
	// Method and Groups are the Identity PrincipalFrom reports; Refusal is
	// the reason of a tokenRefused found in the authentication error.
	Method  string   `json:"method"`
	Groups  []string `json:"groups"`
	Refusal string   `json:"refusal"`
}

func (d testDoor) Routes(mux *http.ServeMux) {
	for _, p := range d.routes {
		mux.HandleFunc(p, d.serve)
	}
}

// serve reads the whole body first, as a careless door might, and then
// looks at the caller.
func (d testDoor) serve(w http.ResponseWriter, r *http.Request) {
	s := seen{Door: d.name, Path: r.URL.Path, RequestURI: r.RequestURI, AuthHeader: r.Header.Get("Authorization")}
	n, err := io.Copy(io.Discard, r.Body)
	s.BodyBytes = int(n)
	status := http.StatusOK
	if err != nil {
		s.ReadError = err.Error()
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
	}
	caller, err := frontdoor.CallerFrom(r.Context())
	s.Caller = caller
	if err != nil {
		s.AuthError = err.Error()
		status = http.StatusUnauthorized
		var refused *tokenRefused
		if errors.As(err, &refused) {
			s.Refusal = refused.reason
		}
	}
	if p, _ := frontdoor.PrincipalFrom(r.Context()); p.Identity != nil {
		s.Method, s.Groups = p.Identity.Method, p.Identity.Groups
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(s)
}

// keys are the test callers' API keys.
var testKeys = map[string]string{
	"alice": "alice-key-0123456789",
	"bob":   "bob+key/with~odd.chars",
}

// newConfig returns a gateway configuration with front_doors as given
// (YAML), and auth.keys for alice and bob when withKeys.
func newConfig(t *testing.T, withKeys bool, frontDoors string) config.Config {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies")
	if err := os.Mkdir(pol, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pol, "policy.default.cedar"), []byte("permit (principal, action, resource);\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := "listen: 127.0.0.1:0\npolicies: {dir: " + pol + "}\nevidence: {url: 'mem://', spool_dir: none, signing_key: none}\ndrivers: {}\n"
	if withKeys {
		y += "auth:\n  keys:\n    - {caller: alice, env: KEY_ALICE}\n    - {caller: bob, env: KEY_BOB}\n"
	}
	if frontDoors != "" {
		y += "front_doors:\n" + frontDoors
	}
	cfg, err := config.ParseConfig([]byte(y))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, y)
	}
	return cfg
}

func getenv(name string) string {
	switch name {
	case "KEY_ALICE":
		return testKeys["alice"]
	case "KEY_BOB":
		return testKeys["bob"]
	}
	return ""
}

// served is a running gateway with its doors.
type served struct {
	cfg     config.Config
	servers *frontdoor.Servers
	logs    *syncbuf.Buffer
}

// serve builds the gateway of cfg and serves its doors on loopback, with
// debug logging captured.
func serve(t *testing.T, cfg config.Config) *served {
	t.Helper()
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, closer, err := gateway.Build(context.Background(), cfg, getenv, log)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { closer.Close() })
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	srv, err := frontdoor.Serve(context.Background(), cfg, g, doors, g.Logger())
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &served{cfg: cfg, servers: srv, logs: logs}
}

// url is the base URL of the listener configured as listen.
func (s *served) url(t *testing.T, listen string) string {
	t.Helper()
	a := s.servers.Addr(listen)
	if a == nil {
		t.Fatalf("nothing listens for %s", listen)
	}
	return "http://" + a.String()
}

// noRedirects is a client that reports redirects instead of following
// them.
var noRedirects = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       10 * time.Second,
}

// do sends a request and decodes the test door's report (or the
// plumbing's refusal, into raw).
func do(t *testing.T, method, url string, header http.Header, body string) (status int, got seen, raw string, resp *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err = noRedirects.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &got)
	return resp.StatusCode, got, string(b), resp
}

func bearer(key string) http.Header {
	return http.Header{"Authorization": {"Bearer " + key}}
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode the reply: %v", err)
	}
}
