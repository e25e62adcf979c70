package frontdoor_test

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
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
}

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
	return testDoor{name: d.Name, routes: c.Routes}, nil
}

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
func newConfig(t *testing.T, withKeys bool, frontDoors string) gateway.Config {
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
	cfg, err := gateway.ParseConfig([]byte(y))
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

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// served is a running gateway with its doors.
type served struct {
	cfg     gateway.Config
	servers *frontdoor.Servers
	logs    *syncBuffer
}

// serve builds the gateway of cfg and serves its doors on loopback, with
// debug logging captured.
func serve(t *testing.T, cfg gateway.Config) *served {
	t.Helper()
	logs := &syncBuffer{}
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
