package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// runCallers performs b.N operations spread over callers goroutines and
// reports the throughput.
func runCallers(b *testing.B, callers int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkThroughput measures whole RunTool calls per second on the allow
// path (a driver that answers at once) with the S3 store on a local MinIO
// and with the file store, at 1, 8 and 64 concurrent callers. The baselines
// are what MinIO takes for the same number of bare sequences of PUTs:
// "s3-bare4", four in a row, as an allowed call makes four rounds of writes
// (request, decision, tool result beside the response, manifest); and
// "s3-bare5", five, as it writes five objects in all, which is what bounds
// it once MinIO is saturated.
func BenchmarkThroughput(b *testing.B) {
	m := evidencetest.StartMinIO(b)
	m.CreateBucket(b, "bench", false)
	m.SetEnv(b)
	ctx := context.Background()
	openS3 := func(b *testing.B, prefix string) evidence.Store {
		s, err := storeurl.Open(ctx, m.URL("bench", prefix))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	openFile := func(b *testing.B, _ string) evidence.Store {
		s, err := evidence.NewFileStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	args, _ := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0})
	artifact := []byte(`{"request_id":"x","detail":"` + strings.Repeat("a", 400) + `"}`)
	// The framework runs each case several times with growing b.N; every
	// run needs fresh keys and request ids, or it would measure replays.
	run := 0
	for _, callers := range []int{1, 8, 64} {
		for _, objects := range []int{4, 5} {
			b.Run(fmt.Sprintf("s3-bare%d/callers=%d", objects, callers), func(b *testing.B) {
				run++
				store := openS3(b, fmt.Sprintf("bare-%d", run))
				runCallers(b, callers, func(i int) error {
					for n := range objects {
						if err := store.Put(ctx, evidence.Key(fmt.Sprintf("r%d", i), fmt.Sprintf("%d.json", n)), artifact); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
		for _, backend := range []struct {
			name string
			open func(*testing.B, string) evidence.Store
		}{{"s3", openS3}, {"file", openFile}} {
			b.Run(fmt.Sprintf("%s-pipeline/callers=%d", backend.name, callers), func(b *testing.B) {
				run++
				_, client := benchClient(b, backend.open(b, fmt.Sprintf("pipeline-%d", run)))
				runCallers(b, callers, func(i int) error {
					resp, err := client.RunTool(ctx, &toolgatev1.RunToolRequest{
						RequestId: fmt.Sprintf("tp-%d", i), ToolId: "noop.run", Args: args,
					})
					if err == nil && !resp.GetOk() {
						err = fmt.Errorf("call %d not ok: %v", i, resp)
					}
					return err
				})
			})
		}
	}
}
