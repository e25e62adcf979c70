package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// catalogGateway is a gateway without a listener over the given drivers
// and tools, judged by policyText.
func catalogGateway(t *testing.T, drvs map[string]drivers.Driver, tools map[string]Tool, policyText string) *Gateway {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.default.cedar"), []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	engine, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := callerauth.New(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth,
		Drivers: drvs, Tools: tools, Instance: "test-host"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// helloCatalog has a TPMJS-style tool whose id is not its export name, a
// tool policy forbids, and a tool holding a secret in its environment.
func helloCatalog() map[string]Tool {
	return map[string]Tool{
		"hello": {Driver: "fake", Target: "helloWorldTool", Package: "@tpmjs/hello", Version: "1.2.3",
			Description: "says hello", Tags: []string{"demo"}, CallerEnv: []string{"OPENAI_API_KEY"},
			Env: map[string]string{"GATEWAY_KEY": "sk-gateway-secret-value-0123456789"}},
		"helloForbidden": {Driver: "fake", Target: "helloWorldTool", Package: "@tpmjs/other"},
	}
}

const forbidOther = `
@id("allow_all") permit (principal, action, resource);
@id("no_other") @reason("not this one")
forbid (principal, action, resource) when { resource has package && resource.package == "@tpmjs/other" };
`

func TestListToolsAsFindsATPMJSToolByExportName(t *testing.T) {
	t.Parallel()
	g := catalogGateway(t, map[string]drivers.Driver{"fake": &countingDriver{}}, helloCatalog(), forbidOther)
	resp, err := g.ListToolsAs(context.Background(), AnonymousCaller, nil, &toolgatev1.ListToolsRequest{Query: "helloWorldTool"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tool := range resp.GetTools() {
		ids = append(ids, tool.GetToolId())
	}
	if strings.Join(ids, ",") != "hello" {
		t.Errorf("the export name found %v, want only hello (helloForbidden is forbidden by policy)", ids)
	}
	_, err = g.ListToolsAs(context.Background(), "", nil, &toolgatev1.ListToolsRequest{})
	wantCode(t, err, codes.Unauthenticated, "caller")
}

func TestListToolsIsListToolsAsForTheAuthenticatedCaller(t *testing.T) {
	t.Parallel()
	g := catalogGateway(t, map[string]drivers.Driver{"fake": &countingDriver{}}, helloCatalog(), forbidOther)
	viaGRPC, err := g.ListTools(context.Background(), &toolgatev1.ListToolsRequest{Query: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	viaDoor, err := g.ListToolsAs(context.Background(), AnonymousCaller, nil, &toolgatev1.ListToolsRequest{Query: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(viaGRPC.GetTools()) != fmt.Sprint(viaDoor.GetTools()) {
		t.Errorf("ListTools %v, ListToolsAs %v", viaGRPC.GetTools(), viaDoor.GetTools())
	}
}

func TestCatalogListsNamesButNeverEnvironmentValues(t *testing.T) {
	t.Parallel()
	g := catalogGateway(t, map[string]drivers.Driver{"fake": &countingDriver{}}, helloCatalog(), forbidOther)
	cat := g.Catalog()
	if len(cat) != 2 || cat[0].ID != "hello" || cat[1].ID != "helloForbidden" {
		t.Fatalf("catalog %+v, want hello and helloForbidden in that order", cat)
	}
	want := CatalogEntry{ID: "hello", Driver: "fake", Target: "helloWorldTool", Package: "@tpmjs/hello", Version: "1.2.3",
		Description: "says hello", Tags: []string{"demo"}, CallerEnv: []string{"OPENAI_API_KEY"},
		InputSchema: json.RawMessage(`{"properties":{"_env":{"additionalProperties":false,"description":"environment variables of the call",` +
			`"properties":{"OPENAI_API_KEY":{"type":"string"}},"type":"object"}},"type":"object"}`)}
	if fmt.Sprintf("%#v", cat[0]) != fmt.Sprintf("%#v", want) {
		t.Errorf("entry %#v, want %#v", cat[0], want)
	}
	if dump := fmt.Sprintf("%#v", cat); strings.Contains(dump, "sk-gateway-secret") || strings.Contains(dump, "GATEWAY_KEY") {
		t.Errorf("the catalog shows the gateway's tool environment: %s", dump)
	}
	cat[0].Tags[0] = "changed"
	if g.Catalog()[0].Tags[0] != "demo" {
		t.Error("a door changing its copy of the catalog changed the gateway's")
	}
}

func TestCallerForKeyMatchesAuthenticate(t *testing.T) {
	t.Parallel()
	const aliceKey, bobKey = "alice-key-0123456789abcdef", "bob-key-9876543210fedcba"
	keys := []config.KeyConfig{{Caller: "alice", Env: "ALICE_KEY"}, {Caller: "bob", SHA256: sha256Hex(bobKey)}}
	auth, err := callerauth.New(keys, func(name string) string {
		return map[string]string{"ALICE_KEY": aliceKey}[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, caller string
	}{
		{"alice's key is alice", aliceKey, "alice"},
		{"bob's key, known by its digest, is bob", bobKey, "bob"},
		{"white space around a key is trimmed as in a bearer header", "  " + aliceKey + "\t", "alice"},
		{"an unknown key is nobody", "mallory-key", ""},
		{"a prefix of a key is nobody", aliceKey[:len(aliceKey)-1], ""},
		{"a key with more after it is nobody", aliceKey + "x", ""},
		{"a key differing in case is nobody", strings.ToUpper(aliceKey), ""},
		{"bob's digest itself is not a key", sha256Hex(bobKey), ""},
		{"an empty key is nobody", "", ""},
		{"white space alone is nobody", "   ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caller, ok := auth.CallerForKey(tc.key)
			if caller != tc.caller || ok != (tc.caller != "") {
				t.Errorf("CallerForKey = %q, %v; want %q", caller, ok, tc.caller)
			}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tc.key))
			viaBearer, err := auth.Authenticate(ctx)
			if viaBearer != caller || (err == nil) != ok {
				t.Errorf("Authenticate = %q, %v; CallerForKey = %q, %v", viaBearer, err, caller, ok)
			}
		})
	}
	t.Run("every configured key is compared, also after a match, so the time taken does not tell which matched", func(t *testing.T) {
		// Two entries share a digest: a loop that stopped at the first
		// match would answer alice; the full comparison ends on bob.
		both, err := callerauth.New([]config.KeyConfig{
			{Caller: "alice", SHA256: sha256Hex(aliceKey)}, {Caller: "bob", SHA256: sha256Hex(aliceKey)},
		}, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		if caller, _ := both.CallerForKey(aliceKey); caller != "bob" {
			t.Errorf("CallerForKey = %q: the comparison stopped at the first matching key", caller)
		}
	})
	t.Run("with authentication off every key is the anonymous caller", func(t *testing.T) {
		off, err := callerauth.New(nil, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"", aliceKey, "anything"} {
			if caller, ok := off.CallerForKey(key); caller != AnonymousCaller || !ok {
				t.Errorf("CallerForKey(%q) = %q, %v with authentication off", key, caller, ok)
			}
		}
	})
}

// TestACallersKeyIsNeverLoggedNorRecorded runs calls through a door's
// path (CallerForKey, then Run) and over gRPC with a right and a wrong
// key, and looks for the keys everywhere a key could leak: the logs, the
// status messages and every byte of evidence.
func TestACallersKeyIsNeverLoggedNorRecorded(t *testing.T) {
	t.Parallel()
	const key, wrong = "door-caller-key-5f1e2d3c4b5a", "wrong-caller-key-a5b4c3d2e1f0"
	var logs bytes.Buffer
	e := newEnv(t, envOptions{
		keys:   []config.KeyConfig{{Caller: "agent", SHA256: sha256Hex(key)}},
		logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	caller, ok := e.gw.CallerForKey(key)
	if !ok || caller != "agent" {
		t.Fatalf("CallerForKey = %q, %v", caller, ok)
	}
	if _, ok := e.gw.CallerForKey(wrong); ok {
		t.Fatal("a wrong key was accepted")
	}
	args, err := structpb.NewStruct(map[string]any{"path": "missing.txt"})
	if err != nil {
		t.Fatal(err)
	}
	req := &toolgatev1.RunToolRequest{RequestId: "key-leak-1", ToolId: "workspace.readFile", Args: args}
	if _, err := e.gw.Run(context.Background(), caller, Call{FrontDoor: "tpmjs", Request: req}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "front_door=tpmjs") {
		t.Errorf("the call's log lines do not name its front door:\n%s", logs.String())
	}
	var messages []string
	for _, k := range []string{key, wrong} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+k)
		_, err := e.client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: "key-leak-2", ToolId: "workspace.readFile", Args: args})
		messages = append(messages, fmt.Sprint(err))
	}
	var stored []string
	err = filepath.Walk(e.evidenceDir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		stored = append(stored, string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 {
		t.Fatal("no evidence was written")
	}
	for _, k := range []string{key, wrong} {
		for where, text := range map[string]string{
			"the logs": logs.String(), "a status message": strings.Join(messages, "\n"), "the evidence": strings.Join(stored, "\n"),
		} {
			if strings.Contains(text, k) {
				t.Errorf("the key %q appears in %s", k, where)
			}
		}
	}
}

func TestDriverHealthNeverBlocks(t *testing.T) {
	t.Parallel()
	// The first probe's /health hangs until the driver closes at the
	// test's end, however slowly a loaded machine gets to DriverHealth.
	exec := tpmjstest.New(t, tpmjstest.NodeV10)
	// The first probe hangs for the whole test, however slow the machine:
	// closing the driver and the executor ends it.
	exec.SetHealthDelay(time.Hour)
	slow, err := tpmjs.New(tpmjs.Config{URL: exec.URL, HealthTimeout: time.Hour, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	slow.Start(context.Background())
	ws, err := workspace.New(workspace.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	g := catalogGateway(t, map[string]drivers.Driver{"tpmjs": slow, "workspace": ws, "plain": &countingDriver{}},
		nil, `@id("allow_all") permit (principal, action, resource);`)
	waitFor(t, func() bool {
		for _, r := range exec.Requests() {
			if strings.HasSuffix(r.Path, "/health") {
				return true
			}
		}
		return false
	})
	// The probe now waits on /health.
	start := time.Now()
	health := g.DriverHealth()
	// The probe hangs for an hour: a second is far from waiting on it,
	// and far above what a loaded machine takes to read a cached report.
	if took := time.Since(start); took > time.Second {
		t.Errorf("DriverHealth took %v while the executor's /health hung; want it not to wait on the probe", took)
	}
	if h := health["tpmjs"]; !h.Healthy || h.Detail != "not probed yet" || !h.CheckedAt.IsZero() {
		t.Errorf("tpmjs health while the first probe hangs: %+v", h)
	}
	if h := health["workspace"]; !h.Healthy || h.Engine != "workspace" {
		t.Errorf("workspace health: %+v", h)
	}
	if h := health["plain"]; !h.Healthy || h.Engine != "counting" || h.Detail == "" {
		t.Errorf("a driver without a health report: %+v", h)
	}
}
