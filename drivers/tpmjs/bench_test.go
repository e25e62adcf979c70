package tpmjs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/drivers/tpmjs/tpmjstest"
)

// benchCall is the call both benchmarks make: the echo tool with a small
// argument object and one env value.
var benchCall = drivers.Call{
	RequestID: "bench", Package: tpmjstest.Package, Version: "1.0.0", Target: tpmjstest.EchoTool,
	Args: map[string]any{"query": "weather in Lisbon", "limit": 5, "tags": []any{"a", "b"}},
	Env:  map[string]string{"API_KEY": "k"},
}

// BenchmarkRun measures one call through the driver: validation, encoding,
// the HTTP exchange with the fake executor and the mapping of the answer.
// Compare with BenchmarkDirectHTTP for the driver's own share.
func BenchmarkRun(b *testing.B) {
	fake := tpmjstest.New(b, tpmjstest.NodeV10)
	d, err := New(Config{URL: fake.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := d.Run(ctx, benchCall)
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("Run = %+v, %v", r, err)
		}
	}
}

// BenchmarkDirectHTTP is the floor for BenchmarkRun: the same request body
// POSTed with a plain net/http client and the answer decoded into a map.
func BenchmarkDirectHTTP(b *testing.B) {
	fake := tpmjstest.New(b, tpmjstest.NodeV10)
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	b.Cleanup(client.CloseIdleConnections)
	url := fake.URL + "/execute-tool"
	b.ReportAllocs()
	for b.Loop() {
		body, err := json.Marshal(wireRequest{PackageName: benchCall.Package, Version: benchCall.Version,
			Name: benchCall.Target, Params: benchCall.Args, Env: benchCall.Env})
		if err != nil {
			b.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-TPMJS-Protocol-Version", protocolVersion)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil || out["success"] != true {
			b.Fatalf("answer %s: %v", raw, err)
		}
	}
}
