package lease

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

const (
	testInstance  = "gw-1"
	testHeartbeat = time.Second
)

// keys is one gateway's sealer and keyring, as a process of it builds
// them from its signing key.
type keys struct {
	sealer *trust.Sealer
	ring   *trust.Keyring
}

func testKeys(t testing.TB, seed byte) keys {
	t.Helper()
	s := make([]byte, 32)
	s[0] = seed
	mac := bytes.Repeat([]byte{seed}, 32)
	sealer, err := trust.NewSealer(ed25519.NewKeyFromSeed(s), mac)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := trust.NewKeyring([]ed25519.PublicKey{sealer.PublicKey()}, sealer.MACKey())
	if err != nil {
		t.Fatal(err)
	}
	return keys{sealer, ring}
}

// tamperLog collects what a process reported as tampering.
type tamperLog struct {
	mu   sync.Mutex
	keys []string
}

func (r *tamperLog) report(key string, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
}

func (r *tamperLog) reported(sub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.keys {
		if strings.Contains(k, sub) {
			return true
		}
	}
	return false
}

func options(k keys, pid int, tl *tamperLog) Options {
	o := Options{Instance: testInstance, Heartbeat: testHeartbeat, Sealer: k.sealer, Keyring: k.ring,
		Host: "host-a", PID: pid, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tl != nil {
		o.Tampered = tl.report
	}
	return o
}

// acquireAt runs Acquire and returns the lease or error and how long it
// took on the bubble's clock.
func acquireAt(t *testing.T, s evidence.Store, o Options) (*Lease, error, time.Duration) {
	t.Helper()
	start := time.Now()
	l, err := Acquire(t.Context(), s, o)
	return l, err, time.Since(start)
}

// running starts l's heartbeat until the test ends.
func running(t *testing.T, l *Lease) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestAcquireFreeNameAndClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err, took := acquireAt(t, s, options(k, 100, nil))
		if err != nil || a.Epoch() != 1 || took != 0 {
			t.Fatalf("Acquire on a free name: epoch %v, err %v, after %v; want epoch 1 at once", a, err, took)
		}
		if err := a.Held(t.Context()); err != nil {
			t.Fatalf("Held right after Acquire: %v", err)
		}
		if err := a.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := a.Held(t.Context()); !errors.Is(err, ErrFenced) {
			t.Errorf("Held after Close: %v, want ErrFenced", err)
		}
		b, err, took := acquireAt(t, s, options(k, 101, nil))
		if err != nil || b.Epoch() != 2 || took != 0 || b.Record().Previous != 0 {
			t.Fatalf("Acquire after a clean close: %+v, err %v, after %v; want epoch 2 at once, no previous", b.Record(), err, took)
		}
	})
}

func TestSecondProcessRefusedWhileHolderLives(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err := Acquire(t.Context(), s, options(k, 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		running(t, a)
		time.Sleep(10 * testHeartbeat) // a long-lived holder
		_, err, took := acquireAt(t, s, options(k, 200, nil))
		var inUse *InUseError
		if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) {
			t.Fatalf("a second process with the name got %v, want an InUseError", err)
		}
		if took > 2*testHeartbeat {
			t.Errorf("the refusal took %v, want at most two heartbeats", took)
		}
		for _, want := range []string{`instance name "gw-1"`, "epoch 1, pid 100 on host host-a", "instance:"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not say %q: %v", want, err)
			}
		}
		if err := a.Held(t.Context()); err != nil {
			t.Errorf("the holder lost its lease to a refused newcomer: %v", err)
		}
	})
}

func TestTakeoverOfStoppedHolderFencesIt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err := Acquire(t.Context(), s, options(k, 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		// a never renews: a stopped (SIGSTOP) or dead process.
		b, err, took := acquireAt(t, s, options(k, 200, nil))
		if err != nil || b.Epoch() != 2 || b.Record().Previous != 1 {
			t.Fatalf("takeover of a stopped holder: %+v, %v", b, err)
		}
		if took < StaleBeats*testHeartbeat {
			t.Errorf("took over after %v, before %d heartbeats", took, StaleBeats)
		}
		// a wakes up: before it acts, Held finds the newer epoch.
		err = a.Held(t.Context())
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "pid 200") {
			t.Fatalf("the woken holder's Held: %v, want ErrFenced naming the newer process", err)
		}
		if a.Err() == nil {
			t.Error("Err is nil after fencing")
		}
		select {
		case <-a.Fenced():
		default:
			t.Error("Fenced is not closed after fencing")
		}
		if err := b.Confirm(t.Context()); err != nil {
			t.Errorf("the new holder's Confirm: %v", err)
		}
	})
}

