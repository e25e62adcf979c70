package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

var maxConnsPattern = regexp.MustCompile(`msg="toolgate serving".* max_connections=(\d+)`)

// TestHostileIdleConnectionFlood (class 6): 600 idle connections, half to
// the gRPC listener and half to a door, against a gateway limited to 512
// file descriptors. The connection cap is derived from that limit, so the
// gateway never runs out of descriptors, and idle connections are shed
// for new ones: a legitimate RunTool and a door call made right after
// succeed within 5 s, although the idle connections would only time out
// after 10 s (the door's header timeout) and 60 s (the handshake
// timeout). Before the cap was derived, accept failed with EMFILE and the
// calls waited for the idle connections to go.
func TestHostileIdleConnectionFlood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	cfg := `
auth:
  keys:
    - {caller: alice, env: TOOLGATE_HOSTILE_KEY}
evidence: {url: file://./evidence}
drivers:
  workspace: {type: workspace, root: ./ws}
limits:
  handshake_timeout: 60s
front_doors:
  tpmjs: {listen: 127.0.0.1:0, catalog_package: _catalog}
`
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600))
	must(os.MkdirAll(filepath.Join(dir, "ws"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "ws", "notes.txt"), []byte("hello from the workspace\n"), 0o600))
	// sh's ulimit -n sets the soft and the hard limit: the gateway cannot
	// raise it.
	srv, err := launchWrapped(t, dir, []string{"TOOLGATE_HOSTILE_KEY=" + hostileKey},
		[]string{"sh", "-c", `ulimit -n 512 && exec "$0" "$@"`}, "--config", "toolgate.yaml")
	must(err)
	m := maxConnsPattern.FindStringSubmatch(srv.log.String())
	if m == nil {
		t.Fatalf("the start line does not say max_connections:\n%s", srv.log.String())
	}
	t.Logf("max_connections under a 512-descriptor limit: %s", m[1])
	door := srv.doors["tpmjs"]
	waitListening(t, srv.doorURL(t, "tpmjs")+"/health")

	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for i := range 600 {
		addr := srv.addr
		if i%2 == 1 {
			addr = door
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}

	t.Run("a RunTool on a new connection succeeds within 5s", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(keyed(context.Background()), 5*time.Second)
		defer cancel()
		args, _ := structpb.NewStruct(map[string]any{"path": "notes.txt"})
		resp, err := toolgatev1.NewToolGatewayClient(hostileConn(t, srv.addr)).RunTool(ctx,
			&toolgatev1.RunToolRequest{RequestId: "after-flood", ToolId: "workspace.readFile", Args: args})
		if err != nil || !resp.GetOk() || !strings.Contains(resp.GetToolResult().GetStdout(), "hello from the workspace") {
			t.Fatalf("got %v, %v", resp, err)
		}
	})
	t.Run("a door call on a new connection succeeds within 5s", func(t *testing.T) {
		client := &http.Client{Timeout: 5 * time.Second}
		req, err := http.NewRequest(http.MethodPost, "http://"+door+"/execute-tool",
			strings.NewReader(`{"packageName":"_catalog","name":"workspace.readFile","params":{"path":"notes.txt"}}`))
		must(err)
		req.Header.Set("Authorization", "Bearer "+hostileKey)
		req.Header.Set("Idempotency-Key", "door-after-flood")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("the door call: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), `{"success":true`) {
			t.Fatalf("the door call: %d %.300s", resp.StatusCode, body)
		}
	})
	if strings.Contains(srv.log.String(), "too many open files") {
		t.Fatalf("the gateway ran out of file descriptors:\n%.2000s", srv.log.String())
	}
}
