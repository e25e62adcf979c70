package mcpdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

// The gateway in these tests sits behind a TLS proxy that serves it as
// https://gw.example.com: resource names that URL, and the metadata's
// paths are served by the door itself.
const (
	oauthResource = "https://gw.example.com/mcp"
	oauthIssuer   = "https://idp.example.com"
	oauthMetadata = "https://gw.example.com/.well-known/oauth-protected-resource/mcp"
	oauthAgentKey = "agent-api-key-0123456789"
)

// oauthPolicy lets anyone read the workspace and only the group ops write
// it: a token's groups decide.
const oauthPolicy = `
@id("read") @reason("reading is fine")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.readFile");

@id("ops_write") @reason("ops may write")
permit (principal, action == Action::"RunTool", resource == Tool::"workspace.createFile")
when { principal.groups.contains("ops") };
`

// oauthServed is a gateway built from its configuration, as serve builds
// it, with the MCP door taking OAuth tokens of iss beside one API key.
type oauthServed struct {
	url      string // the door's base URL on loopback
	evidence string
	iss      *oauthtest.Issuer
}

func serveOAuth(t *testing.T) *oauthServed {
	t.Helper()
	dir := t.TempDir()
	s := &oauthServed{evidence: filepath.Join(dir, "evidence"), iss: oauthtest.New(t, oauthIssuer)}
	jwks := filepath.Join(dir, "jwks.json")
	s.iss.WriteJWKS(t, jwks)
	pol := filepath.Join(dir, "policies")
	must(t, os.Mkdir(pol, 0o700))
	must(t, os.WriteFile(filepath.Join(pol, "policy.default.cedar"), []byte(oauthPolicy), 0o600))
	y := fmt.Sprintf(`listen: 127.0.0.1:0
policies: {dir: '%s'}
evidence: {url: 'file://%s', spool_dir: none, signing_key: none}
drivers: {workspace: {type: workspace, root: '%s'}}
tools:
  workspace.readFile: {driver: workspace, target: readFile}
  workspace.createFile: {driver: workspace, target: createFile}
auth:
  keys:
    - {caller: agent, env: AGENT_KEY}
front_doors:
  mcp:
    listen: 127.0.0.1:0
    oauth:
      resource: %s
      issuer: %s
      jwks_file: '%s'
      required_scopes: [toolgate.tools]
      groups_claim: groups
`, pol, s.evidence, filepath.Join(dir, "ws"), oauthResource, oauthIssuer, jwks)
	cfg, err := config.ParseConfig([]byte(y))
	must(t, err)
	getenv := func(name string) string { return map[string]string{"AGENT_KEY": oauthAgentKey}[name] }
	log := slog.New(slog.DiscardHandler)
	g, closer, err := gateway.Build(context.Background(), cfg, getenv, log)
	must(t, err)
	t.Cleanup(func() { closer.Close() })
	doors, err := frontdoor.Load(cfg)
	must(t, err)
	srv, err := frontdoor.Serve(context.Background(), cfg, g, doors, log)
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	s.url = "http://" + srv.Addr("127.0.0.1:0").String()
	return s
}

// token is a valid access token of sub for the door, changed by change.
func (s *oauthServed) token(t *testing.T, sub string, change func(jwt.MapClaims)) string {
	t.Helper()
	c := s.iss.Claims(oauthResource, sub)
	c["scope"] = "toolgate.tools"
	if change != nil {
		change(c)
	}
	return s.iss.Sign(t, c)
}

