package oauth_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
)

func TestConfigValidationNamesTheKey(t *testing.T) {
	valid := func() *oauth.Config {
		return &oauth.Config{Resource: resource, Issuer: issuerURL, JWKSURL: "https://idp.example.com/jwks.json"}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	empty, long := "", 10*time.Minute
	cases := []struct {
		name   string
		change func(*oauth.Config)
		key    string // the error starts with it
	}{
		{"no resource", func(c *oauth.Config) { c.Resource = "" }, "resource:"},
		{"a plain http resource on a public host", func(c *oauth.Config) { c.Resource = "http://gw.example.com/mcp" }, "resource:"},
		{"a resource with a fragment", func(c *oauth.Config) { c.Resource = resource + "#x" }, "resource:"},
		{"a resource with a query", func(c *oauth.Config) { c.Resource = resource + "?a=b" }, "resource:"},
		{"a resource path that is no route", func(c *oauth.Config) { c.Resource = "https://gw.example.com/{mcp}" }, "resource:"},
		{"a relative resource", func(c *oauth.Config) { c.Resource = "/mcp" }, "resource:"},
		{"no issuer", func(c *oauth.Config) { c.Issuer = "" }, "issuer:"},
		{"an issuer with credentials", func(c *oauth.Config) { c.Issuer = "https://u:p@idp.example.com" }, "issuer:"},
		{"no key source", func(c *oauth.Config) { c.JWKSURL = "" }, "jwks_file:"},
		{"two key sources", func(c *oauth.Config) { c.JWKSFile = "/etc/jwks.json" }, "jwks_url:"},
		{"a plain http jwks_url on a public host", func(c *oauth.Config) { c.JWKSURL = "http://idp.example.com/jwks" }, "jwks_url:"},
		{"a jwks_refresh under the refetch limit", func(c *oauth.Config) { c.JWKSRefresh = 5 * time.Second }, "jwks_refresh:"},
		{"alg none", func(c *oauth.Config) { c.Algorithms = []string{"ES256", "none"} }, "algorithms: none"},
		{"HS256", func(c *oauth.Config) { c.Algorithms = []string{"HS256"} }, "algorithms: HS256: shared-secret"},
		{"an unknown algorithm", func(c *oauth.Config) { c.Algorithms = []string{"ES512"} }, "algorithms:"},
		{"a leeway over 5m", func(c *oauth.Config) { c.Leeway = &long }, "leeway:"},
		{"a scope with a quote", func(c *oauth.Config) { c.RequiredScopes = []string{`a"b`} }, "required_scopes:"},
		{"a scope with a space", func(c *oauth.Config) { c.ScopesSupported = []string{"a b"} }, "scopes_supported:"},
		{"a caller claim with a space", func(c *oauth.Config) { c.CallerClaim = "a b" }, "caller_claim:"},
		{"a caller prefix with a space", func(c *oauth.Config) { p := "o auth:"; c.CallerPrefix = &p }, "caller_prefix:"},
		{"a scope mapped to no role", func(c *oauth.Config) { c.ScopeRoles = map[string][]string{"x": nil} }, "scope_roles.x:"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := valid()
			tc.change(c)
			err := c.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tc.key) {
				t.Fatalf("Validate: %v, want an error starting %q", err, tc.key)
			}
		})
	}
	for name, change := range map[string]func(*oauth.Config){
		"loopback http everywhere": func(c *oauth.Config) {
			c.Resource, c.Issuer, c.JWKSURL = "http://127.0.0.1:8788/mcp", "http://localhost:9000", "http://[::1]:9000/jwks"
		},
		"an empty caller prefix, on purpose": func(c *oauth.Config) { c.CallerPrefix = &empty },
		"no leeway":                          func(c *oauth.Config) { z := time.Duration(0); c.Leeway = &z },
	} {
		c := valid()
		change(c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
