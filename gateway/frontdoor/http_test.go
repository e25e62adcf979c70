package frontdoor_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// keyedDoor serves the echo door with auth.keys for alice and bob.
func keyedDoor(t *testing.T) (*served, string) {
	t.Helper()
	listen := anyLoopbackPort
	s := serve(t, newConfig(t, true, "  echo: {listen: '"+listen+"', max_body_bytes: 1024}\n"))
	return s, s.url(t, listen)
}

func TestKeyInPathAuthenticatesAndIsStripped(t *testing.T) {
	_, base := keyedDoor(t)
	for _, tc := range []struct {
		name, path, wantCaller, wantPath string
	}{
		{"a plain key in the path is alice", "/k/" + testKeys["alice"] + "/echo", "alice", "/echo"},
		{"a percent-escaped key with a slash and a plus is bob", "/k/" + url.PathEscape(testKeys["bob"]) + "/echo", "bob", "/echo"},
		{"a query string survives the stripping", "/k/" + testKeys["alice"] + "/echo?q=1", "alice", "/echo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got, raw, _ := do(t, "GET", base+tc.path, nil, "")
			if status != 200 || got.Caller != tc.wantCaller {
				t.Fatalf("status %d, report %s; want caller %s", status, raw, tc.wantCaller)
			}
			if got.Path != tc.wantPath || strings.Contains(got.RequestURI, "/k/") || got.AuthHeader != "" {
				t.Fatalf("the door saw path %q, request URI %q, Authorization %q: the key reached it", got.Path, got.RequestURI, got.AuthHeader)
			}
		})
	}
	for _, tc := range []struct{ name, path string }{
		{"an unknown key in the path is refused", "/k/not-a-key/echo"},
		{"an empty key in the path is refused", "/k//echo"},
		{"a key with a line break is refused", "/k/alice%0A/echo"},
		{"a path without a key is refused", "/echo"},
		{"a key in a second segment is not a key", "/echo/k/" + testKeys["alice"] + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got, raw, _ := do(t, "GET", base+tc.path, nil, "")
			if status == 200 || got.Caller != "" {
				t.Fatalf("status %d, report %s: want no caller", status, raw)
			}
		})
	}
	t.Run("a key that does not unescape is refused", func(t *testing.T) {
		// Go's server refuses the URL itself (400) before any handler.
		if status := rawStatus(t, base, "/k/%zz/echo"); status != 400 && status != 401 {
			t.Fatalf("status %d, want 400 or 401", status)
		}
	})
	t.Run("the bearer header alone authenticates and is removed", func(t *testing.T) {
		status, got, raw, _ := do(t, "GET", base+"/echo", bearer(testKeys["bob"]), "")
		if status != 200 || got.Caller != "bob" || got.AuthHeader != "" {
			t.Fatalf("status %d, report %s", status, raw)
		}
	})
}

func TestBearerAndPathKeyMustAgree(t *testing.T) {
	_, base := keyedDoor(t)
	for _, tc := range []struct {
		name, pathKey, bearerKey, wantCaller string
	}{
		{"the same key twice is that caller", testKeys["alice"], testKeys["alice"], "alice"},
		{"two valid keys of different callers are refused", testKeys["alice"], testKeys["bob"], ""},
		{"a valid bearer key with a wrong path key is refused", "wrong", testKeys["alice"], ""},
		{"a wrong bearer key with a valid path key is refused", testKeys["alice"], "wrong", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got, raw, _ := do(t, "GET", base+"/k/"+url.PathEscape(tc.pathKey)+"/echo", bearer(tc.bearerKey), "")
			if got.Caller != tc.wantCaller || (tc.wantCaller == "") != (status == 401) {
				t.Fatalf("status %d, report %s; want caller %q", status, raw, tc.wantCaller)
			}
		})
	}
	t.Run("two Authorization headers are refused", func(t *testing.T) {
		h := http.Header{"Authorization": {"Bearer " + testKeys["alice"], "Bearer " + testKeys["alice"]}}
		if status, got, raw, _ := do(t, "GET", base+"/echo", h, ""); status != 401 || got.Caller != "" {
			t.Fatalf("status %d, report %s", status, raw)
		}
	})
}