// connect opens a Go SDK client session sending credential as bearer.
func (s *oauthServed) connect(t *testing.T, credential string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.url + Path, HTTPClient: &http.Client{Transport: bearer{credential}}}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// request reads request.json of id.
func (s *oauthServed) request(t *testing.T, id string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.evidence, "requests", id, "request.json"))
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(b, &m))
	return m
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	must(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func TestOAuthClientRunsAsItsSubjectAndItsGroupsReachCedar(t *testing.T) {
	s := serveOAuth(t)
	opsToken := s.token(t, "alice", func(c jwt.MapClaims) { c["groups"] = []string{"ops"} })
	alice, err := s.connect(t, opsToken)
	must(t, err)
	if names := toolNames(t, alice); !slices.Equal(names, []string{"workspace.createFile", "workspace.readFile"}) {
		t.Errorf("alice (group ops) lists %v, want both tools", names)
	}
	res := call(t, alice, "workspace.createFile", map[string]any{"path": "a.txt", "content": "hi"},
		mcp.Meta{"io.github.toolgate/idempotencyKey": "oauth-write-1"})
	if res.IsError {
		t.Fatalf("alice's write: %s", text(res))
	}
	rec := s.request(t, "oauth-write-1")
	auth, _ := rec["auth"].(map[string]any)
	if rec["caller"] != "oauth:alice" || rec["front_door"] != "mcp" || auth["method"] != "oauth" ||
		auth["issuer"] != oauthIssuer || auth["subject"] != "alice" || auth["jti"] == "" {
		t.Errorf("request.json caller %v, front_door %v, auth %v", rec["caller"], rec["front_door"], rec["auth"])
	}

	bob, err := s.connect(t, s.token(t, "bob", nil))
	must(t, err)
	if names := toolNames(t, bob); !slices.Equal(names, []string{"workspace.readFile"}) {
		t.Errorf("bob (no group) lists %v, want only readFile", names)
	}
	res = call(t, bob, "workspace.createFile", map[string]any{"path": "b.txt", "content": "hi"},
		mcp.Meta{"io.github.toolgate/idempotencyKey": "oauth-write-2"})
	if !res.IsError || !strings.Contains(text(res), "default_deny") {
		t.Errorf("bob's write: isError %v, %q: want a deny", res.IsError, text(res))
	}
	if rec := s.request(t, "oauth-write-2"); rec["caller"] != "oauth:bob" {
		t.Errorf("bob's request.json caller %v", rec["caller"])
	}

	agent, err := s.connect(t, oauthAgentKey)
	must(t, err)
	res = call(t, agent, "workspace.readFile", map[string]any{"path": "a.txt"}, mcp.Meta{"io.github.toolgate/idempotencyKey": "key-read-1"})
	if res.IsError || !strings.Contains(text(res), "hi") || s.request(t, "key-read-1")["caller"] != "agent" {
		t.Errorf("an API key beside OAuth: isError %v, %q", res.IsError, text(res))
	}
	if rec := s.request(t, "key-read-1"); rec["auth"] != nil {
		t.Errorf("an API key call records auth %v", rec["auth"])
	}

	// The token went nowhere: no evidence file holds it or its signature.
	sig := opsToken[strings.LastIndex(opsToken, ".")+1:]
	must(t, filepath.WalkDir(s.evidence, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), sig) {
			t.Errorf("%s holds the access token", path)
		}
		return err
	}))
}

