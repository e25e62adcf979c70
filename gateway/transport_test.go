package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// testKey is the API key of caller "alice" in the transport tests.
const testKey = "k-transport-0123456789"

func authEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	o.keys = []config.KeyConfig{{Caller: "alice", SHA256: sha256Hex(testKey)}}
	return newEnv(t, o)
}

func withKey(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testKey)
}

// sendRaw sends msg as a RunToolRequest on conn, as it is: the client
// neither copies nor checks it.
func sendRaw(ctx context.Context, conn *grpc.ClientConn, msg []byte) error {
	var out []byte
	return conn.Invoke(ctx, toolgatev1.ToolGateway_RunTool_FullMethodName, &msg, &out, grpc.ForceCodecV2(bytesCodec{}))
}

// encodeRequest encodes a RunToolRequest whose args field holds args, an
// encoded google.protobuf.Struct.
func encodeRequest(id, tool string, args []byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, tool)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, args)
}

// structWith encodes a Struct with one member "a" holding value, an
// encoded google.protobuf.Value.
func structWith(value []byte) []byte {
	entry := protowire.AppendTag(nil, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "a")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, value)
	s := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(s, entry)
}

// emptyStructsValue encodes a list Value of n empty Struct values: four
// bytes each on the wire, a Value and a Struct each once decoded.
func emptyStructsValue(n int) []byte {
	item := []byte{0x0a, 0x02, 0x2a, 0x00} // ListValue.values: Value{struct_value: {}}
	list := make([]byte, 0, 4*n)
	for range n {
		list = append(list, item...)
	}
	v := protowire.AppendTag(nil, 6, protowire.BytesType)
	return protowire.AppendBytes(v, list)
}

// emptyStructsRequest is a RunToolRequest of about size bytes that is
// nothing but empty Struct values, the cheapest message to send for the
// most objects decoded.
func emptyStructsRequest(id string, size int) []byte {
	return encodeRequest(id, "workspace.readFile", structWith(emptyStructsValue(size/4)))
}

// nestedListsValue encodes a Value that is depth lists, one inside the
// other.
func nestedListsValue(depth int) []byte {
	v := []byte{}
	for range depth {
		list := protowire.AppendTag(nil, 1, protowire.BytesType)
		list = protowire.AppendBytes(list, v)
		v = protowire.AppendTag(nil, 6, protowire.BytesType)
		v = protowire.AppendBytes(v, list)
	}
	return v
}

// stringRequest is a request whose only arg is a string, sized so the
// whole message is exactly size bytes.
func stringRequest(id string, size int) []byte {
	build := func(n int) []byte {
		v := protowire.AppendTag(nil, 3, protowire.BytesType)
		v = protowire.AppendString(v, strings.Repeat("x", n))
		return encodeRequest(id, "workspace.readFile", structWith(v))
	}
	n := size
	for range 4 {
		n -= len(build(n)) - size
	}
	return build(n)
}

// allocatedPerCall returns the bytes this process allocated per call of
// fn, over n calls.
func allocatedPerCall(t *testing.T, n int, fn func(i int)) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		fn(i)
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// TestKeylessRequestCostsNoMoreThanItsSize sends the message that cost
// ~125 MiB before it was authenticated: 4 MiB of empty Struct values
// without a key. It is refused UNAUTHENTICATED from its headers, and the
// whole process (client included) allocates less than the message's size
// per request: the body is never buffered whole, let alone decoded.
func TestKeylessRequestCostsNoMoreThanItsSize(t *testing.T) {
	e := authEnv(t, envOptions{})
	// Just under 4 MiB, the message cap before the size was derived from
	// the args limit.
	const size = 4<<20 - 64
	msg := emptyStructsRequest("keyless-1", size)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wantCode(t, sendRaw(ctx, e.conn, msg), codes.Unauthenticated, `authorization: send exactly one "authorization: Bearer <key>" metadata entry`)
	perCall := allocatedPerCall(t, 8, func(int) {
		if err := sendRaw(ctx, e.conn, msg); err == nil {
			t.Fatal("keyless request accepted")
		}
	})
	t.Logf("keyless %d-byte request: %d bytes allocated per request", len(msg), perCall)
	if perCall > size {
		t.Fatalf("a keyless request allocated %d bytes, more than its own size %d", perCall, size)
	}
	if names := e.artifactNames("keyless-1"); len(names) > 0 {
		t.Fatalf("a keyless request left evidence: %v", names)
	}
}