func TestHeldWithinValidityDoesNoIO(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &countingStore{Store: evidence.NewMemoryStore()}
		a, err := Acquire(t.Context(), s, options(testKeys(t, 1), 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		before := s.ops()
		for range 1000 {
			if err := a.Held(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if n := s.ops() - before; n != 0 {
			t.Errorf("1000 Held calls within the validity made %d store operations", n)
		}
	})
}

func TestRenewalStopsWhenNewerEpochAppears(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		sealed bool
	}{
		{"a newer process's lease", true},
		{"a forged newer lease", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := evidence.NewMemoryStore()
				k := testKeys(t, 1)
				var tl tamperLog
				a, err := Acquire(t.Context(), s, options(k, 100, &tl))
				if err != nil {
					t.Fatal(err)
				}
				running(t, a)
				newer := []byte(`{"v":1}`)
				if tc.sealed {
					newer, _ = seal(k.sealer, leaseKey(testInstance, 2), Record{Version: 1, Instance: testInstance, Epoch: 2,
						Holder: "x", Host: "host-b", PID: 7, HeartbeatMS: 1000})
				}
				if err := s.Put(t.Context(), leaseKey(testInstance, 2), newer); err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * testHeartbeat)
				synctest.Wait()
				if err := a.Err(); !errors.Is(err, ErrFenced) {
					t.Fatalf("after a newer epoch appeared: Err %v, want ErrFenced", err)
				}
				if got := tl.reported(leaseKey(testInstance, 2)); got == tc.sealed {
					t.Errorf("newer lease reported as tampering: %v, want %v", got, !tc.sealed)
				}
			})
		})
	}
}

func TestTamperedLeaseRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// plant writes into the store after a holds epoch 1.
		plant func(t *testing.T, s evidence.Store, k keys)
		// holderRuns: a renews while b starts.
		holderRuns bool
		wantInUse  bool
		reported   string
	}{
		{
			name: "forged closed marker on a live holder's lease",
			plant: func(t *testing.T, s evidence.Store, _ keys) {
				put(t, s, closedKey(testInstance, 1), `{"v":1,"instance":"gw-1","epoch":1,"holder":"x","closed_at":"2026-01-01T00:00:00Z","beats":0}`)
			},
			holderRuns: true, wantInUse: true, reported: closedKey(testInstance, 1),
		},
		{
			name: "closed marker signed by another key",
			plant: func(t *testing.T, s evidence.Store, _ keys) {
				other := testKeys(t, 9)
				data, _ := seal(other.sealer, closedKey(testInstance, 1), closed{Version: 1, Instance: testInstance, Epoch: 1})
				put(t, s, closedKey(testInstance, 1), string(data))
			},
			holderRuns: true, wantInUse: true, reported: closedKey(testInstance, 1),
		},
		{
			name: "forged newest lease without heartbeats, over a live holder",
			plant: func(t *testing.T, s evidence.Store, _ keys) {
				put(t, s, leaseKey(testInstance, 2), `{"v":1,"instance":"gw-1","epoch":2}`)
			},
			holderRuns: true, wantInUse: true, reported: leaseKey(testInstance, 2),
		},
		{
			name: "forged newest lease over a dead holder",
			plant: func(t *testing.T, s evidence.Store, _ keys) {
				put(t, s, leaseKey(testInstance, 2), `{"v":1,"instance":"gw-1","epoch":2}`)
			},
			reported: leaseKey(testInstance, 2),
		},
		{
			name: "forged heartbeat in the holder's next slot",
			plant: func(t *testing.T, s evidence.Store, _ keys) {
				put(t, s, beatKey(testInstance, 1, 1), `{}`)
			},
			holderRuns: true, wantInUse: true, reported: beatKey(testInstance, 1, 1),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := evidence.NewMemoryStore()
				k := testKeys(t, 1)
				var tlA, tlB tamperLog
				a, err := Acquire(t.Context(), s, options(k, 100, &tlA))
				if err != nil {
					t.Fatal(err)
				}
				tc.plant(t, s, k)
				if tc.holderRuns {
					running(t, a)
				}
				b, err := Acquire(t.Context(), s, options(k, 200, &tlB))
				if got := errors.Is(err, ErrInUse); got != tc.wantInUse {
					t.Fatalf("newcomer: lease %v, err %v; want in use: %v", b, err, tc.wantInUse)
				}
				if !tlA.reported(tc.reported) && !tlB.reported(tc.reported) {
					t.Errorf("%s was not reported as tampering (a: %v, b: %v)", tc.reported, tlA.keys, tlB.keys)
				}
				if tc.holderRuns && !strings.Contains(tc.name, "newest lease") {
					if err := a.Held(t.Context()); err != nil {
						t.Errorf("the live holder lost its lease: %v", err)
					}
				}
			})
		})
	}
}

