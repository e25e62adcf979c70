package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
)

// BenchmarkRecover measures the sweep at start over a store of 1,000
// finished requests, 1% of them left unfinished and finalised by each
// run. "walk" lists the same store and does nothing else: the cost the
// sweep cannot avoid. ns/op is per sweep of the whole store.
func BenchmarkRecover(b *testing.B) {
	const finished, unfinishedEvery = 1000, 100
	engine, red := benchDecider(b)
	newGateway := func(store evidence.Store) *Gateway {
		auth, _ := callerauth.New(nil, nil)
		g, err := New(Options{
			Decider: engine, Store: store, Redactor: red, Auth: auth, Instance: "bench",
			Drivers: map[string]drivers.Driver{"noop": noopDriver{}},
			Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}},
		})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	// seed fills a store by running calls through a gateway whose store
	// refuses every hundredth manifest.
	seed := func(b *testing.B) evidence.Store {
		store := newFaultStore()
		g := newGateway(store)
		for i := range finished {
			if i%unfinishedEvery == 0 {
				store.failNext(evidence.ArtifactManifest, 1)
			}
			c := call{RequestID: fmt.Sprintf("r-%d", i), ToolID: "noop.run", PolicyRef: defaultPolicy, Args: []byte(`{}`)}
			if _, err := g.runValidated(context.Background(), "bench", c); err != nil {
				b.Fatal(err)
			}
		}
		return store
	}
	b.Run("walk", func(b *testing.B) {
		store := seed(b)
		for b.Loop() {
			n := 0
			if err := evidence.WalkRequests(context.Background(), store, func(string, []string) error { n++; return nil }); err != nil || n != finished {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("recover", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			store := seed(b)
			g := newGateway(store)
			g.now = func() time.Time { return time.Now().Add(time.Hour) }
			b.StartTimer()
			stats, err := g.Recover(context.Background())
			if err != nil || stats.RolledForward != finished/unfinishedEvery {
				b.Fatalf("%+v, %v", stats, err)
			}
		}
	})
}