func TestKeyNeverLogged(t *testing.T) {
	s, base := keyedDoor(t)
	secret := testKeys["alice"]
	if status := rawStatus(t, base, "/k/"+secret+"%zz/echo"); status == 200 {
		t.Fatalf("a malformed path key: status %d", status)
	}
	for _, path := range []string{
		"/k/" + secret + "/echo",            // accepted
		"/k/" + secret + "//echo",           // accepted, doubled slash
		"/k/" + secret + "/nowhere",         // no route
		"/k/" + secret + "x/echo",           // unknown key
		"/k/" + secret + "/../k/" + secret,  // dot segments
		"/K/" + secret + "/echo",            // not the prefix: a path the door may not know
		"/k/" + url.PathEscape(secret) + "", // no trailing route
	} {
		resp, err := noRedirects.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != "" {
			t.Errorf("GET %s answered with a redirect to %q", path, loc)
		}
	}
	do(t, "POST", base+"/echo/greedy", bearer(secret+"-wrong"), "body")
	do(t, "GET", base+"/echo", bearer(secret), "")
	logs := s.logs.String()
	if !strings.Contains(logs, "front door request") {
		t.Fatalf("no access log lines at debug level:\n%s", logs)
	}
	if strings.Contains(logs, secret) || strings.Contains(logs, url.PathEscape(secret)) {
		t.Fatalf("a key is in the logs:\n%s", logs)
	}
}

func TestDoubleSlashWithoutRedirect(t *testing.T) {
	_, base := keyedDoor(t)
	key := testKeys["alice"]
	for _, tc := range []struct{ name, path string }{
		{"the published client's doubled slash after a base URL ending in /", "/k/" + key + "//echo"},
		{"doubled slashes everywhere", "//k/" + key + "///echo"},
		{"a dot segment", "/k/" + key + "/x/../echo"},
		{"a trailing dot", "/k/" + key + "/./echo"},
		{"an escaped dot segment", "/k/" + key + "/x/%2E%2e/echo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, got, raw, resp := do(t, "GET", base+tc.path, nil, "")
			if status != 200 || got.Path != "/echo" || got.Caller != "alice" {
				t.Fatalf("status %d (Location %q), report %s; want /echo served to alice", status, resp.Header.Get("Location"), raw)
			}
		})
	}
	t.Run("a POST after a doubled slash keeps its body", func(t *testing.T) {
		status, got, raw, _ := do(t, "POST", base+"/k/"+key+"//echo/greedy", nil, "12345")
		if status != 200 || got.BodyBytes != 5 {
			t.Fatalf("status %d, report %s", status, raw)
		}
	})
}

// TestEscapedSlashStaysInItsSegment: "%2F" is data, never path
// structure, so "x%2F..%2Fecho" is one segment that names no route rather
// than a way round the path a door routes on.
func TestEscapedSlashStaysInItsSegment(t *testing.T) {
	_, base := keyedDoor(t)
	for _, p := range []string{"/x%2F..%2Fecho", "/x%2f..%2fecho", "/x%2F%2E%2E%2Fecho"} {
		status, got, raw, resp := do(t, "GET", base+"/k/"+testKeys["alice"]+p, nil, "")
		if status != 404 || got.Path != "" || resp.Header.Get("Location") != "" {
			t.Errorf("%s: status %d (Location %q), report %s; want 404 and no door reached", p, status, resp.Header.Get("Location"), raw)
		}
	}
}

