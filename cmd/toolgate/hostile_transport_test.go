package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// hostileKey is the API key of caller "alice" on the servers of this file.
const hostileKey = "k-hostile-transport-0123456789"

// startLimitedServer runs the real binary with an API key and the given
// limits section (YAML, indented under limits:), on loopback.
func startLimitedServer(t *testing.T, limits string) *server {
	t.Helper()
	dir := t.TempDir()
	writePolicy(t, dir, `@id("all_workspace") permit (principal, action, resource in Driver::"workspace");`)
	cfg := "auth:\n  keys:\n    - caller: alice\n      env: TOOLGATE_HOSTILE_KEY\nlimits:\n" + limits
	if err := os.WriteFile(filepath.Join(dir, "toolgate.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return startServerEnv(t, dir, []string{"TOOLGATE_HOSTILE_KEY=" + hostileKey}, "--config", "toolgate.yaml")
}

func hostileConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func keyed(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+hostileKey)
}

// wireCodec sends *[]byte messages as they are, for messages no
// well-behaved client would build.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func sendWire(ctx context.Context, conn *grpc.ClientConn, msg []byte) error {
	var out []byte
	return conn.Invoke(ctx, toolgatev1.ToolGateway_RunTool_FullMethodName, &msg, &out, grpc.ForceCodecV2(wireCodec{}))
}

// wireRequest encodes a RunToolRequest whose args are {"a": value}, value
// an encoded google.protobuf.Value.
func wireRequest(id string, value []byte) []byte {
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a")
	entry = protowire.AppendBytes(protowire.AppendTag(entry, 2, protowire.BytesType), value)
	args := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), id)
	b = protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), "workspace.readFile")
	return protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), args)
}

// emptyStructs is a list Value of n empty Struct values, 4 bytes each.
func emptyStructs(n int) []byte {
	list := make([]byte, 0, 4*n)
	for range n {
		list = append(list, 0x0a, 0x02, 0x2a, 0x00)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), list)
}

// nestedLists is a Value of depth lists, one inside the other.
func nestedLists(depth int) []byte {
	v := []byte{}
	for range depth {
		list := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), v)
		v = protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), list)
	}
	return v
}

// stringValue is a string Value of n bytes.
func stringValue(n int) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), strings.Repeat("x", n))
}