// TestOnlyHealthIsOpenWithoutAKey: ListTools and reflection need a key like
// RunTool; load balancers probe health without one.
func TestOnlyHealthIsOpenWithoutAKey(t *testing.T) {
	t.Parallel()
	e := authEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.client.ListTools(ctx, &toolgatev1.ListToolsRequest{})
	wantCode(t, err, codes.Unauthenticated, "authorization")
	_, err = e.client.RunTool(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong"),
		&toolgatev1.RunToolRequest{RequestId: "wrong-key", ToolId: "workspace.readFile"})
	wantCode(t, err, codes.Unauthenticated, "authorization: unknown API key")

	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(ctx)
	if err == nil {
		// A refused stream fails Send with io.EOF; Recv returns its status.
		_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.Unauthenticated, "authorization")

	h, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a key: %v, %v", h, err)
	}
	tools, err := e.client.ListTools(withKey(ctx), &toolgatev1.ListToolsRequest{})
	if err != nil || len(tools.GetTools()) == 0 {
		t.Fatalf("ListTools with a key: %v, %v", tools, err)
	}
}

// TestAuthenticatedRequestsAreBoundedOnTheWire: a caller with a key still
// cannot make the gateway decode an unbounded message. Each case names the
// limit it breaks.
func TestAuthenticatedRequestsAreBoundedOnTheWire(t *testing.T) {
	t.Parallel()
	e := authEnv(t, envOptions{})
	within := structWith(emptyStructsValue(maxArgsNodes - 1)) // the list and its items: exactly the budget
	tests := []struct {
		name string
		msg  []byte
		code codes.Code
		want string
	}{
		{"a message one byte over the cap is refused by the transport", stringRequest("over-cap", maxRequestBytes+1),
			codes.ResourceExhausted, fmt.Sprintf("received message larger than max (%d vs. %d)", maxRequestBytes+1, maxRequestBytes)},
		{"a message at the cap is read, and its args are held to the JSON limit", stringRequest("at-cap", maxRequestBytes),
			codes.InvalidArgument, "bytes encoded as JSON, the limit is 1048576"},
		{"one value over the budget is refused before decoding", encodeRequest("nodes", "workspace.readFile", structWith(emptyStructsValue(maxArgsNodes))),
			codes.InvalidArgument, "args: more than 65536 values, the limit"},
		{"4 MiB of empty values is refused before decoding", emptyStructsRequest("empty-values", 4<<20-64),
			codes.ResourceExhausted, fmt.Sprintf("vs. %d)", maxRequestBytes)},
		{"2 MiB of empty values is refused before decoding", emptyStructsRequest("empty-values-2", 2<<20),
			codes.InvalidArgument, "args: more than 65536 values, the limit"},
		{"lists nested past the depth limit are refused before decoding", encodeRequest("deep", "workspace.readFile", structWith(nestedListsValue(maxArgsDepth+8))),
			codes.InvalidArgument, "args: nested deeper than 32 levels"},
		{"objects nested past the depth limit are refused before decoding", encodeRequest("deep-objects", "workspace.readFile", deepStructs(maxArgsDepth+1)),
			codes.InvalidArgument, "args: nested deeper than 32 levels"},
		{"args exactly at the value budget are accepted", encodeRequest("budget", "no.such.tool", within), codes.OK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(withKey(context.Background()), 60*time.Second)
			defer cancel()
			err := sendRaw(ctx, e.conn, tc.msg)
			if tc.code == codes.OK {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantCode(t, err, tc.code, tc.want)
		})
	}
}

// deepStructs encodes a Struct that holds depth Structs in all, one in
// the other.
func deepStructs(depth int) []byte {
	s := []byte{}
	for range depth - 1 {
		v := protowire.AppendTag(nil, 5, protowire.BytesType)
		s = structWith(protowire.AppendBytes(v, s))
	}
	return s
}

// TestOverBudgetRequestCostsNoMoreThanTwiceItsSize: an authenticated
// request of 2 MiB of empty values, refused for its value count, costs one
// copy of the message and the transport's buffers, not the ~60 MiB its
// decoding would.
func TestOverBudgetRequestCostsNoMoreThanTwiceItsSize(t *testing.T) {
	e := authEnv(t, envOptions{})
	msg := emptyStructsRequest("over-budget", 2<<20)
	ctx, cancel := context.WithTimeout(withKey(context.Background()), 60*time.Second)
	defer cancel()
	perCall := allocatedPerCall(t, 8, func(int) {
		wantCode(t, sendRaw(ctx, e.conn, msg), codes.InvalidArgument, "more than 65536 values")
	})
	t.Logf("authenticated over-budget %d-byte request: %d bytes allocated per request", len(msg), perCall)
	if perCall > 2*uint64(len(msg)) {
		t.Fatalf("an over-budget request allocated %d bytes, more than twice its size %d", perCall, len(msg))
	}
}

