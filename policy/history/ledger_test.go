package history

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/evidencetest"
	"github.com/toolgate/toolgate/evidence/storeurl"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/policy"
)

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *clock { return &clock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

// sealed returns the Sealer and Opener of a gateway key.
func sealed(t testing.TB) (Sealer, Opener) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := trust.NewSealer(priv, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := trust.NewKeyring([]ed25519.PublicKey{s.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	open := func(key string, data []byte) ([]byte, error) {
		body, _, err := ring.OpenSigned(key, data)
		return body, err
	}
	return s.Sign, open
}

// allowUnder is a decision "at most max calls of the tool per session",
// adding labels when it lets a call through.
func allowUnder(max int64, add Added) func(Facts) Outcome {
	return func(f Facts) Outcome {
		return Outcome{Dispatch: f.History.ToolCalls < max, Added: add}
	}
}

// observe decides nothing and returns the facts a call would see.
func observe(t *testing.T, l *Ledger, c Call) Facts {
	t.Helper()
	res, err := l.Decide(context.Background(), c, func(Facts) Outcome { return Outcome{} })
	if err != nil {
		t.Fatal(err)
	}
	return res.Facts
}

func dispatch(t *testing.T, l *Ledger, c Call, add Added) Result {
	t.Helper()
	res, err := l.Decide(context.Background(), c, func(Facts) Outcome { return Outcome{Dispatch: true, Added: add} })
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed == 0 {
		t.Fatal("a call to be dispatched claimed no slot")
	}
	return res
}

func TestFactsFollowTheCalls(t *testing.T) {
	t.Parallel()
	clk := newClock()
	seal, open := sealed(t)
	l := New(Options{Store: evidence.NewMemoryStore(), Seal: seal, Open: open, Now: clk.Now})
	read := Call{Caller: "alice", RunID: "run-1", Tool: "read"}
	write := Call{Caller: "alice", RunID: "run-1", Tool: "write"}

	dispatch(t, l, read, Added{Labels: []string{"sensitive"}})
	clk.Add(time.Second)
	dispatch(t, l, read, Added{CallerLabels: []string{"saw-secrets"}})
	clk.Add(time.Second)
	dispatch(t, l, write, Added{})

	tests := []struct {
		name string
		call Call
		want policy.History
		slot uint64
	}{
		{
			name: "the same run sees its calls, its labels and the caller's",
			call: write,
			want: policy.History{Calls: 3, ToolCalls: 1, Labels: []string{"saw-secrets", "sensitive"}, CallsLastMinute: 3, ToolCallsLastMinute: 1},
			slot: 3,
		},
		{
			name: "a new run keeps only caller-scoped labels and the rate facts",
			call: Call{Caller: "alice", RunID: "run-2", Tool: "read"},
			want: policy.History{Labels: []string{"saw-secrets"}, CallsLastMinute: 3, ToolCallsLastMinute: 2},
			slot: 3,
		},
		{
			name: "a call without a run id has the caller's own session",
			call: Call{Caller: "alice", Tool: "read"},
			want: policy.History{Labels: []string{"saw-secrets"}, CallsLastMinute: 3, ToolCallsLastMinute: 2},
			slot: 3,
		},
		{
			name: "another caller has no history",
			call: Call{Caller: "bob", RunID: "run-1", Tool: "read"},
			want: policy.History{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := observe(t, l, tt.call)
			if !sameHistory(f.History, tt.want) || f.Slot != tt.slot {
				t.Errorf("facts = %+v at slot %d, want %+v at slot %d", f.History, f.Slot, tt.want, tt.slot)
			}
		})
	}

	// A fresh replica reads the same facts from the store.
	other := New(Options{Store: l.store, Seal: seal, Open: open, Now: clk.Now})
	if f := observe(t, other, write); !sameHistory(f.History, tests[0].want) || f.Slot != 3 {
		t.Errorf("a cold replica sees %+v at slot %d, want %+v at slot 3", f.History, f.Slot, tests[0].want)
	}

	// A minute later the rate facts are gone, the rest stays.
	clk.Add(Window)
	f := observe(t, l, write)
	if want := (policy.History{Calls: 3, ToolCalls: 1, Labels: []string{"saw-secrets", "sensitive"}}); !sameHistory(f.History, want) {
		t.Errorf("a minute later facts = %+v, want %+v", f.History, want)
	}
}

func sameHistory(a, b policy.History) bool {
	return a.Calls == b.Calls && a.ToolCalls == b.ToolCalls && slices.Equal(a.Labels, b.Labels) &&
		a.CallsLastMinute == b.CallsLastMinute && a.ToolCallsLastMinute == b.ToolCallsLastMinute
}

// TestOldSessionIsReadFromItsSlot: a session whose latest call is not the
// caller's latest is read from the slot the latest record points to.
func TestOldSessionIsReadFromItsSlot(t *testing.T) {
	t.Parallel()
	store := evidence.NewMemoryStore()
	l := New(Options{Store: store})
	dispatch(t, l, Call{Caller: "a", RunID: "r1", Tool: "x"}, Added{Labels: []string{"l1"}})
	dispatch(t, l, Call{Caller: "a", RunID: "r2", Tool: "x"}, Added{})
	cold := New(Options{Store: store})
	f := observe(t, cold, Call{Caller: "a", RunID: "r1", Tool: "x"})
	if want := (policy.History{Calls: 1, ToolCalls: 1, Labels: []string{"l1"}, CallsLastMinute: 2, ToolCallsLastMinute: 2}); !sameHistory(f.History, want) {
		t.Errorf("facts = %+v, want %+v", f.History, want)
	}
}

// countingStore counts the round trips a Ledger makes.
type countingStore struct {
	evidence.Store
	gets, puts, lists atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, key)
}

func (s *countingStore) Put(ctx context.Context, key string, data []byte) error {
	s.puts.Add(1)
	return s.Store.Put(ctx, key, data)
}

func (s *countingStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix)
}

// TestFastPathIsOnePut: a replica that made the caller's latest claim
// decides the next call with one create-only Put and no read.
func TestFastPathIsOnePut(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: evidence.NewMemoryStore()}
	l := New(Options{Store: store})
	c := Call{Caller: "a", RunID: "r", Tool: "x"}
	dispatch(t, l, c, Added{})
	store.gets.Store(0)
	store.puts.Store(0)
	store.lists.Store(0)
	for range 10 {
		dispatch(t, l, c, Added{})
	}
	if g, p, ls := store.gets.Load(), store.puts.Load(), store.lists.Load(); g != 0 || p != 10 || ls != 0 {
		t.Errorf("10 calls made %d gets, %d puts, %d lists; want 0, 10, 0", g, p, ls)
	}
}