// memoryKiB reads a field of /proc/<pid>/status (VmRSS, VmHWM), in KiB.
func memoryKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestHostileUnauthenticatedWork (class 3): what a caller can make the
// gateway do before it is authenticated, and what an authenticated caller
// can make it decode, is bounded by the message size.
func TestHostileUnauthenticatedWork(t *testing.T) {
	t.Parallel()
	srv := startLimitedServer(t, "  max_concurrent_calls: 4\n")
	conn := hostileConn(t, srv.addr)
	// Just under 4 MiB, the message cap before it was derived from the
	// args limit, so that before the fix the whole message was decoded.
	keyless := wireRequest("keyless", emptyStructs((4<<20-64)/4))

	t.Run("a keyless 4 MiB message of empty values is refused unauthenticated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := sendWire(ctx, conn, keyless)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "authorization") {
			t.Fatalf("got %v, want UNAUTHENTICATED naming authorization", err)
		}
		if _, err := os.Stat(filepath.Join(srv.dir, "toolgate-evidence", "requests", "keyless")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the keyless request left evidence (%v)", err)
		}
	})

	// Decoding each of these messages took ~125 MiB; 24 at once took the
	// process to 2.9 GiB. Refused from their headers, they are never
	// buffered: the server's peak resident memory may grow by the
	// transport's reusable frame buffers, far less than one message per
	// connection (24 × 4 MiB = 96 MiB), which is the bound asserted.
	t.Run("24 concurrent keyless 4 MiB messages do not grow the server's memory", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		pid := srv.cmd.Process.Pid
		before := memoryKiB(t, pid, "VmHWM")
		var wg sync.WaitGroup
		codesSeen := make(chan codes.Code, 24)
		for range 24 {
			wg.Go(func() {
				// A connection each, as 24 attackers would.
				c := hostileConn(t, srv.addr)
				codesSeen <- status.Code(sendWire(ctx, c, keyless))
			})
		}
		wg.Wait()
		close(codesSeen)
		for c := range codesSeen {
			if c != codes.Unauthenticated {
				t.Fatalf("a keyless request was answered %v", c)
			}
		}
		after := memoryKiB(t, pid, "VmHWM")
		t.Logf("server VmHWM %d KiB before, %d KiB after 24 keyless 4 MiB requests (VmRSS now %d KiB)",
			before, after, memoryKiB(t, pid, "VmRSS"))
		if grew := after - before; grew > 96<<10 {
			t.Fatalf("peak memory grew by %d KiB, more than the 96 MiB the messages themselves take", grew)
		}
	})

	// Headers are decoded before anyone is authenticated; grpc-go would
	// hold 16 MiB of them per call.
	t.Run("a keyless call with 1 MiB of headers is reset, not held", func(t *testing.T) {
		c, fr := rawHTTP2(t, srv.addr, true)
		block := hugeHeaderBlock(srv.addr, 1<<20)
		const chunk = 16 << 10
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:chunk]}); err != nil {
			t.Fatal(err)
		}
		for rest := block[chunk:]; len(rest) > 0; {
			n := min(chunk, len(rest))
			if err := fr.WriteContinuation(1, n == len(rest), rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		// The server resets the stream or drops the connection; what it
		// must not do is take the headers and answer the call.
		f, err := readUntil(c, fr, 10*time.Second, func(f http2.Frame) bool {
			return f.Header().StreamID == 1 || isGoAway(f)
		})
		if isTimeout(err) {
			t.Fatal("1 MiB of headers was neither refused nor answered within 10s")
		}
		if _, answered := f.(*http2.HeadersFrame); answered {
			t.Fatalf("1 MiB of headers was taken and the call answered: %v", f)
		}
		t.Logf("1 MiB of headers: %v, %v", f, err)
	})

	tests := []struct {
		name string
		msg  []byte
		code codes.Code
		want string
	}{
		{"an authenticated message over the 2.5 MiB cap is refused by the transport", wireRequest("big", stringValue(2<<20+600<<10)),
			codes.ResourceExhausted, "received message larger than max"},
		{"an authenticated message over the value budget is refused before decoding", wireRequest("values", emptyStructs(1<<16)),
			codes.InvalidArgument, "args: more than 65536 values, the limit"},
		{"an authenticated message nested too deep is refused before decoding", wireRequest("deep", nestedLists(40)),
			codes.InvalidArgument, "args: nested deeper than 32 levels"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(keyed(context.Background()), 30*time.Second)
			defer cancel()
			err := sendWire(ctx, conn, tc.msg)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.code, tc.want)
			}
		})
	}
}

// rawHTTP2 opens a TCP connection to addr and, if handshake is set, sends
// the HTTP/2 client preface and SETTINGS as a gRPC client would.
func rawHTTP2(t *testing.T, addr string, handshake bool) (net.Conn, *http2.Framer) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fr := http2.NewFramer(c, c)
	if handshake {
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
	}
	return c, fr
}

// readUntil reads frames until one satisfies want, the connection ends
// (io.EOF, or the error) or d passes (a timeout error).
func readUntil(c net.Conn, fr *http2.Framer, d time.Duration, want func(http2.Frame) bool) (http2.Frame, error) {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if want(f) {
			return f, nil
		}
	}
}

// hugeHeaderBlock is the HPACK block of a RunTool call's headers padded
// with about size bytes of extra metadata.
func hugeHeaderBlock(authority string, size int) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", toolgatev1.ToolGateway_RunTool_FullMethodName},
		{":authority", authority}, {"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range size / (4 << 10) {
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("p", 4<<10), Sensitive: true})
	}
	return b.Bytes()
}

func isSettings(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok }

func isGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHostileConnections (class 8): idle, silent and chatty connections
// cannot exhaust the gateway's file descriptors or its attention.
func TestHostileConnections(t *testing.T) {
	t.Parallel()
	srv := startLimitedServer(t, "  max_connections: 3\n  max_connection_idle: 2s\n  handshake_timeout: 1s\n  keepalive_min_time: 10s\n")
	call := func(conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(keyed(context.Background()), 10*time.Second)
		defer cancel()
		_, err := toolgatev1.NewToolGatewayClient(conn).ListTools(ctx, &toolgatev1.ListToolsRequest{})
		return err
	}

	t.Run("at max_connections a new connection is served in place of an idle one that never made a call", func(t *testing.T) {
		conn := hostileConn(t, srv.addr)
		if err := call(conn); err != nil {
			t.Fatalf("first call: %v", err)
		}
		var idle []net.Conn
		var idleFr []*http2.Framer
		for i := range 2 {
			c, fr := rawHTTP2(t, srv.addr, true)
			if _, err := readUntil(c, fr, 5*time.Second, isSettings); err != nil {
				t.Fatalf("idle connection %d was not served: %v", i, err)
			}
			idle, idleFr = append(idle, c), append(idleFr, fr)
		}
		extra, extraFr := rawHTTP2(t, srv.addr, true)
		if _, err := readUntil(extra, extraFr, 5*time.Second, isSettings); err != nil {
			t.Fatalf("the connection beyond max_connections was not served: %v", err)
		}
		if _, err := readUntil(idle[0], idleFr[0], 5*time.Second, func(http2.Frame) bool { return false }); isTimeout(err) {
			t.Fatal("the oldest idle connection, which never made a call, is still open")
		}
		if _, err := readUntil(idle[1], idleFr[1], 300*time.Millisecond, func(http2.Frame) bool { return false }); !isTimeout(err) {
			t.Fatalf("a second idle connection was closed too (%v)", err)
		}
		if err := call(conn); err != nil {
			t.Fatalf("a call on the connection that made one, at the cap: %v", err)
		}
		f, err := readUntil(idle[1], idleFr[1], 10*time.Second, isGoAway)
		if err != nil {
			t.Fatalf("the remaining idle connection was not sent GOAWAY within 10s: %v", err)
		}
		t.Logf("idle connection: %v", f)
	})

	t.Run("a connection that never sends the HTTP/2 preface is closed after handshake_timeout", func(t *testing.T) {
		c, fr := rawHTTP2(t, srv.addr, false)
		start := time.Now()
		_, err := readUntil(c, fr, 10*time.Second, func(http2.Frame) bool { return false })
		if isTimeout(err) {
			t.Fatal("a silent connection was still open after 10s")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a silent connection was closed after %v, want about 1s", d)
		}
	})

	t.Run("a client pinging too often is sent GOAWAY too_many_pings", func(t *testing.T) {
		c, fr := rawHTTP2(t, srv.addr, true)
		for i := range 5 {
			if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				break // the server may close the connection before all are sent
			}
		}
		f, err := readUntil(c, fr, 10*time.Second, isGoAway)
		if err != nil {
			t.Fatalf("no GOAWAY after five pings in a row: %v", err)
		}
		g := f.(*http2.GoAwayFrame)
		if g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
			t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", g.ErrCode, g.DebugData())
		}
	})
}

// TestHostileConcurrentCalls: beyond limits.max_concurrent_calls, a call
// is refused at once and leaves no evidence.
func TestHostileConcurrentCalls(t *testing.T) {
	t.Parallel()
	srv := startLimitedServer(t, "  max_concurrent_calls: 2\n")
	client := toolgatev1.NewToolGatewayClient(hostileConn(t, srv.addr))
	ctx, cancel := context.WithTimeout(keyed(context.Background()), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, err := client.RunTool(ctx, shellRequest(t, fmt.Sprintf("slow-%d", i), "sleep 4"))
			errs <- err
		})
	}
	evidenceDir := filepath.Join(srv.dir, "toolgate-evidence", "requests")
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 2; {
		if _, err := os.Stat(filepath.Join(evidenceDir, fmt.Sprintf("slow-%d", i), "policy_decision.json")); err == nil {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow calls did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := client.RunTool(ctx, shellRequest(t, "one-too-many", "touch ran"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "limits.max_concurrent_calls") {
		t.Fatalf("third call: %v, want RESOURCE_EXHAUSTED naming limits.max_concurrent_calls", err)
	}
	if _, err := os.Stat(filepath.Join(evidenceDir, "one-too-many")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused call left evidence (%v)", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call within the limit: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(srv.dir, "workspace", "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused call ran")
	}
}
