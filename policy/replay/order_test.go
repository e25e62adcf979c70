package replay

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
)

// openLog opens instance's transparency log on s, signed by signer.
func openLog(t testing.TB, s evidence.Store, instance string, signer *evidence.Signer) (*evidence.LogWriter, string) {
	t.Helper()
	ctx := context.Background()
	origin, err := evidence.LogOrigin(ctx, s, instance)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		t.Fatal(err)
	}
	sealer, trusted, err := evidence.LogKeys(signer)
	if err != nil {
		t.Fatal(err)
	}
	l, err := evidence.OpenLog(ctx, s, evidence.LogConfig{
		Instance: instance, Origin: origin, Gateway: "toolgate/test@" + instance, Sealer: sealer, Trusted: trusted,
		Interval: time.Hour, OpTimeout: 5 * time.Second, MaxPending: 1000, Logger: slog.New(slog.DiscardHandler),
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, origin
}

// TestReplayInLogOrder: with two instances' logs in the store, the report
// lists the calls in each log's order, the logs merged position by
// position (same position: by origin), and the call no log records after
// them; without logs, in key order. Every call flips, so the flips list
// is the order the report saw them in.
func TestReplayInLogOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := evidence.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	call := func(id string) recorded {
		return recorded{id: id, caller: "alice", tool: "workspace.readFile", decision: "allow", rule: "read", groups: []string{"dev"}}
	}
	s := evidence.NewMemoryStore()
	la, originA := openLog(t, s, "gw-a", signer)
	lb, originB := openLog(t, s, "gw-b", signer)
	// Each log in an order of its own, unlike the keys'. A call is a
	// claim and a completion, so a log's claims are at 0, 2, 4.
	for _, w := range []struct {
		l   *evidence.LogWriter
		ids []string
	}{{la, []string{"z1", "a1", "m1"}}, {lb, []string{"b2", "y2"}}} {
		logged := evidence.WithLog(s, w.l)
		for _, id := range w.ids {
			putRecorded(t, logged, call(id))
		}
		if err := w.l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A call no log records: pending, after the logged ones.
	putRecorded(t, s, call("c0"))
	putRecorded(t, s, call("0p"))

	first, second := []string{"z1", "b2"}, []string{"a1", "y2"}
	if originB < originA {
		first, second = []string{"b2", "z1"}, []string{"y2", "a1"}
	}
	want := slices.Concat(first, second, []string{"m1", "0p", "c0"})

	r := &Replayer{Candidate: writePolicies(t, `@id("none") forbid (principal, action, resource);`+"\n"+storeRecorded)}
	opts := evidence.VerifyOptions{TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}, TempDir: t.TempDir()}
	for _, concurrency := range []int{1, 4} {
		opts.Concurrency = concurrency
		rep, err := Replay(ctx, s, opts, Filter{}, r)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range rep.Flips {
			got = append(got, f.RequestID)
		}
		if !slices.Equal(got, want) || rep.NotReplayableCount != 0 {
			t.Errorf("concurrency %d: flips in order %q, want %q; not replayable: %+v", concurrency, got, want, rep.NotReplayable)
		}
	}

	// The same calls in a store without logs: key order.
	bare := evidence.NewMemoryStore()
	for _, id := range want {
		putRecorded(t, bare, call(id))
	}
	rep, err := Replay(ctx, bare, evidence.VerifyOptions{}, Filter{}, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Flips {
		got = append(got, f.RequestID)
	}
	if keyOrder := slices.Sorted(slices.Values(want)); !slices.Equal(got, keyOrder) {
		t.Errorf("without logs: %q, want %q", got, keyOrder)
	}
}
