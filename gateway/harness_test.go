package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/execbox/execboxtest"
	"github.com/toolgate/toolgate/drivers/workspace"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/telemetry"
	"github.com/toolgate/toolgate/gateway/wire"
	"github.com/toolgate/toolgate/policy"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// permitWorkspace allows every workspace tool; tests that need a deny use
// their own policy text.
const permitWorkspace = `
@id("allow_workspace")
@reason("tests may use the workspace")
permit (principal, action, resource in Driver::"workspace");
`

// env is a running gateway on a loopback listener with real policy, a real
// file evidence store and a real workspace driver.
type env struct {
	t           *testing.T
	evidenceDir string
	workspace   string
	store       evidence.Store
	gw          *Gateway
	conn        *grpc.ClientConn
	client      toolgatev1.ToolGatewayClient
}

type envOptions struct {
	policies map[string]string // file name → contents
	store    evidence.Store    // default: a FileStore in a temp dir
	keys     []config.KeyConfig
	getenv   func(string) string
	extra    map[string]drivers.Driver // more drivers, each serving tool "<name>.run"
	secrets  []string
	spoolDir string // set: spool post-decision artifacts there
	signer   *evidence.Signer
	shadows  map[string]string
	// selectable is Options.Selectable.
	selectable []config.PolicySelection
	// limits is Options.Limits.
	limits config.LimitsConfig
	// now is Options.Now: a fixed clock makes evidence comparable byte
	// for byte.
	now func() time.Time
	// logger is Options.Logger.
	logger *slog.Logger
	// telemetry is Options.Telemetry.
	telemetry *telemetry.Telemetry
	// instance is Options.Instance; default "test-host".
	instance string
	// trustedKeys and sharedMAC are Options.TrustedKeys and
	// Options.SharedMACKey.
	trustedKeys []ed25519.PublicKey
	sharedMAC   []byte
	// lease is Options.Lease; its instance must be "test-host".
	lease *lease.Lease
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, evidenceDir: filepath.Join(dir, "evidence"), workspace: filepath.Join(dir, "workspace")}

	polDir := filepath.Join(dir, "policies")
	if err := os.Mkdir(polDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if o.policies == nil {
		o.policies = map[string]string{"policy.default.cedar": permitWorkspace}
	}
	for name, text := range o.policies {
		if err := os.WriteFile(filepath.Join(polDir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	engine, err := policy.Load(polDir)
	if err != nil {
		t.Fatalf("load policies: %v", err)
	}

	e.store = o.store
	if e.store == nil {
		fs, err := evidence.NewFileStore(e.evidenceDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fs.Close() })
		e.store = fs
	}
	ws, err := workspace.New(workspace.Config{Root: e.workspace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	drvs := map[string]drivers.Driver{"workspace": ws}
	tools := map[string]Tool{}
	for _, op := range workspace.Operations() {
		tools["workspace."+op] = Tool{Driver: "workspace", Target: op}
	}
	for name, d := range o.extra {
		drvs[name] = d
		tools[name+".run"] = Tool{Driver: name, Target: "run"}
	}
	getenv := o.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	auth, err := callerauth.New(o.keys, getenv)
	if err != nil {
		t.Fatal(err)
	}
	red, err := redact.New(redact.Config{KnownSecrets: o.secrets})
	if err != nil {
		t.Fatal(err)
	}
	var spool *evidence.Spool
	if o.spoolDir != "" {
		if spool, err = evidence.OpenSpool(o.spoolDir); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { spool.Close() })
	}
	if o.instance == "" {
		o.instance = "test-host"
	}
	e.gw, err = New(Options{
		Decider: engine, Store: e.store, Spool: spool, Signer: o.signer, Redactor: red, Auth: auth,
		Drivers: drvs, Tools: tools, Instance: o.instance, Shadows: o.shadows, Selectable: o.selectable,
		Limits: o.limits, Now: o.now, Logger: o.logger, Telemetry: o.telemetry,
		TrustedKeys: o.trustedKeys, SharedMACKey: o.sharedMAC, Lease: o.lease,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.conn = serve(t, e.gw)
	e.client = toolgatev1.NewToolGatewayClient(e.conn)
	return e
}

// serve runs g on a loopback listener and returns a client connection.
func serve(t testing.TB, g *Gateway, register ...func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := g.NewServer()
	for _, r := range register {
		r(srv)
	}
	go srv.Serve(g.LimitListener(lis))
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (e *env) call(ctx context.Context, id, tool string, args map[string]any) (*toolgatev1.RunToolResponse, error) {
	e.t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: id, ToolId: tool, Args: s})
}

func (e *env) mustCall(id, tool string, args map[string]any) *toolgatev1.RunToolResponse {
	e.t.Helper()
	resp, err := e.call(context.Background(), id, tool, args)
	if err != nil {
		e.t.Fatalf("RunTool %s %s: %v", id, tool, err)
	}
	return resp
}

// artifact reads one stored artifact, failing the test if it is missing.
func (e *env) artifact(id, name string) []byte {
	e.t.Helper()
	b, err := e.store.Get(context.Background(), evidence.Key(id, name))
	if err != nil {
		e.t.Fatalf("artifact %s of %s: %v", name, id, err)
	}
	return b
}

// artifactNames lists the artifacts stored for a request.
func (e *env) artifactNames(id string) []string {
	e.t.Helper()
	keys, err := e.store.List(context.Background(), evidence.RequestPrefix(id))
	if err != nil {
		e.t.Fatal(err)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = strings.TrimPrefix(k, evidence.RequestPrefix(id))
	}
	sort.Strings(names)
	return names
}

// checkReplyIsStored asserts the reply is response.json decoded, and that the
// manifest verifies.
func (e *env) checkReplyIsStored(id string, reply *toolgatev1.RunToolResponse) {
	e.t.Helper()
	stored, err := wire.DecodeResponse(e.artifact(id, evidence.ArtifactResponse))
	if err != nil {
		e.t.Fatal(err)
	}
	if !proto.Equal(stored, reply) {
		e.t.Errorf("reply differs from stored response.json:\nreply:  %v\nstored: %v", reply, stored)
	}
	rep, err := evidence.Verify(context.Background(), e.store, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if rep.Status != "ok" {
		e.t.Errorf("verify %s: %s %v", id, rep.Status, rep.Problems)
	}
}

func wantCode(t *testing.T, err error, code codes.Code, msgContains string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Fatalf("status = %v %q, want %v", st.Code(), st.Message(), code)
	}
	if !strings.Contains(st.Message(), msgContains) {
		t.Fatalf("message %q does not mention %q", st.Message(), msgContains)
	}
}

func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return m
}

// countingDriver counts its runs; each run takes delay.
type countingDriver struct {
	runs  atomic.Int64
	delay time.Duration
	err   error
	out   drivers.Result
}

func (d *countingDriver) Engine() string { return "counting" }

func (d *countingDriver) Run(ctx context.Context, c drivers.Call) (drivers.Result, error) {
	d.runs.Add(1)
	select {
	case <-time.After(d.delay):
	case <-ctx.Done():
		return drivers.Result{}, ctx.Err()
	}
	return d.out, d.err
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func structWithNaN() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewNumberValue(math.NaN())}}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// makeReadOnly makes dir and everything below it unwritable, also for root
// (which ignores permission bits) by setting the immutable attribute.
func makeReadOnly(t *testing.T, dir string) {
	t.Helper()
	probe := func() bool {
		f, err := os.CreateTemp(dir, "probe")
		if err != nil {
			return false
		}
		f.Close()
		os.Remove(f.Name())
		return true
	}
	if err := exec.Command("chmod", "-R", "a-w", dir).Run(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("chmod", "-R", "u+w", dir).Run() })
	if !probe() {
		return
	}
	// Root: permission bits do not apply, the immutable attribute does.
	if out, err := exec.Command("chattr", "-R", "+i", dir).CombinedOutput(); err != nil {
		t.Fatalf("cannot make %s read-only for this user: chattr: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-R", "-i", dir).Run() })
	if probe() {
		t.Fatalf("%s is still writable after chmod and chattr +i", dir)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// flakyStore fails every Put while down is set, as a store that became
// unreachable does.
type flakyStore struct {
	evidence.Store
	down atomic.Bool
}

func (f *flakyStore) Put(ctx context.Context, key string, data []byte) error {
	if f.down.Load() {
		return errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return f.Store.Put(ctx, key, data)
}

// WalkInfo lists as the wrapped store does, sizes and times included.
func (f *flakyStore) WalkInfo(ctx context.Context, prefix string, fn func(evidence.KeyInfo) error) error {
	return evidence.WalkInfo(ctx, f.Store, prefix, fn)
}

// hookDriver calls a function when it runs.
type hookDriver struct {
	run func()
	out drivers.Result
}

func (d *hookDriver) Engine() string { return "hook" }

func (d *hookDriver) Run(context.Context, drivers.Call) (drivers.Result, error) {
	d.run()
	return d.out, nil
}

func TestMain(m *testing.M) {
	// The fake stdio execbox runner and the workspace shell's sandbox init
	// are this test binary run again.
	execboxtest.MaybeRunStdioRunner()
	workspace.MaybeRunSandbox()
	os.Exit(m.Run())
}
