package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/syncbuf"
)

// plumbingProbe is a door kind of this test binary only: it reports what
// reached it (caller, path, headers, body bytes), so the attacks below can
// tell what the plumbing let through.
func init() {
	frontdoor.Register(frontdoor.Kind{Name: "probe", New: func() frontdoor.Config { return &probeConfig{} }})
}

type probeConfig struct {
	frontdoor.Listener `yaml:",inline"`
}

func (c *probeConfig) Open(frontdoor.Deps) (frontdoor.Door, error) { return probeDoor{}, nil }

type probeDoor struct{}

func (probeDoor) Routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		n, readErr := io.Copy(io.Discard, r.Body)
		caller, err := frontdoor.CallerFrom(r.Context())
		status := http.StatusOK
		if err != nil {
			status = http.StatusUnauthorized
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"caller": caller, "path": r.URL.Path, "uri": r.RequestURI,
			"authorization": r.Header.Get("Authorization"), "body_bytes": n, "read_error": fmt.Sprint(readErr)})
	})
}

const probeKey = "probe-key-that-must-stay-secret"

// probeServer serves the probe door on loopback, with or without a key,
// and returns its base URL and the gateway's debug log.
func probeServer(t *testing.T, withKey bool) (string, *syncbuf.Buffer) {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, "permit (principal, action, resource);\n")
	y := "listen: 127.0.0.1:0\npolicies: {dir: " + filepath.Join(dir, "policies") + "}\n" +
		"evidence: {url: 'mem://', spool_dir: none, signing_key: none}\ndrivers: {}\n" +
		"front_doors: {probe: {listen: '127.0.0.1:0'}}\n"
	if withKey {
		y += "auth: {keys: [{caller: ci, env: PROBE_KEY}]}\n"
	}
	cfg, err := config.ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	getenv := func(name string) string {
		if name == "PROBE_KEY" {
			return probeKey
		}
		return ""
	}
	g, closer, err := gateway.Build(context.Background(), cfg, getenv, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := frontdoor.Serve(context.Background(), cfg, g, doors, g.Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + srv.Addr("127.0.0.1:0").String(), logs
}

// probe posts body to base+path and returns the status and the door's
// report (empty when the plumbing answered).
func probe(t *testing.T, base, path string, header http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return fmt.Errorf("redirected to %s", req.URL.Redacted())
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var got map[string]any
	json.NewDecoder(resp.Body).Decode(&got)
	return resp.StatusCode, got
}

// TestHostileFrontDoorKeys (front doors, class: credentials): a key sent
// in the URL path or a header never reaches a door, a log or a redirect,
// and two keys disagreeing get nobody in.
func TestHostileFrontDoorKeys(t *testing.T) {
	t.Parallel()
	base, logs := probeServer(t, true)
	t.Run("a path key authenticates and the door sees neither it nor the header", func(t *testing.T) {
		status, got := probe(t, base, "/k/"+probeKey+"//run", http.Header{"Authorization": {"Bearer " + probeKey}}, "{}")
		if status != 200 || got["caller"] != "ci" || got["path"] != "/run" {
			t.Fatalf("status %d, door saw %v", status, got)
		}
		if strings.Contains(fmt.Sprint(got), probeKey) {
			t.Fatalf("the door saw the key: %v", got)
		}
	})
	t.Run("a wrong path key beside the right bearer key is refused", func(t *testing.T) {
		status, got := probe(t, base, "/k/guess/run", http.Header{"Authorization": {"Bearer " + probeKey}}, "{}")
		if status != 401 || got["caller"] != "" {
			t.Fatalf("status %d, door saw %v", status, got)
		}
	})
	t.Run("a guessed key is refused", func(t *testing.T) {
		if status, _ := probe(t, base, "/k/"+probeKey[:10]+"/run", nil, "{}"); status != 401 {
			t.Fatalf("status %d", status)
		}
	})
	t.Run("no key of any request is in the debug log", func(t *testing.T) {
		if !strings.Contains(logs.String(), "front door request") {
			t.Fatalf("no access log at debug level:\n%s", logs)
		}
		if strings.Contains(logs.String(), probeKey) || strings.Contains(logs.String(), probeKey[:10]) {
			t.Fatalf("a key is in the log:\n%s", logs)
		}
	})
}

// TestHostileFrontDoorBrowser (front doors, class: cross-origin): without
// auth.keys a web page open in the operator's browser cannot drive the
// gateway, by Origin or by a rebound DNS name.
func TestHostileFrontDoorBrowser(t *testing.T) {
	t.Parallel()
	base, _ := probeServer(t, false)
	t.Run("a page's cross-origin POST is refused before the door", func(t *testing.T) {
		status, got := probe(t, base, "/run", http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"text/plain"}}, "{}")
		if status != 403 || got["caller"] != nil {
			t.Fatalf("status %d, door saw %v", status, got)
		}
	})
	t.Run("a rebound DNS name is refused before the door", func(t *testing.T) {
		req, _ := http.NewRequest("POST", base+"/run", strings.NewReader("{}"))
		req.Host = "evil.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("a local client without an Origin is served", func(t *testing.T) {
		if status, got := probe(t, base, "/run", nil, "{}"); status != 200 || got["caller"] != gateway.AnonymousCaller {
			t.Fatalf("status %d, door saw %v", status, got)
		}
	})
}

