package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolgate/toolgate/gateway/frontdoor/oauth/oauthtest"
)

// TestConsoleOIDCSignIn: the gateway's console over TLS signs a person in
// at an OpenID Connect provider on loopback, driven by an http.Client
// with a cookie jar that follows redirects: the sign-in page's link, the
// provider's authorization endpoint, the callback and the token endpoint,
// then the requests page as the ID token's caller. The client secret
// comes from the environment.
func TestConsoleOIDCSignIn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, consolePolicy)
	cert, key := writeSelfSigned(t, dir)
	prov := oauthtest.NewProvider(t, "toolgate-console", "s3cret-from-env")
	prov.SetUser("carol", jwt.MapClaims{"groups": []string{"ops"}})
	// The redirect URL names the console's port, so the port is chosen
	// here.
	_, addr := startNamingItsAddr(t, dir, []string{"KEY_BOB=k-bob-0123456789", "OIDC_SECRET=s3cret-from-env"}, func(addr string) {
		cfg := "tls: {cert_file: " + cert + ", key_file: " + key + "}\n" +
			"auth: {keys: [{caller: bob, env: KEY_BOB, groups: [ops]}]}\n" +
			"evidence: {url: file://./audit}\ndrivers: {workspace: {type: workspace, root: ./ws}}\n" +
			"console:\n  listen: '" + addr + "'\n  oidc:\n    issuer: " + prov.URL + "\n    client_id: toolgate-console\n" +
			"    client_secret: {env: OIDC_SECRET}\n    redirect_url: https://" + addr + "/signin/oidc/callback\n    groups_claim: groups\n"
		if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	pemData, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemData)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Jar: jar}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, string(data)
	}
	base := "https://" + addr
	if _, page := get(base + "/signin"); !strings.Contains(page, `<a href="/signin/oidc">Sign in with `+strings.TrimPrefix(prov.URL, "http://")+`</a>`) {
		t.Fatalf("the sign-in page offers no provider:\n%s", page)
	}
	resp, body := get(base + "/signin/oidc")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "oidc:carol") || prov.Redeemed() != 1 {
		t.Fatalf("after the provider: %d at %s, %d codes redeemed\n%s", resp.StatusCode, resp.Request.URL, prov.Redeemed(), body)
	}
	if resp, body := get(base + "/requests"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "Signed in as <strong>oidc:carol</strong>") {
		t.Fatalf("requests page: %d\n%s", resp.StatusCode, body)
	}
}

// TestConsoleOIDCInABrowser: in headless Chromium, a person signs in at a
// provider on another site (localhost, the console on 127.0.0.1) and
// lands on the requests page signed in: the SameSite=Lax state cookie
// comes back with the provider's redirect, and the SameSite=Strict
// session cookie is sent on the way on from the console's own page.
func TestConsoleOIDCInABrowser(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	script, err := filepath.Abs("testdata/console/oidc.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed: run npm ci in testdata/console (bash .ci/test.sh does): %v", err)
	}
	dir := t.TempDir()
	writePolicy(t, dir, consolePolicy)
	prov := oauthtest.NewProviderNamed(t, "toolgate-console", "s3cret-from-env", "localhost")
	prov.SetUser("dana", nil)
	_, addr := startNamingItsAddr(t, dir, []string{"OIDC_SECRET=s3cret-from-env"}, func(addr string) {
		cfg := "evidence: {url: file://./audit}\ndrivers: {workspace: {type: workspace, root: ./ws}}\n" +
			"console:\n  listen: '" + addr + "'\n  oidc:\n    issuer: " + prov.URL + "\n    client_id: toolgate-console\n" +
			"    client_secret: {env: OIDC_SECRET}\n    redirect_url: http://" + addr + "/signin/oidc/callback\n"
		if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	cmd := exec.Command(node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "CONSOLE_URL=http://"+addr, "USER_DATA_DIR="+t.TempDir())
	stdout, err := cmd.Output()
	var res struct {
		Link, URL, Who string
		Errors         []string
	}
	if jerr := json.Unmarshal(stdout, &res); err != nil || jerr != nil || len(res.Errors) > 0 {
		t.Fatalf("oidc.mjs: %v %v %v\n%s", err, jerr, res.Errors, stdout)
	}
	if res.Link != "Sign in with "+strings.TrimPrefix(prov.URL, "http://") || res.URL != "http://"+addr+"/requests" ||
		!strings.Contains(res.Who, "oidc:dana") || prov.Redeemed() != 1 {
		t.Fatalf("in the browser: %+v, %d codes redeemed", res, prov.Redeemed())
	}
}
