package console

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	"github.com/toolgate/toolgate/gateway/frontdoor/console/browse"
	"github.com/toolgate/toolgate/policy"
)

// fixedPolicies is a readDecider over one loaded engine.
type fixedPolicies struct{ e *policy.Engine }

func (f fixedPolicies) Engine() *policy.Engine { return f.e }

// fakeKeys is a keyChecker with callers and their groups.
type fakeKeys struct{ auth *callerauth.Authenticator }

func (k fakeKeys) CallerForKey(key string) (string, bool)   { return k.auth.CallerForKey(key) }
func (k fakeKeys) Authenticator() *callerauth.Authenticator { return k.auth }

// benchIndex is an index of 100,000 requests by ten callers.
var benchIndex = sync.OnceValues(func() (*browse.Index, error) {
	ctx := context.Background()
	s := evidence.NewMemoryStore()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 100_000 {
		id := fmt.Sprintf("req-%06d", i)
		req := fmt.Sprintf(`{"request_id":%q,"caller":"caller-%d","tool_id":"workspace.readFile","args":{},"ctx":{"run_id":"","step_id":"","policy_ref":""},"received_at":%q}`,
			id, i%10, base.Add(time.Duration(i)*time.Second).Format(time.RFC3339))
		if err := s.Put(ctx, evidence.Key(id, evidence.ArtifactRequest), []byte(req)); err != nil {
			return nil, err
		}
	}
	x := browse.NewIndex(s, nil)
	return x, x.Refresh(ctx)
})

// BenchmarkListingWithCedar is one page of 50 for a reader who may read
// a tenth of 100,000 requests (their own, by the shipped policy): the
// first listing decides each request it passes with Cedar, later ones
// find the decisions cached.
func BenchmarkListingWithCedar(b *testing.B) {
	x, err := benchIndex()
	if err != nil {
		b.Fatal(err)
	}
	e, err := policy.Load("../../../policies")
	if err != nil {
		b.Fatal(err)
	}
	auth, err := callerauth.New([]config.KeyConfig{{Caller: "caller-3", Env: "K"}}, func(string) string { return "k-0123456789abcdef" })
	if err != nil {
		b.Fatal(err)
	}
	person := browse.Person{Name: "caller-3"}
	for _, bc := range []struct {
		name  string
		fresh bool
	}{{"first", true}, {"cached", false}} {
		b.Run(bc.name, func(b *testing.B) {
			a := newAccess(fakeKeys{auth}, fixedPolicies{e}, "")
			ctx := context.Background()
			visible := func(s *browse.Summary) bool { return a.MayRead(ctx, person, s) }
			x.Query(browse.Filter{Limit: 50}, visible)
			for b.Loop() {
				if bc.fresh {
					b.StopTimer()
					a = newAccess(fakeKeys{auth}, fixedPolicies{e}, "")
					b.StartTimer()
				}
				if p := x.Query(browse.Filter{Limit: 50}, visible); len(p.Rows) != 50 {
					b.Fatalf("%d rows", len(p.Rows))
				}
			}
		})
	}
}