func TestScanRequestArgsAllocatesNothing(t *testing.T) {
	within := encodeRequest("scan", "t", structWith(emptyStructsValue(maxArgsNodes-1)))
	if n := testing.AllocsPerRun(10, func() {
		if err := scanRequestArgs(within); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Fatalf("the pre-scan allocated %v times per message", n)
	}
}

// blockingDriver holds every run until release closes, announcing each
// start on started.
type blockingDriver struct {
	started chan string
	release chan struct{}
}

func (d *blockingDriver) Engine() string { return "blocking" }

func (d *blockingDriver) Run(ctx context.Context, c drivers.Call) (drivers.Result, error) {
	d.started <- c.RequestID
	select {
	case <-d.release:
	case <-ctx.Done():
		return drivers.Result{}, ctx.Err()
	}
	return drivers.Result{Stdout: "done\n"}, nil
}

// TestCallsBeyondTheLimitAreRefusedAndLeaveNoEvidence runs
// max_concurrent_calls slow calls and one more: the extra one is answered
// RESOURCE_EXHAUSTED at once, leaves nothing in the evidence store, and
// succeeds when retried under the same request_id after a slot frees.
func TestCallsBeyondTheLimitAreRefusedAndLeaveNoEvidence(t *testing.T) {
	t.Parallel()
	const limit = 3
	slow := &blockingDriver{started: make(chan string, limit), release: make(chan struct{})}
	e := newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
		extra:    map[string]drivers.Driver{"slow": slow},
		limits:   config.LimitsConfig{MaxConcurrentCalls: limit},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, limit)
	for i := range limit {
		wg.Go(func() {
			_, err := e.call(ctx, fmt.Sprintf("slow-%d", i), "slow.run", nil)
			errs <- err
		})
	}
	for range limit {
		select {
		case <-slow.started:
		case <-ctx.Done():
			t.Fatal("the slow calls did not start")
		}
	}
	start := time.Now()
	_, err := e.call(ctx, "one-too-many", "slow.run", nil)
	wantCode(t, err, codes.ResourceExhausted, "limits.max_concurrent_calls: 3 calls are running")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v: it must not wait for a slot", d)
	}
	if names := e.artifactNames("one-too-many"); len(names) > 0 {
		t.Fatalf("the refused call left evidence: %v", names)
	}
	close(slow.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call within the limit failed: %v", err)
		}
	}
	if resp := e.mustCall("one-too-many", "slow.run", nil); !resp.GetOk() {
		t.Fatalf("the retry after a slot freed: %v", resp)
	}
}

