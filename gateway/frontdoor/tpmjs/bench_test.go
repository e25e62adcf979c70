package tpmjsdoor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/doortest"
	"github.com/toolgate/toolgate/internal/argsize"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// benchGateway is a gateway with a memory store, one allow rule and a
// packaged tool "noop.run" (@bench/noop::run) that answers at once, and
// "noop.deny" which no rule allows.
func benchGateway(b *testing.B) *gateway.Gateway {
	g, _ := doortest.Gateway(b, doortest.AllowNoopPolicy,
		map[string]drivers.Driver{"noop": doortest.InstantDriver{Name: "noop",
			Result: drivers.Result{Stdout: "ok\n", Data: map[string]any{"done": true}}}},
		map[string]gateway.Tool{
			"noop.run":  {Driver: "noop", Target: "run", Package: "@bench/noop", Version: "1.0.0"},
			"noop.deny": {Driver: "noop", Target: "deny", Package: "@bench/noop", Version: "1.0.0"},
		})
	return g
}

// benchArgs are the arguments of every benchmarked call, those of
// gateway's BenchmarkRunTool.
const benchParams = `{"path":"docs/readme.md","limit":10,"verbose":true}`

// BenchmarkFrontDoor compares one call through the TPMJS door with the
// same call over gRPC RunTool. Overhead = tpmjs-execute ns/op divided by
// grpc-runtool's. inprocess-run is Run alone (the translation's floor),
// http-echo a bare handler decoding the same body (the transport's).
func BenchmarkFrontDoor(b *testing.B) {
	b.Run("grpc-runtool", func(b *testing.B) {
		g := benchGateway(b)
		client := doortest.GRPCClient(b, g)
		args, err := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0, "verbose": true})
		must(b, err)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := client.RunTool(context.Background(), &toolgatev1.RunToolRequest{
				RequestId: fmt.Sprintf("bench-%d", i), ToolId: "noop.run", Args: args,
			})
			if err != nil || !resp.GetOk() {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
	for _, tc := range []struct {
		name, export string
		sameKey      bool
		success      bool
	}{
		{"tpmjs-execute", "run", false, true},
		{"tpmjs-execute-deny", "deny", false, false},
		{"tpmjs-replay", "run", true, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			url := doorServer(b, benchGateway(b)) + "/execute-tool"
			body := []byte(`{"packageName":"@bench/noop","name":"` + tc.export + `","version":"1.0.0","params":` + benchParams + `,"env":{}}`)
			want := []byte(fmt.Sprintf(`{"success":%t`, tc.success))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				key := fmt.Sprintf("bench-%d", i)
				if tc.sameKey {
					key = "bench-replay"
				}
				if got := post(b, client, url, key, body); !bytes.HasPrefix(got, want) {
					b.Fatalf("answer %s", got)
				}
				i++
			}
		})
	}
	b.Run("inprocess-run", func(b *testing.B) {
		g := benchGateway(b)
		args, err := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0, "verbose": true})
		must(b, err)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			resp, err := g.Run(context.Background(), gateway.AnonymousCaller, gateway.Call{FrontDoor: Name,
				Request: &toolgatev1.RunToolRequest{RequestId: fmt.Sprintf("bench-%d", i), ToolId: "noop.run", Args: args}})
			if err != nil || !resp.GetOk() {
				b.Fatalf("%v %v", resp, err)
			}
			i++
		}
	})
	b.Run("http-echo", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if _, err := decodeExecute(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"success":true,"output":{"done":true},"executionTimeMs":0}`))
		}))
		b.Cleanup(srv.Close)
		body := []byte(`{"packageName":"@bench/noop","name":"run","version":"1.0.0","params":` + benchParams + `,"env":{}}`)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			post(b, client, srv.URL, fmt.Sprintf("bench-%d", i), body)
			i++
		}
	})
}

// doorServer serves the door for g behind the plumbing, without keys.
func doorServer(b *testing.B, g *gateway.Gateway) string {
	b.Helper()
	mux := http.NewServeMux()
	newDoor(g, *newConfig(), frontdoor.PrincipalFrom, nil).Routes(mux)
	srv := httptest.NewServer(frontdoor.Plumbing{Keys: frontdoor.Keys(g.Authenticator())}.Wrap(mux))
	b.Cleanup(srv.Close)
	return srv.URL
}

// post sends one keep-alive POST and returns the body.
func post(b *testing.B, client *http.Client, url, key string, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	must(b, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	must(b, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	must(b, err)
	return out
}

// grpcClient serves g over gRPC on loopback and returns a client.

// BenchmarkDoorOversizedBody: what one request costs the process, from a
// small call (the baseline) and a call whose arguments are at their limit to bodies far
// over it, declared or chunked. The oversized ones must cost a small
// multiple of the limit (x-limit/op), not of the body.
func BenchmarkDoorOversizedBody(b *testing.B) {
	url := doorServer(b, benchGateway(b)) + "/execute-tool"
	limit := frontdoor.DefaultMaxBodyBytes
	call := func(params string) []byte {
		return []byte(`{"packageName":"@bench/noop","name":"run","version":"1.0.0","params":` + params + `}`)
	}
	doortest.BenchBodies(b, url, http.Header{"Content-Type": {"application/json"}}, limit, []doortest.BodyCase{
		{Name: "small", Body: call(benchParams), Status: http.StatusOK},
		{Name: "args-at-limit", Body: call(`{"s":` + doortest.Pad(argsize.MaxBytes-64) + `}`), Status: http.StatusOK},
		{Name: "2MiB", Body: call(`{"s":` + doortest.Pad(2<<20) + `}`), Status: http.StatusRequestEntityTooLarge},
		{Name: "16MiB-chunked", Body: call(`{"s":` + doortest.Pad(16<<20) + `}`), Chunked: true, Status: http.StatusRequestEntityTooLarge},
		{Name: "100k-values", Body: call(`{"s":` + doortest.Zeros(100_000) + `}`), Status: http.StatusRequestEntityTooLarge},
	})
}
