package evidence

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fillLogged stores n small finished calls through a logged store and
// closes the log, as a gateway that served them would leave a bucket.
func fillLogged(b *testing.B, s *MemoryStore, signer *Signer, n int) {
	b.Helper()
	ctx := context.Background()
	cfg := signedLogConfig(b, s, signer)
	l, err := OpenLog(ctx, s, cfg)
	if err != nil {
		b.Fatal(err)
	}
	logged := WithLog(s, l)
	for i := range n {
		id := fmt.Sprintf("r%07d", i)
		req, _ := json.Marshal(RequestRecord{RequestID: id, Args: json.RawMessage(`{}`), ReceivedAt: time.Unix(0, 0).UTC(),
			CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32), Gateway: cfg.Gateway})
		if err := logged.Put(ctx, Key(id, ArtifactRequest), req); err != nil {
			b.Fatal(err)
		}
		m := Manifest{Version: ManifestVersion, RequestID: id, EngineRef: "bench", Outcome: OutcomeCompleted,
			Artifacts: []ArtifactDigest{Digest(Key(id, ArtifactRequest), req)}, CreatedAt: time.Unix(0, 0).UTC()}
		if err := signer.Sign(&m); err != nil {
			b.Fatal(err)
		}
		data, _ := EncodeManifest(m)
		if err := logged.Put(ctx, Key(id, ArtifactManifest), data); err != nil {
			b.Fatal(err)
		}
		if i%400 == 399 {
			if err := l.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := l.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkVerifyAllLogged measures verify --all over a bucket of logged
// requests: the log re-derived from its bundles, its entries sorted on
// disk and joined with the walk of the requests. "peak-MB" is the most
// the live heap grew above the filled store's while verifying: it must
// not grow with the number of requests once the sort spills.
func BenchmarkVerifyAllLogged(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			s, signer := NewMemoryStore(), newSigner(b)
			fillLogged(b, s, signer, n)
			base := liveHeapNow()
			var peak atomic.Uint64
			opts := VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, RequireLog: true, TempDir: b.TempDir()}
			b.ResetTimer()
			for b.Loop() {
				count := 0
				err := VerifyAll(context.Background(), s, opts, func(rep VerifyReport) error {
					if rep.Verdict() != StatusOK {
						return fmt.Errorf("%s: %s %v", rep.RequestID, rep.Verdict(), rep.Problems)
					}
					if count++; count%5_000 == 0 {
						peak.Store(max(peak.Load(), liveHeapNow()))
					}
					return nil
				})
				if err != nil || count != n {
					b.Fatalf("verified %d of %d: %v", count, n, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
			b.ReportMetric(float64(peak.Load()-min(peak.Load(), base))/(1<<20), "peak-MB")
		})
	}
}

func liveHeapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