func TestAnonymousRefusesBrowserOrigins(t *testing.T) {
	listen := anyLoopbackPort
	s := serve(t, newConfig(t, false, "  echo: {listen: '"+listen+"', cors_origins: ['http://localhost:3000']}\n"))
	base := s.url(t, listen)
	for _, tc := range []struct {
		name   string
		header http.Header
		host   string
		want   int
	}{
		{"a client that sends no Origin is served", nil, "", 200},
		{"a web page's request is refused", http.Header{"Origin": {"https://evil.example"}}, "", 403},
		{"a sandboxed page's null origin is refused", http.Header{"Origin": {"null"}}, "", 403},
		{"a listed origin is served", http.Header{"Origin": {"http://localhost:3000"}}, "", 200},
		{"a rebound DNS name is refused", nil, "evil.example:" + portOf(s.servers.Addr(listen).String()), 403},
		{"localhost by name is served", nil, "localhost:" + portOf(s.servers.Addr(listen).String()), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", base+"/echo", nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if o := tc.header.Get("Origin"); tc.want == 200 && o != "" && resp.Header.Get("Access-Control-Allow-Origin") != o {
				t.Fatalf("Access-Control-Allow-Origin = %q", resp.Header.Get("Access-Control-Allow-Origin"))
			}
		})
	}
	t.Run("with keys any origin may call with a key", func(t *testing.T) {
		_, base := keyedDoor(t)
		h := bearer(testKeys["alice"])
		h.Set("Origin", "https://app.example")
		status, got, _, resp := do(t, "GET", base+"/echo", h, "")
		if status != 200 || got.Caller != "alice" || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
			t.Fatalf("status %d, caller %q, allow-origin %q", status, got.Caller, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	})
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func TestAuthBeforeBody(t *testing.T) {
	_, base := keyedDoor(t)
	host := strings.TrimPrefix(base, "http://")
	t.Run("a caller without a key is answered before its body is sent, and the door reads none of it", func(t *testing.T) {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Announces a gigabyte and sends 10 bytes of it.
		fmt.Fprintf(conn, "POST /echo/greedy HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer wrong\r\nContent-Length: 1000000000\r\n\r\n0123456789", host)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer while the body is still owed: %v", err)
		}
		var got seen
		decodeJSON(t, resp, &got)
		if resp.StatusCode != 401 || got.BodyBytes != 0 || !strings.Contains(got.ReadError, "API key") {
			t.Fatalf("status %d, the door read %d bytes (error %q)", resp.StatusCode, got.BodyBytes, got.ReadError)
		}
	})
	t.Run("an authenticated body over the cap is cut at the cap", func(t *testing.T) {
		status, got, raw, _ := do(t, "POST", base+"/echo/greedy", bearer(testKeys["alice"]), strings.Repeat("x", 4096))
		if status != 413 || got.BodyBytes > 1024 {
			t.Fatalf("status %d, report %s", status, raw)
		}
	})
	t.Run("an authenticated body under the cap is read whole", func(t *testing.T) {
		status, got, raw, _ := do(t, "POST", base+"/echo/greedy", bearer(testKeys["alice"]), strings.Repeat("x", 1000))
		if status != 200 || got.BodyBytes != 1000 {
			t.Fatalf("status %d, report %s", status, raw)
		}
	})
}

