package mcpdoor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

// rawListen posts a 2026-07-28 subscriptions/listen as caller key and
// returns what the door answers within ten seconds: a refusal comes at
// once, and a stream that was let through never ends by itself.
func (e *testEnv) rawListen(key string) string {
	e.t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}}}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, strings.NewReader(body))
	must(e.t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	must(e.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// openListens is how many subscriptions/listen streams caller holds.
func (e *testEnv) openListens(caller string) int {
	e.door.mu.Lock()
	defer e.door.mu.Unlock()
	return e.door.listens[caller]
}

// waitListens waits until caller holds n streams.
func (e *testEnv) waitListens(caller string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.openListens(caller) != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s holds %d listen streams, want %d", caller, e.openListens(caller), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPolicyReloadSendsListChanged(t *testing.T) {
	e := newTestEnv(t, nil)
	changed := make(chan struct{}, 1)
	cs := e.connect(clientOptions{key: agentKey, listChanged: changed})
	e.waitListens("agent", 1)
	e.writePolicy(testPolicy + `
@id("allow_hidden") permit (principal, action == Action::"RunTool", resource == Tool::"hidden");`)
	e.gw.reload(t)
	select {
	case <-changed:
	case <-time.After(15 * time.Second):
		// Liveness, not speed: a loaded machine may take a while.
		t.Fatal("no notifications/tools/list_changed within 15s of the reload")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	must(t, err)
	if !slices.ContainsFunc(res.Tools, func(tl *mcp.Tool) bool { return tl.Name == "hidden" }) {
		var names []string
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
		}
		t.Errorf("after the reload the list %v lacks the newly allowed tool", names)
	}
}

func TestListenStreamsAreCappedPerCaller(t *testing.T) {
	e := newTestEnv(t, nil)
	changed := make(chan struct{}, 1)
	var sessions []interface{ Close() error }
	for range MaxListensPerCaller {
		sessions = append(sessions, e.connect(clientOptions{key: agentKey, listChanged: changed}))
	}
	e.waitListens("agent", MaxListensPerCaller)
	// The SDK client does not wait for a listen's answer, so the fifth is
	// sent by hand, to read the refusal.
	if body := e.rawListen(agentKey); !strings.Contains(body, `"code":-32011`) {
		t.Fatalf("a fifth listen stream was answered %q, want error -32011", body)
	}
	e.connect(clientOptions{key: agentKey, listChanged: changed})
	time.Sleep(50 * time.Millisecond)
	e.waitListens("agent", MaxListensPerCaller)
	// The cap is per caller.
	e.connect(clientOptions{key: aliceKey, listChanged: changed})
	e.waitListens("alice", 1)
	// A closed stream frees its slot.
	must(t, sessions[0].Close())
	e.waitListens("agent", MaxListensPerCaller-1)
	e.connect(clientOptions{key: agentKey, listChanged: changed})
	e.waitListens("agent", MaxListensPerCaller)
}

func TestDrainEndsListenStreamsSoShutdownFinishes(t *testing.T) {
	e := newTestEnv(t, nil)
	e.connect(clientOptions{key: agentKey, listChanged: make(chan struct{}, 1)})
	e.waitListens("agent", 1)
	// Without Drain, shutdown waits on the stream.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.srv.Config.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown with an open listen stream: %v, want it to wait", err)
	}
	e.door.Drain()
	// A held stream would hold shutdown until ctx ends; the bound is far
	// from both a loaded machine's seconds and that.
	ctx, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	start := time.Now()
	if err := e.srv.Config.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown after Drain: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown after Drain took %s", d)
	}
	e.waitListens("agent", 0)
}

func TestServedByTheFrontDoorServersWhichDrainItOnShutdown(t *testing.T) {
	e := newTestEnv(t, nil)
	cfg, err := config.ParseConfig([]byte("front_doors:\n  mcp: {listen: '127.0.0.1:0'}\n"))
	must(t, err)
	doors, err := frontdoor.Load(cfg)
	must(t, err)
	servers, err := frontdoor.Serve(context.Background(), cfg, e.gw.Gateway, doors, nil)
	must(t, err)
	e.url = "http://" + servers.Addr("127.0.0.1:0").String() + Path
	changed := make(chan struct{}, 1)
	cs := e.connect(clientOptions{key: agentKey, listChanged: changed})
	res := call(t, cs, "echo", map[string]any{"text": "served"}, nil)
	if res.IsError || text(res) != "served" {
		t.Fatalf("isError %v, text %q", res.IsError, text(res))
	}
	served, ok := servers.Doors()[0].(*Door)
	if !ok {
		t.Fatalf("served door %T", servers.Doors()[0])
	}
	e.door = served
	e.waitListens("agent", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := servers.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a listen stream open: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %s: the listen stream held it", d)
	}
}
