package gateway

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/evidence/tlog"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// withBenchLog opens a transparency log over s, as a signing gateway does,
// runs its sequencer, and returns the store that logs through it.
func withBenchLog(b *testing.B, s evidence.StoreCloser) evidence.StoreCloser {
	b.Helper()
	ctx := context.Background()
	_, priv, _ := ed25519.GenerateKey(nil)
	signer, err := evidence.NewSigner(priv)
	if err != nil {
		b.Fatal(err)
	}
	origin, err := evidence.LogOrigin(ctx, s, "bench")
	if err != nil {
		b.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		b.Fatal(err)
	}
	sealer, trusted, err := evidence.LogKeys(signer)
	if err != nil {
		b.Fatal(err)
	}
	l, err := evidence.OpenLog(ctx, s, evidence.LogConfig{
		Instance: "bench", Origin: origin, Gateway: gatewayName("bench"), Sealer: sealer, Trusted: trusted,
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
		Interval:       config.DefaultCheckpointInterval, OpTimeout: evidence.DefaultOpTimeout, MaxPending: config.DefaultLogMaxPending,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	b.Cleanup(func() {
		stop()
		<-done
		if err := l.Close(ctx); err != nil {
			b.Error(err)
		}
	})
	return evidence.WithLog(s, l)
}

// BenchmarkLogOverhead measures what the transparency log costs a busy
// gateway: allowed RunTool calls per second from 8 callers, with and
// without the log, on the file store and on S3 (a local MinIO), in the
// same run. The log adds no store round trip to a call; what it costs is
// building each entry and, once a second, the batch and its tiles.
func BenchmarkLogOverhead(b *testing.B) {
	m := evidencetest.StartMinIO(b)
	m.CreateBucket(b, "bench", false)
	m.SetEnv(b)
	ctx := context.Background()
	run := 0
	backends := []struct {
		name string
		open func(b *testing.B) evidence.StoreCloser
	}{
		{"file", func(b *testing.B) evidence.StoreCloser {
			s, err := evidence.NewFileStore(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"s3", func(b *testing.B) evidence.StoreCloser {
			run++
			s, err := storeurl.Open(ctx, m.URL("bench", fmt.Sprintf("log-%d", run)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	args, _ := structpb.NewStruct(map[string]any{"path": "docs/readme.md", "limit": 10.0})
	for _, backend := range backends {
		for _, logged := range []bool{false, true} {
			name := backend.name + "/no-log"
			if logged {
				name = backend.name + "/log"
			}
			b.Run(name+"/callers=8", func(b *testing.B) {
				store := backend.open(b)
				if logged {
					store = withBenchLog(b, store)
				}
				_, client := benchClient(b, store)
				runCallers(b, 8, func(i int) error {
					resp, err := client.RunTool(ctx, &toolgatev1.RunToolRequest{
						RequestId: fmt.Sprintf("lo-%d", i), ToolId: "noop.run", Args: args,
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
