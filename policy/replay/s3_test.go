package replay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
)

// gaugedReader counts the reads in flight on a store and keeps the
// largest count; the first read waits (a bounded while) for a second one,
// so that a walk which reads requests one at a time cannot pass for one
// that overlaps them.
type gaugedReader struct {
	evidence.Reader
	mu            sync.Mutex
	inFlight, max int
	second        chan struct{}
	once          sync.Once
}

func (g *gaugedReader) Get(ctx context.Context, key string) ([]byte, error) {
	g.mu.Lock()
	g.inFlight++
	g.max = max(g.max, g.inFlight)
	first := g.inFlight == 1 && g.second != nil
	if g.inFlight == 2 {
		g.once.Do(func() { close(g.second) })
	}
	g.mu.Unlock()
	if first {
		select {
		case <-g.second:
		case <-time.After(5 * time.Second):
		}
	}
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	return g.Reader.Get(ctx, key)
}

// TestReplayS3 replays calls stored in a real MinIO bucket: the report is
// the file store's, and the bucket is read with several requests in
// flight, never more than the concurrency asked for.
func TestReplayS3(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.SetEnv(t)
	m.CreateBucket(t, "evidence", false)
	ctx := context.Background()
	s, err := storeurl.Open(ctx, m.URL("evidence", "audit"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 60
	for i := range n {
		r := recorded{id: fmt.Sprintf("req-%03d", i), caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read",
			groups: []string{"dev"}}
		if i%3 == 0 {
			r.args, r.decision, r.rule = `{"path":"secret/k"}`, "deny", "no-secret"
		}
		putRecorded(t, s, r)
	}
	r := &Replayer{Candidate: writePolicies(t, `@id("read") permit (principal, action, resource == Tool::"workspace.readFile");`)}
	for _, limit := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d at once", limit), func(t *testing.T) {
			g := &gaugedReader{Reader: s}
			if limit > 1 {
				g.second = make(chan struct{})
			}
			rep, err := Replay(ctx, g, evidence.VerifyOptions{Concurrency: limit}, Filter{}, r)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Replayed != n || rep.Flipped != n/3 || rep.Kinds["deny-to-allow"].Rules["read"].Count != n/3 || rep.NotReplayableCount != 0 {
				t.Errorf("%s", summary(rep))
			}
			if g.max > limit || limit > 1 && g.max < 2 {
				t.Errorf("at most %d reads were in flight, want between 2 and %d", g.max, limit)
			}
		})
	}
}