// TestHostileFrontDoorBody (front doors, class: resource use): a caller
// without a key is answered before it sends its body, of which nothing is
// read; a keyed caller's body is capped.
func TestHostileFrontDoorBody(t *testing.T) {
	t.Parallel()
	base, _ := probeServer(t, true)
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /run HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000000\r\n\r\n{", host)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a keyless caller still owing its body: %v", err)
	}
	var got map[string]any
	json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != 401 || got["body_bytes"] != float64(0) {
		t.Fatalf("status %d, door saw %v", resp.StatusCode, got)
	}
	status, got := probe(t, base, "/run", http.Header{"Authorization": {"Bearer " + probeKey}}, strings.Repeat("x", 3<<20))
	if n, ok := got["body_bytes"].(float64); !ok || n > float64(frontdoor.DefaultMaxBodyBytes) {
		t.Fatalf("status %d: the door read %v bytes past the 2 MiB cap", status, got["body_bytes"])
	}
}

// TestHostileFrontDoorConfiguration (front doors, class: configuration):
// the binary refuses, before it serves, a door it does not have and a
// misspelt key of a driver section; every door it has refuses a misspelt
// key rather than ignoring it.
func TestHostileFrontDoorConfiguration(t *testing.T) {
	t.Parallel()
	for _, kind := range frontdoor.Kinds() {
		t.Run("a misspelt key of the "+kind+" door", func(t *testing.T) {
			cfg, err := config.ParseConfig([]byte("listen: 127.0.0.1:50051\nfront_doors:\n  " + kind + ":\n    listen: 127.0.0.1:8787\n    cors_origin: ['*']\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = frontdoor.Load(cfg)
			if err == nil || !strings.Contains(err.Error(), "front_doors."+kind) || !strings.Contains(err.Error(), "line 5: field cors_origin not found") {
				t.Fatalf("Load = %v, want the misspelt key refused at its line", err)
			}
		})
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"a door this binary does not have", "front_doors: {nosuch: {listen: '127.0.0.1:0'}}\n", "front_doors.nosuch: unknown front door"},
		{"a misspelt sandbox key of a workspace", "drivers: {workspace: {type: workspace, root: ./ws, sandbx: none}}\n", "field sandbx not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePolicy(t, dir, "permit (principal, action, resource);\n")
			if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte("policies: {dir: ./policies}\n"+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			if stderr := serveMustRefuse(t, dir, "--config", "toolgate.yaml"); !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}