// rawStatus sends a GET for a path Go's client would refuse to send.
func rawStatus(t *testing.T, base, path string) int {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestDoorServesTLSWithTheGatewaysCertificate(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	listen := anyLoopbackPort
	cfg := newConfig(t, true, "  echo: {listen: '"+listen+"'}\n")
	cfg.TLS = config.TLSConfig{CertFile: certFile, KeyFile: keyFile}
	s := serve(t, cfg)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addr := s.servers.Addr(listen).String()
	resp, err := client.Get("https://" + addr + "/k/" + testKeys["alice"] + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	var got seen
	decodeJSON(t, resp, &got)
	if resp.StatusCode != 200 || got.Caller != "alice" || resp.TLS == nil {
		t.Fatalf("status %d, caller %q over TLS %v", resp.StatusCode, got.Caller, resp.TLS != nil)
	}
	// Go's TLS server answers plain HTTP with a 400, never the door.
	if plain, err := http.Get("http://" + addr + "/k/" + testKeys["alice"] + "/echo"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == 200 {
			t.Fatal("the TLS listener served plain HTTP")
		}
	}
}

// selfSigned returns a PEM certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// jwtShaped looks like a signed JWT; the token doors of these tests
// accept it, so only the plumbing can be what refuses it.
const jwtShaped = "eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.eyJzdWIiOiJjYXJvbCJ9.c2lnbmF0dXJl"

// tokenDoorServed serves the echo door as a BearerVerifier of jwtShaped
// (carol) and "tok-dave" (dave), with or without auth.keys.
func tokenDoorServed(t *testing.T, withKeys bool) (*served, string, *tokenDoor) {
	t.Helper()
	listen := anyLoopbackPort
	s := serve(t, newConfig(t, withKeys, "  echo: {listen: '"+listen+"', tokens: {'"+jwtShaped+"': carol, tok-dave: dave}}\n"))
	doors := s.servers.Doors()
	if len(doors) != 1 {
		t.Fatalf("%d doors opened", len(doors))
	}
	td, ok := doors[0].(*tokenDoor)
	if !ok {
		t.Fatalf("the door opened as %T", doors[0])
	}
	return s, s.url(t, listen), td
}

func TestVerifierTriedOnlyWhenNoKeyMatches(t *testing.T) {
	s, base, door := tokenDoorServed(t, true)
	for _, tc := range []struct {
		name, path         string
		header             http.Header
		wantStatus         int
		wantCaller, method string
		wantTried          int64
		wantRefusal        string
	}{
		{"an API key is the key's caller and the verifier is not asked", "/echo", bearer(testKeys["alice"]), 200, "alice", "", 0, ""},
		{"an API key in the path is the key's caller and the verifier is not asked", "/k/" + testKeys["alice"] + "/echo", nil, 200, "alice", "", 0, ""},
		{"a bearer token the verifier accepts is its caller with its identity", "/echo", bearer(jwtShaped), 200, "carol", "test", 1, ""},
		{"a bearer token the verifier refuses is 401 with the verifier's own error", "/echo", bearer("eyJ.forged.token"), 401, "", "", 1, "unknown token"},
		{"a token in the /k/ path is refused and never shown to the verifier", "/k/" + jwtShaped + "/echo", nil, 401, "", "", 0, ""},
		{"a token in the path and the header alike is refused and never shown to the verifier", "/k/" + jwtShaped + "/echo", bearer(jwtShaped), 401, "", "", 0, ""},
		{"a bearer token with a wrong path key is refused before any verifier", "/k/wrong/echo", bearer(jwtShaped), 401, "", "", 0, ""},
		{"a request with no credential is refused without asking the verifier", "/echo", nil, 401, "", "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := door.tried.Load()
			status, got, raw, _ := do(t, "GET", base+tc.path, tc.header, "")
			if status != tc.wantStatus || got.Caller != tc.wantCaller || got.Method != tc.method {
				t.Fatalf("status %d, report %s; want %d, caller %q, method %q", status, raw, tc.wantStatus, tc.wantCaller, tc.method)
			}
			if n := door.tried.Load() - before; n != tc.wantTried {
				t.Fatalf("the verifier was asked %d times, want %d", n, tc.wantTried)
			}
			if got.Refusal != tc.wantRefusal || got.AuthHeader != "" {
				t.Fatalf("refusal %q (want %q), Authorization reaching the door %q", got.Refusal, tc.wantRefusal, got.AuthHeader)
			}
			if status == 401 && !strings.Contains(got.AuthError, "frontdoor:") {
				t.Fatalf("auth error %q does not wrap ErrUnauthenticated", got.AuthError)
			}
		})
	}
	t.Run("the verified caller's groups reach the door", func(t *testing.T) {
		_, got, _, _ := do(t, "GET", base+"/echo", bearer("tok-dave"), "")
		if got.Caller != "dave" || len(got.Groups) != 1 || got.Groups[0] != "group-of-dave" {
			t.Fatalf("report %+v", got)
		}
	})
	if logs := s.logs.String(); !strings.Contains(logs, "front door request") || strings.Contains(logs, jwtShaped) || strings.Contains(logs, "tok-dave") {
		t.Fatalf("no access log, or a token in it:\n%s", logs)
	}
}

func TestVerifierRequiresAuthWithoutKeys(t *testing.T) {
	_, base, door := tokenDoorServed(t, false)
	port := portOf(strings.TrimPrefix(base, "http://"))
	for _, tc := range []struct {
		name       string
		header     http.Header
		host       string
		wantStatus int
		wantCaller string
	}{
		{"a request without a token is refused, not anonymous", nil, "", 401, ""},
		{"any bearer value is not taken for the anonymous caller", bearer("anything"), "", 401, ""},
		{"a token the verifier accepts is its caller", bearer("tok-dave"), "", 200, "dave"},
		{"a non-loopback host name is served to a verified caller", bearer("tok-dave"), "gw.example:" + port, 200, "dave"},
		{"any origin may call with a token", http.Header{"Authorization": {"Bearer tok-dave"}, "Origin": {"https://app.example"}}, "", 200, "dave"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", base+"/echo", nil)
			req.Header = tc.header.Clone()
			if req.Header == nil {
				req.Header = http.Header{}
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got seen
			decodeJSON(t, resp, &got)
			if resp.StatusCode != tc.wantStatus || got.Caller != tc.wantCaller {
				t.Fatalf("status %d, report %+v; want %d and caller %q", resp.StatusCode, got, tc.wantStatus, tc.wantCaller)
			}
			if o := tc.header.Get("Origin"); o != "" && resp.Header.Get("Access-Control-Allow-Origin") != o {
				t.Fatalf("Access-Control-Allow-Origin = %q", resp.Header.Get("Access-Control-Allow-Origin"))
			}
		})
	}
	if door.tried.Load() == 0 {
		t.Fatal("the verifier was never asked")
	}
}

func TestDoorClaimingAuthWithoutVerifierIsNotServed(t *testing.T) {
	listen := anyLoopbackPort
	cfg := newConfig(t, false, "  echo: {listen: '"+listen+"', no_verifier: true}\n")
	g, closer, err := gateway.Build(context.Background(), cfg, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := frontdoor.Serve(context.Background(), cfg, g, doors, nil)
	if err == nil {
		srv.Shutdown(context.Background())
		t.Fatal("a door that says it authenticates callers but verifies nothing was served")
	}
	if !strings.Contains(err.Error(), "front_doors.echo") || !strings.Contains(err.Error(), "verifies no bearer token") {
		t.Fatalf("Serve error = %v", err)
	}
}

func TestDrainRunsBeforeShutdownWaits(t *testing.T) {
	listen := anyLoopbackPort
	s := serve(t, newConfig(t, false, "  echo: {listen: '"+listen+"', park: true}\n"))
	base := s.url(t, listen)
	door, ok := s.servers.Doors()[0].(*parkDoor)
	if !ok {
		t.Fatalf("the door opened as %T", s.servers.Doors()[0])
	}
	statusc := make(chan int, 1)
	go func() {
		resp, err := noRedirects.Get(base + "/echo/park")
		if err != nil {
			statusc <- 0
			return
		}
		resp.Body.Close()
		statusc <- resp.StatusCode
	}()
	select {
	case <-door.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the parked request never reached the door")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.servers.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown waited for the parked request until %v: %v", time.Since(start), err)
	}
	select {
	case <-door.drained:
	default:
		t.Fatal("Shutdown returned without draining the door")
	}
	if got := <-statusc; got != http.StatusServiceUnavailable {
		t.Fatalf("the parked request ended with status %d, want the door's drained answer 503", got)
	}
}
