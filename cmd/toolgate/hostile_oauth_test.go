package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

// The MCP door's OAuth attacks, over the wire against the real binary: the
// door on with oauth only (no auth.keys), keys fetched from a test issuer's
// jwks_url on loopback, and a policy that allows everything, so that any
// token getting through would show in the evidence.

const oauthDoorPolicy = `
@id("anything") @reason("the attacks must fail at authentication, not here")
permit (principal, action, resource);
`

// oauthDoor is the running binary and its issuer.
type oauthDoor struct {
	base, resource string
	iss            *oauthtest.Issuer
	srv            *server
}

func startOAuthDoor(t *testing.T) *oauthDoor {
	t.Helper()
	iss := oauthtest.New(t, "https://idp.example.com")
	dir := t.TempDir()
	writePolicy(t, dir, oauthDoorPolicy)
	d := &oauthDoor{iss: iss}
	// The resource URL names the door's port, so the port is chosen here.
	d.srv, _ = startNamingItsAddr(t, dir, nil, func(addr string) {
		d.base = "http://" + addr
		d.resource = d.base + "/mcp"
		cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
evidence:
  url: file://./evidence
tools:
  workspace.readFile: {driver: workspace, target: readFile}
front_doors:
  mcp:
    listen: %s
    oauth:
      resource: %s
      issuer: %s
      jwks_url: %s
      required_scopes: [toolgate.tools]
`, addr, d.resource, iss.URL, iss.JWKSURL(t))
		if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	waitListening(t, d.base+"/.well-known/oauth-protected-resource")
	return d
}

// claims are valid claims for the door.
func (d *oauthDoor) claims() jwt.MapClaims {
	c := d.iss.Claims(d.resource, "mallory")
	c["scope"] = "toolgate.tools"
	return c
}

// list POSTs tools/list with credential as bearer (none when "") to path.
func (d *oauthDoor) list(t *testing.T, path, credential string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.base+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if credential != "" {
		req.Header.Set("Authorization", "Bearer "+credential)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// requestFolders counts what the gateway recorded.
func (d *oauthDoor) requestFolders(t *testing.T) int {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(d.srv.dir, "evidence", "requests"))
	return len(entries)
}

func TestHostileOAuthForgedTokens(t *testing.T) {
	t.Parallel()
	d := startOAuthDoor(t)
	if resp, body := d.list(t, "/mcp", d.iss.Sign(t, d.claims())); resp.StatusCode != http.StatusOK {
		t.Fatalf("the control: a valid token got %d %s", resp.StatusCode, body)
	}
	attacker, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	with := func(change func(jwt.MapClaims)) jwt.MapClaims {
		c := d.claims()
		change(c)
		return c
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, d.claims())
	none.Header["kid"] = d.iss.Kid(t, "ES256")
	noneToken, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	valid := d.iss.Sign(t, d.claims())
	for _, tc := range []struct {
		name, path, token string
	}{
		{"an unsigned alg none token", "/mcp", noneToken},
		{"an HS256 token keyed with the published JWKS", "/mcp", d.iss.SignKid(t, "HS256", d.iss.Kid(t, "ES256"), d.iss.JWKS(), d.claims())},
		{"a token signed by the attacker under the issuer's kid", "/mcp", d.iss.SignKid(t, "ES256", d.iss.Kid(t, "ES256"), attacker, d.claims())},
		{"a token for another resource", "/mcp", d.iss.Sign(t, with(func(c jwt.MapClaims) { c["aud"] = "https://other.example.com/mcp" }))},
		{"an expired token", "/mcp", d.iss.Sign(t, with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }))},
		{"a token of another issuer", "/mcp", d.iss.Sign(t, with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example.com" }))},
		{"a token naming a caller that is no caller name", "/mcp", d.iss.Sign(t, with(func(c jwt.MapClaims) { c["sub"] = "../../admin" }))},
		{"a token larger than 8 KiB", "/mcp", d.iss.Sign(t, with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("A", 9000) }))},
		{"a valid token in the /k/ path, which lands in logs", "/k/" + valid + "/mcp", ""},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			resp, body := d.list(t, tc.path, tc.token)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", resp.StatusCode, body)
			}
			cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
			if err != nil || len(cs) != 1 || cs[0].Params["resource_metadata"] != d.base+"/.well-known/oauth-protected-resource/mcp" {
				t.Errorf("WWW-Authenticate %q (%v): want resource_metadata pointing at the door's metadata",
					resp.Header.Values("WWW-Authenticate"), err)
			}
		})
	}
	if n := d.requestFolders(t); n != 0 {
		t.Errorf("the forged tokens left %d request folders", n)
	}
	if strings.Contains(d.srv.log.String(), valid[strings.LastIndex(valid, ".")+1:]) {
		t.Error("the server log holds a token")
	}
}

func TestHostileOAuthKidFloodIsRateLimited(t *testing.T) {
	t.Parallel()
	d := startOAuthDoor(t)
	before := d.iss.Fetches()
	start := time.Now()
	key := d.iss.Key(t, "ES256")
	for i := range 100 {
		resp, _ := d.list(t, "/mcp", d.iss.SignKid(t, "ES256", fmt.Sprint("flood-", i), key, d.claims()))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %d under an unknown kid: %d", i, resp.StatusCode)
		}
	}
	// The start's fetch was under 30 s ago unless the machine crawled: then
	// one more fetch is allowed per 30 s that passed.
	allowed := int64(time.Since(start)/(30*time.Second)) + 1
	if got := d.iss.Fetches() - before; got > allowed {
		t.Errorf("100 unknown kids made the gateway fetch the JWKS %d times, want at most %d", got, allowed)
	}
}

func TestHostileOAuthMetadataNeedsNoCredentialButLeaksNothing(t *testing.T) {
	t.Parallel()
	d := startOAuthDoor(t)
	resp, err := http.Get(d.base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"resource":"` + d.resource + `","authorization_servers":["https://idp.example.com"],"scopes_supported":["toolgate.tools"],` +
		`"bearer_methods_supported":["header"],"resource_name":"Toolgate"}` + "\n"
	if resp.StatusCode != http.StatusOK || string(body) != want {
		t.Errorf("metadata %d %s\nwant %s", resp.StatusCode, body, want)
	}
	if strings.Contains(string(body), "jwks") {
		t.Error("the metadata names the JWKS location")
	}
	resp, err = http.Post(d.base+"/.well-known/oauth-protected-resource/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST to the metadata: %d, want 405", resp.StatusCode)
	}
}