func TestOAuthRefusalsPointAtTheMetadata(t *testing.T) {
	s := serveOAuth(t)
	hour := time.Hour
	cases := []struct {
		name       string
		credential string
		status     int
		errCode    string // the challenge's error, "" for none
	}{
		{"a token for another resource", s.token(t, "alice", func(c jwt.MapClaims) { c["aud"] = "https://other.example.com/mcp" }),
			http.StatusUnauthorized, "invalid_token"},
		{"an expired token", s.token(t, "alice", func(c jwt.MapClaims) {
			c["exp"], c["iat"], c["nbf"] = time.Now().Add(-hour).Unix(), time.Now().Add(-2*hour).Unix(), time.Now().Add(-2*hour).Unix()
		}), http.StatusUnauthorized, "invalid_token"},
		{"a token of another issuer", s.token(t, "alice", func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com" }),
			http.StatusUnauthorized, "invalid_token"},
		{"an unknown API key", "not-a-key", http.StatusUnauthorized, "invalid_token"},
		{"no credential", "", http.StatusUnauthorized, ""},
		{"a token without the required scope", s.token(t, "alice", func(c jwt.MapClaims) { delete(c, "scope") }),
			http.StatusForbidden, "insufficient_scope"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			if tc.credential != "" {
				if _, err := s.connect(t, tc.credential); err == nil {
					t.Fatal("the Go SDK client connected")
				}
			}
			req, err := http.NewRequest(http.MethodPost, s.url+Path, strings.NewReader(
				`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
			must(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
			if tc.credential != "" {
				req.Header.Set("Authorization", "Bearer "+tc.credential)
			}
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
			if err != nil || len(cs) != 1 || cs[0].Scheme != "bearer" {
				t.Fatalf("WWW-Authenticate %q: %v", resp.Header.Values("WWW-Authenticate"), err)
			}
			p := cs[0].Params
			if p["resource_metadata"] != oauthMetadata || p["scope"] != "toolgate.tools" || p["error"] != tc.errCode {
				t.Errorf("challenge %v: want resource_metadata %s, scope toolgate.tools, error %q", p, oauthMetadata, tc.errCode)
			}
			if !strings.Contains(string(body), `"id":null`) || !strings.Contains(string(body), `"code":-32001`) {
				t.Errorf("body %s: want a JSON-RPC error with id null and code -32001", body)
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(s.evidence, "requests")); len(entries) != 0 {
		t.Errorf("refused requests left %d request folders", len(entries))
	}
}

func TestOAuthMetadataIsServedWithoutACredential(t *testing.T) {
	s := serveOAuth(t)
	want := `{"resource":"https://gw.example.com/mcp","authorization_servers":["https://idp.example.com"],` +
		`"scopes_supported":["toolgate.tools"],"bearer_methods_supported":["header"],"resource_name":"Toolgate"}` + "\n"
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(s.url + path)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("GET %s: %d %s\nwant %s", path, resp.StatusCode, body, want)
		}
	}
}

func TestOAuthConfiguration(t *testing.T) {
	section := func(listen, oauth string) config.Config {
		y := "listen: 127.0.0.1:0\ntls: {allow_plaintext: true}\nfront_doors:\n  mcp:\n    listen: " + listen + "\n" + oauth
		cfg, err := config.ParseConfig([]byte(y))
		must(t, err)
		return cfg
	}
	good := "    oauth: {resource: " + oauthResource + ", issuer: " + oauthIssuer + ", jwks_url: https://idp.example.com/jwks, " +
		"leeway: 0s, jwks_refresh: 5m, caller_prefix: '', scope_roles: {toolgate.approve: [approver]}}\n"
	doors, err := frontdoor.Load(section("0.0.0.0:8788", good))
	if err != nil {
		t.Fatalf("an OAuth door on a public address without auth.keys: %v", err)
	}
	o := doors[0].Config.(*Config).OAuth
	if o.Leeway == nil || *o.Leeway != 0 || o.JWKSRefresh != 5*time.Minute || o.CallerPrefix == nil || *o.CallerPrefix != "" ||
		!slices.Equal(o.ScopeRoles["toolgate.approve"], []string{"approver"}) {
		t.Errorf("decoded oauth %+v", o)
	}
	if _, err := frontdoor.Load(section("0.0.0.0:8788", "")); err == nil {
		t.Error("a door without OAuth or auth.keys on a public address loaded")
	}
	for _, tc := range []struct{ oauth, want string }{
		{"    oauth: {resource: " + oauthResource + ", jwks_url: https://idp.example.com/jwks}\n", "config: front_doors.mcp.oauth.issuer: required"},
		{"    oauth: {resource: " + oauthResource + ", issuer: " + oauthIssuer + ", jwks_url: https://idp.example.com/jwks, algorithms: [HS256]}\n",
			"config: front_doors.mcp.oauth.algorithms: HS256"},
		{"    oauth: {resource: " + oauthResource + ", issuer: " + oauthIssuer + ", jwks_url: https://idp.example.com/jwks, audience: x}\n",
			"audience"},
	} {
		_, err := frontdoor.Load(section("127.0.0.1:8788", tc.oauth))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load: %v, want %q", err, tc.want)
		}
	}
}