func TestHolderRenewingDuringTakeoverIsWaitedOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err := Acquire(t.Context(), mem, options(k, 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		// a was paused; it wakes and stores a heartbeat just as b
		// stores its epoch.
		hooked := &hookStore{Store: mem, afterPut: func(key string) {
			if key == leaseKey(testInstance, 2) {
				a.renew.Lock()
				a.beat(context.Background())
				a.renew.Unlock()
			}
		}}
		b, err, took := acquireAt(t, hooked, options(k, 200, nil))
		if err != nil || b.Epoch() != 2 {
			t.Fatalf("takeover: %v, %v", b, err)
		}
		if took < 2*StaleBeats*testHeartbeat {
			t.Errorf("b acted %v after it started, before a's renewal could have expired", took)
		}
		if err := a.Held(t.Context()); !errors.Is(err, ErrFenced) {
			t.Errorf("a after the takeover: %v, want ErrFenced", err)
		}
	})
}

// TestExpiredOldHeartbeatsStillShowALiveHolder: a lifecycle rule expired
// a long-lived holder's first heartbeats; a newcomer still finds its
// newest one, and sees it alive.
func TestExpiredOldHeartbeatsStillShowALiveHolder(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err := Acquire(t.Context(), mem, options(k, 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		running(t, a)
		time.Sleep(10*testHeartbeat + testHeartbeat/2)
		expired := &hidingStore{Store: mem, hidden: func(key string) bool {
			return strings.Contains(key, "/heartbeat/") && key <= beatKey(testInstance, 1, 5)
		}}
		if _, err := Acquire(t.Context(), expired, options(k, 200, nil)); !errors.Is(err, ErrInUse) {
			t.Fatalf("a newcomer with the holder's first heartbeats expired: %v, want ErrInUse", err)
		}
	})
}

func TestTwoNewcomersAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		if _, err := Acquire(t.Context(), s, options(k, 100, nil)); err != nil {
			t.Fatal(err)
		}
		// The holder died. Two processes start at once; the winner runs.
		var mu sync.Mutex
		var won []*Lease
		var refused []error
		var wg sync.WaitGroup
		for pid := range 2 {
			wg.Go(func() {
				l, err := Acquire(t.Context(), s, options(k, 200+pid, nil))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return
				}
				won = append(won, l)
				running(t, l)
			})
		}
		wg.Wait()
		if len(won) != 1 || len(refused) != 1 || !errors.Is(refused[0], ErrInUse) {
			t.Fatalf("two newcomers at once: %d won, refused: %v; want one each", len(won), refused)
		}
	})
}

func TestLapsedRenewalFailsFastThenRecovers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &failingStore{countingStore: countingStore{Store: evidence.NewMemoryStore()}}
		a, err := Acquire(t.Context(), s, options(testKeys(t, 1), 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		s.setDown(true)
		time.Sleep(StaleBeats * testHeartbeat)
		if err := a.Held(t.Context()); !errors.Is(err, ErrLapsed) {
			t.Fatalf("Held with the store down past the validity: %v, want ErrLapsed", err)
		}
		before := s.ops()
		if err := a.Held(t.Context()); !errors.Is(err, ErrLapsed) || s.ops() != before {
			t.Errorf("a second Held within a period: %v after %d store operations, want ErrLapsed at once", err, s.ops()-before)
		}
		s.setDown(false)
		time.Sleep(testHeartbeat)
		if err := a.Held(t.Context()); err != nil {
			t.Errorf("Held once the store is back: %v", err)
		}
	})
}

func TestGuard(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := evidence.NewMemoryStore()
		k := testKeys(t, 1)
		a, err := Acquire(t.Context(), s, options(k, 100, nil))
		if err != nil {
			t.Fatal(err)
		}
		g := a.Guard(s)
		put(t, g, evidence.Key("held", evidence.ArtifactRequest), "{}")
		// b takes over; a, woken, is fenced.
		if _, err := Acquire(t.Context(), s, options(k, 200, nil)); err != nil {
			t.Fatal(err)
		}
		put(t, s, evidence.Key("finalised", evidence.ArtifactManifest), "{}")
		for _, tc := range []struct {
			key        string
			allowed    bool
			alsoExists bool
		}{
			{evidence.Key("new", evidence.ArtifactRequest), false, false},
			{evidence.AttemptKey("mine", 2, evidence.ArtifactDispatch), false, false},
			{evidence.Key("mine", evidence.ArtifactDispatch), false, false},
			{evidence.Key("mine", evidence.ArtifactApproval), false, false},
			{evidence.Key("mine", evidence.ArtifactResponse), true, false},
			{evidence.Key("mine", evidence.ArtifactManifest), true, false},
			{evidence.Key("finalised", evidence.ArtifactResponse), false, true},
			{"log/gw-1/batch/x", true, false},
		} {
			err := g.Put(t.Context(), tc.key, []byte("{}"))
			if (err == nil) != tc.allowed {
				t.Errorf("fenced Put %s: %v, want allowed %v", tc.key, err, tc.allowed)
			}
			if err != nil && (!errors.Is(err, ErrFenced) || errors.Is(err, evidence.ErrExist) != tc.alsoExists) {
				t.Errorf("fenced Put %s: %v, want ErrFenced (and ErrExist: %v)", tc.key, err, tc.alsoExists)
			}
		}
	})
}

func TestParseLeaseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key            string
		epoch          uint64
		closed, wantOK bool
	}{
		{leaseKey(testInstance, 3), 3, false, true},
		{closedKey(testInstance, 3), 3, true, true},
		{leaseKey(testInstance, 0), 0, false, false},
		{leaseDir(testInstance) + "7", 0, false, false},
		{leaseDir(testInstance) + "0000000000000000000x", 0, false, false},
		{leaseDir("other") + "00000000000000000001", 0, false, false},
		{leaseKey(testInstance, 3) + ".tmp", 0, false, false},
	} {
		n, c, ok := parseLeaseKey(testInstance, tc.key)
		if n != tc.epoch || c != tc.closed || ok != tc.wantOK {
			t.Errorf("parseLeaseKey(%q) = %d, %v, %v; want %d, %v, %v", tc.key, n, c, ok, tc.epoch, tc.closed, tc.wantOK)
		}
	}
}

func put(t *testing.T, s evidence.Store, key, data string) {
	t.Helper()
	if err := s.Put(t.Context(), key, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

// countingStore counts store operations.
type countingStore struct {
	evidence.Store
	mu sync.Mutex
	n  int
}

func (s *countingStore) count() { s.mu.Lock(); s.n++; s.mu.Unlock() }

func (s *countingStore) ops() int { s.mu.Lock(); defer s.mu.Unlock(); return s.n }

func (s *countingStore) Put(ctx context.Context, key string, data []byte) error {
	s.count()
	return s.Store.Put(ctx, key, data)
}

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.count()
	return s.Store.Get(ctx, key)
}

func (s *countingStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.count()
	return s.Store.List(ctx, prefix)
}

// failingStore fails every operation while down.
type failingStore struct {
	countingStore
	down bool
}

var errDown = errors.New("store down")

func (s *failingStore) setDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

func (s *failingStore) isDown() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.down }

func (s *failingStore) Put(ctx context.Context, key string, data []byte) error {
	s.count()
	if s.isDown() {
		return errDown
	}
	return s.Store.Put(ctx, key, data)
}

func (s *failingStore) Get(ctx context.Context, key string) ([]byte, error) {
	s.count()
	if s.isDown() {
		return nil, errDown
	}
	return s.Store.Get(ctx, key)
}

func (s *failingStore) List(ctx context.Context, prefix string) ([]string, error) {
	s.count()
	if s.isDown() {
		return nil, errDown
	}
	return s.Store.List(ctx, prefix)
}

// hookStore calls afterPut after each successful Put.
type hookStore struct {
	evidence.Store
	afterPut func(key string)
}

func (s *hookStore) Put(ctx context.Context, key string, data []byte) error {
	err := s.Store.Put(ctx, key, data)
	if err == nil {
		s.afterPut(key)
	}
	return err
}

// BenchmarkHeld is the instance lease's cost on a call's path: Held while
// the lease is valid, and a guarded Put against a bare one.
func BenchmarkHeld(b *testing.B) {
	s := evidence.NewMemoryStore()
	l, err := Acquire(context.Background(), s, options(testKeys(b, 1), 1, nil))
	if err != nil {
		b.Fatal(err)
	}
	l.opts.Heartbeat = time.Hour // valid throughout, as a renewed lease is
	l.extend(l.elapsed())
	b.Run("held", func(b *testing.B) {
		for b.Loop() {
			if err := l.Held(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name  string
		store func(evidence.Store) evidence.Store
	}{
		{"put", func(s evidence.Store) evidence.Store { return s }},
		{"guarded-put", l.Guard},
	} {
		b.Run(tc.name, func(b *testing.B) {
			store := tc.store(evidence.NewMemoryStore())
			data := []byte(`{"a":1}`)
			i := 0
			for b.Loop() {
				if err := store.Put(context.Background(), evidence.Key(strconv.Itoa(i), "x.json"), data); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// hidingStore hides the keys hidden says, as if they had been deleted.
type hidingStore struct {
	evidence.Store
	hidden func(key string) bool
}

func (s *hidingStore) Get(ctx context.Context, key string) ([]byte, error) {
	if s.hidden(key) {
		return nil, evidence.ErrNotExist
	}
	return s.Store.Get(ctx, key)
}

func (s *hidingStore) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := s.Store.List(ctx, prefix)
	var out []string
	for _, k := range keys {
		if !s.hidden(k) {
			out = append(out, k)
		}
	}
	return out, err
}