// TestTamperedSlotFailsClosed: a record that no trusted gateway sealed is
// not decided on.
func TestTamperedSlotFailsClosed(t *testing.T) {
	t.Parallel()
	seal, open := sealed(t)
	store := evidence.NewMemoryStore()
	c := Call{Caller: "a", RunID: "r", Tool: "x"}
	forged, err := encode(Record{Version: recordVersion, Slot: 1, Caller: "a", RunID: "r", Tool: "x",
		Session: SessionState{Calls: 1}, Sessions: map[string]uint64{SessionID("r"): 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), SlotKey("a", 1), forged); err != nil {
		t.Fatal(err)
	}
	l := New(Options{Store: store, Seal: seal, Open: open})
	_, err = l.Decide(context.Background(), c, allowUnder(5, Added{}))
	if !errors.Is(err, trust.ErrTampered) {
		t.Fatalf("Decide over a forged slot = %v, want an error wrapping trust.ErrTampered", err)
	}
}

// TestMovedSlotIsRefused: a genuine record copied to another slot is not
// taken for that slot's (unsealed mode, where only the content says so).
func TestMovedSlotIsRefused(t *testing.T) {
	t.Parallel()
	store := evidence.NewMemoryStore()
	l := New(Options{Store: store})
	c := Call{Caller: "a", RunID: "r", Tool: "x"}
	dispatch(t, l, c, Added{})
	data, err := store.Get(context.Background(), SlotKey("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(context.Background(), SlotKey("a", 2), data); err != nil {
		t.Fatal(err)
	}
	cold := New(Options{Store: store})
	if _, err := cold.Decide(context.Background(), c, allowUnder(5, Added{})); err == nil {
		t.Fatal("Decide over a record moved to another slot succeeded")
	}
}

// raceAtMost runs calls concurrent decisions of one session, spread over
// two ledgers sharing store, against "at most 5", and returns how many
// were let through.
func raceAtMost(t *testing.T, store evidence.Store, seal Sealer, open Opener, calls int) int {
	t.Helper()
	replicas := []*Ledger{New(Options{Store: store, Seal: seal, Open: open}), New(Options{Store: store, Seal: seal, Open: open})}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			res, err := replicas[i%2].Decide(context.Background(), Call{Caller: "a", RunID: "r", Tool: "paid"}, allowUnder(5, Added{}))
			if err != nil {
				errs <- err
				return
			}
			if res.Claimed > 0 {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return int(allowed.Load())
}

func TestConcurrentReplicasAtMostFive(t *testing.T) {
	t.Parallel()
	seal, open := sealed(t)
	if got := raceAtMost(t, evidence.NewMemoryStore(), seal, open, 32); got != 5 {
		t.Fatalf("32 concurrent calls on two replicas against at most 5: %d allowed", got)
	}
}

// TestConcurrentReplicasOnMinIO is the same race over a real S3 service,
// whose create-only writes are conditional PUTs.
func TestConcurrentReplicasOnMinIO(t *testing.T) {
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	m.SetEnv(t)
	store, err := storeurl.Open(context.Background(), m.URL("evidence", "tenant"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	seal, open := sealed(t)
	if got := raceAtMost(t, store, seal, open, 32); got != 5 {
		t.Fatalf("32 concurrent calls on two replicas against at most 5: %d allowed", got)
	}

	// A label acquired on one replica blocks the next call on the other,
	// even though the other decided that session before.
	a, b := New(Options{Store: store, Seal: seal, Open: open}), New(Options{Store: store, Seal: seal, Open: open})
	c := Call{Caller: "flow", RunID: "r", Tool: "egress"}
	notAfterSensitive := func(f Facts) Outcome {
		return Outcome{Dispatch: !slices.Contains(f.History.Labels, "sensitive")}
	}
	if res, err := b.Decide(context.Background(), c, notAfterSensitive); err != nil || res.Claimed == 0 {
		t.Fatalf("first egress on replica b: %+v, %v; want it let through", res, err)
	}
	dispatch(t, a, Call{Caller: "flow", RunID: "r", Tool: "read"}, Added{Labels: []string{"sensitive"}})
	res, err := b.Decide(context.Background(), c, notAfterSensitive)
	if err != nil || res.Claimed != 0 || !slices.Contains(res.Facts.History.Labels, "sensitive") {
		t.Fatalf("egress on replica b after a sensitive read on a: %+v, %v; want it held back", res, err)
	}
}

// TestRetryAfterARateLimit: a call over a caller rate limit is told when
// the oldest call it counted leaves the window.
func TestRetryAfterARateLimit(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := New(Options{Store: evidence.NewMemoryStore(), Now: clk.Now})
	c := Call{Caller: "a", Tool: "x"}
	threePerMinute := func(f Facts) Outcome {
		d := policy.Decision{Allow: f.History.CallsLastMinute < 3, RuleID: "three-a-minute"}
		if d.Allow {
			d.RuleID = "allowed"
		}
		return Outcome{Dispatch: d.Allow, Decision: d}
	}
	for range 3 {
		dispatch(t, l, c, Added{})
		clk.Add(10 * time.Second)
	}
	res, err := l.Decide(context.Background(), c, threePerMinute)
	if err != nil || res.Claimed != 0 {
		t.Fatalf("the fourth call in a minute: %+v, %v; want it held back", res, err)
	}
	// Finding the hint ran decide on later facts, which allow the call;
	// the outcome that stands is still the deny.
	if res.Outcome.Dispatch || res.Outcome.Decision.RuleID != "three-a-minute" {
		t.Errorf("the outcome that stood = %+v, want the deny by three-a-minute", res.Outcome)
	}
	// The first call was at 0s, now is 30s: it leaves the window at 61s.
	if res.RetryAfter != 31*time.Second {
		t.Errorf("RetryAfter = %v, want 31s", res.RetryAfter)
	}
	never := func(Facts) Outcome { return Outcome{} }
	if res, _ := l.Decide(context.Background(), c, never); res.RetryAfter != 0 {
		t.Errorf("a deny time does not lift has RetryAfter %v", res.RetryAfter)
	}
}
