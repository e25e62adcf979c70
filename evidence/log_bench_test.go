package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// BenchmarkLogFlushSealing measures what sealing batches costs the log:
// Flush of a batch of n claim entries, sealed (a header committing to the
// entries' SHA-256, signed with Ed25519 once per batch) and unsealed (one
// JSON object, the format before seals), in the same run, on the memory
// store so that the store does not hide it. Flush runs once a checkpoint
// interval (1s by default), off every call's path.
func BenchmarkLogFlushSealing(b *testing.B) {
	ctx := context.Background()
	entry, err := tlog.Entry{Kind: tlog.KindClaim, RequestID: "bench-request-0000001", CanonicalRequestHash: "sha256:" + strings.Repeat("ab", 32),
		RequestSHA256: strings.Repeat("cd", 32), ReceivedAt: storyT0, Gateway: "toolgate/test@gw-1"}.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 100, 1000} {
		for _, sealed := range []bool{false, true} {
			b.Run(fmt.Sprintf("entries=%d/sealed=%v", n, sealed), func(b *testing.B) {
				s := NewMemoryStore()
				l, err := OpenLog(ctx, s, testLogConfig(b, s))
				if err != nil {
					b.Fatal(err)
				}
				if !sealed {
					l.encode = unsealedBatch
				}
				for b.Loop() {
					for range n {
						l.Append(entry)
					}
					if err := l.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// unsealedBatch encodes a batch as the log did before seals.
func unsealedBatch(_ *LogWriter, _ string, b batch) ([]byte, error) {
	return json.Marshal(struct {
		batch
		Entries [][]byte `json:"entries"`
	}{b, b.Entries})
}