// TestNestedCallsDoNotWaitForTheirParentsSlot: with room for one call, a
// sandbox that makes a hundred nested calls finishes; its nested calls are
// not counted against the limit the parent holds.
func TestNestedCallsDoNotWaitForTheirParentsSlot(t *testing.T) {
	t.Parallel()
	sb := &sandboxDriver{}
	for i := range 40 {
		sb.calls = append(sb.calls, nestedStep{fmt.Sprintf("call-%d", i), "workspace.readFile", map[string]any{"path": "notes.txt"}})
	}
	e := newEnv(t, envOptions{
		policies: map[string]string{"policy.default.cedar": nestedPolicy},
		extra:    map[string]drivers.Driver{"sandbox": sb},
		limits:   config.LimitsConfig{MaxConcurrentCalls: 1},
	})
	if err := os.WriteFile(filepath.Join(e.workspace, "notes.txt"), []byte("guest-visible\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := e.call(ctx, "parent-1", "sandbox.run", nil)
	if err != nil || !resp.GetOk() {
		t.Fatalf("parent call: %v, %v", resp, err)
	}
	outcomes := resp.GetToolResult().GetData().GetListValue().GetValues()
	if len(outcomes) != 40 {
		t.Fatalf("%d nested outcomes, want 40", len(outcomes))
	}
	for i, o := range outcomes {
		if !o.GetStructValue().GetFields()["ok"].GetBoolValue() {
			t.Fatalf("nested call %d failed: %v", i, o)
		}
	}
}

func TestLimitsConfigIsValidated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"negative connections", "limits: {max_connections: -1}", "limits.max_connections: must not be negative"},
		{"negative idle", "limits: {max_connection_idle: -1s}", "limits.max_connection_idle: must not be negative"},
		{"streams beyond uint32", "limits: {max_concurrent_streams: 5000000000}", "limits.max_concurrent_streams: at most"},
		{"unknown key", "limits: {max_conections: 5}", "field max_conections not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.ParseConfig([]byte(tc.yaml))
			if err == nil {
				if cfg, err = cfg.WithDefaults(); err == nil {
					err = cfg.Validate()
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	cfg, err := config.ParseConfig([]byte("limits: {max_concurrent_calls: 8, keepalive_min_time: 10s}"))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Limits.WithDefaults()
	want := config.DefaultLimits()
	want.MaxConcurrentCalls, want.KeepaliveMinTime = 8, 10*time.Second
	if got != want {
		t.Fatalf("limits with defaults = %+v, want %+v", got, want)
	}
}

// BenchmarkKeylessRequest reports what requests cost the whole process
// (client and server on loopback): keyless messages over and at the size
// cap, refused from their headers; an authenticated message of empty
// values, refused by the pre-scan; and a small authenticated call that
// runs, for scale.
func BenchmarkKeylessRequest(b *testing.B) {
	engine, red := benchDecider(b)
	auth, err := callerauth.New([]config.KeyConfig{{Caller: "alice", SHA256: sha256Hex(testKey)}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(Options{
		Decider: engine, Store: evidence.NewMemoryStore(), Redactor: red, Auth: auth, Instance: "bench",
		Drivers: map[string]drivers.Driver{"noop": noopDriver{}},
		Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	conn := serve(b, g)
	refused := []struct {
		name string
		ctx  context.Context
		msg  []byte
		code codes.Code
	}{
		{"keyless/4MiB-over-cap", context.Background(), emptyStructsRequest("k", 4<<20), codes.Unauthenticated},
		{"keyless/at-cap", context.Background(), stringRequest("k", maxRequestBytes), codes.Unauthenticated},
		{"authenticated/2MiB-empty-values", withKey(context.Background()), emptyStructsRequest("k", 2<<20), codes.InvalidArgument},
	}
	for _, r := range refused {
		b.Run(r.name, func(b *testing.B) {
			b.SetBytes(int64(len(r.msg)))
			b.ReportAllocs()
			for b.Loop() {
				if err := sendRaw(r.ctx, conn, r.msg); status.Code(err) != r.code {
					b.Fatalf("got %v, want %v", err, r.code)
				}
			}
		})
	}
	b.Run("authenticated/small-call", func(b *testing.B) {
		client := toolgatev1.NewToolGatewayClient(conn)
		args, _ := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0})
		ctx := withKey(context.Background())
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := client.RunTool(ctx, &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("small-%d", i), ToolId: "noop.run", Args: args})
			if err != nil || !resp.GetOk() {
				b.Fatalf("small call: %v, %v", resp, err)
			}
			i++
		}
	})
}

// TestAtTheCapSilentConnectionsMakeRoomAndAreDropped: with room for two
// connections, a silent TCP connection takes the second slot; a third is
// served in its place, the silent one closed for it, while calls go on
// over the first (which carried a call, so is shed after silent ones);
// the third, silent too, is dropped at the handshake timeout.
func TestAtTheCapSilentConnectionsMakeRoomAndAreDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: config.LimitsConfig{MaxConnections: 2, HandshakeTimeout: time.Second}})
	e.mustCall("conn-1", "workspace.readFile", map[string]any{"path": "none.txt"})
	addr := e.conn.Target()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// read returns how many bytes arrived before the connection ended or d
	// passed, and whether it ended.
	read := func(c net.Conn, d time.Duration) (int, bool) {
		c.SetReadDeadline(time.Now().Add(d))
		total := 0
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			total += n
			if err != nil {
				return total, !isNetTimeout(err)
			}
		}
	}
	silent := dial()
	if n, _ := read(silent, 2*time.Second); n == 0 {
		t.Fatal("the connection within max_connections was not served")
	}
	newcomer := dial()
	if n, _ := read(newcomer, 2*time.Second); n == 0 {
		t.Fatal("the connection beyond max_connections was not served in place of the silent one")
	}
	if _, ended := read(silent, 300*time.Millisecond); !ended {
		t.Fatal("the silent connection was not closed to make room")
	}
	e.mustCall("conn-2", "workspace.readFile", map[string]any{"path": "none.txt"})
	start := time.Now()
	if _, ended := read(newcomer, 10*time.Second); !ended {
		t.Fatal("a connection that sent nothing was still open after 10s")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a silent connection was dropped after %v, want about the 1s handshake timeout", d)
	}
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
