package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
)

// faultStore fails the Puts of artifacts by name, a set number of times
// each, as a store that refuses one write does; it can also hold a Put
// back before it is made.
type faultStore struct {
	evidence.Store
	mu    sync.Mutex
	fails map[string]int // artifact name → Puts still to fail
	// getFails is the same for Gets.
	getFails map[string]int
	hold     map[string]time.Duration
}

func newFaultStore() *faultStore {
	return wrapFaults(evidence.NewMemoryStore())
}

func wrapFaults(s evidence.Store) *faultStore {
	return &faultStore{Store: s, fails: map[string]int{}, getFails: map[string]int{}, hold: map[string]time.Duration{}}
}

// WalkInfo lists as the wrapped store does, sizes and times included.
func (f *faultStore) WalkInfo(ctx context.Context, prefix string, fn func(evidence.KeyInfo) error) error {
	return evidence.WalkInfo(ctx, f.Store, prefix, fn)
}

// refused is the error of an operation a faultStore fails.
var refused = errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")

// take reports whether the next operation on name fails, counting it.
func (s *faultStore) take(counts map[string]int, key string) bool {
	name := key[strings.LastIndexByte(key, '/')+1:]
	s.mu.Lock()
	defer s.mu.Unlock()
	if counts[name] > 0 {
		counts[name]--
		return true
	}
	return false
}

func (s *faultStore) Get(ctx context.Context, key string) ([]byte, error) {
	if s.take(s.getFails, key) {
		return nil, refused
	}
	return s.Store.Get(ctx, key)
}

// failNext makes the next n Puts of artifact name fail.
func (s *faultStore) failNext(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[name] = n
}

func (s *faultStore) Put(ctx context.Context, key string, data []byte) error {
	if s.take(s.fails, key) {
		return refused
	}
	s.mu.Lock()
	hold := s.hold[key[strings.LastIndexByte(key, '/')+1:]]
	s.mu.Unlock()
	time.Sleep(hold)
	return s.Store.Put(ctx, key, data)
}

// flipDriver fails before dispatch its first fails runs, proving that
// nothing was sent, then runs.
type flipDriver struct {
	fails int64
	calls atomic.Int64
	ran   atomic.Int64
}

func (d *flipDriver) Engine() string { return "flip" }

func (d *flipDriver) Run(ctx context.Context, c drivers.Call) (drivers.Result, error) {
	if d.calls.Add(1) <= d.fails {
		return drivers.Result{}, drivers.NotDispatched(errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	}
	d.ran.Add(1)
	return drivers.Result{Stdout: "ran once\n"}, nil
}

func permitAllEnv(t *testing.T, store evidence.Store, d drivers.Driver) *env {
	return newEnv(t, envOptions{
		store:    store,
		extra:    map[string]drivers.Driver{"flip": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
}

// TestPreDispatchFailuresAreRetried: each failure the gateway proves came
// before dispatch answers "nothing was executed", leaves the request
// retryable, and the retry with the same request id runs the tool once,
// with every attempt on record and the whole record verifying.
func TestPreDispatchFailuresAreRetried(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		fail      func(s *faultStore, d *flipDriver)
		code      codes.Code
		firstSays string
	}{
		{"the executor refused the connection", func(_ *faultStore, d *flipDriver) { d.fails = 1 },
			codes.Unavailable, "nothing was executed"},
		{"the policy decision could not be written", func(s *faultStore, _ *flipDriver) { s.failNext(evidence.ArtifactPolicyDecision, 1) },
			codes.Unavailable, "nothing was executed"},
		{"the executor refused and its close could not be written", func(s *faultStore, d *flipDriver) {
			d.fails = 1
			s.failNext(evidence.ArtifactNotDispatched, 1)
		}, codes.Unavailable, "nothing was executed"},
		{"the dispatch marker could not be written", func(s *faultStore, _ *flipDriver) { s.failNext(evidence.ArtifactDispatch, 1) },
			codes.Unavailable, "was not dispatched"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, d := newFaultStore(), &flipDriver{}
			tc.fail(store, d)
			e := permitAllEnv(t, store, d)
			_, err := e.call(context.Background(), "r1", "flip.run", nil)
			wantCode(t, err, tc.code, tc.firstSays)
			if d.ran.Load() != 0 {
				t.Fatalf("the tool ran on the failed attempt")
			}
			resp := e.mustCall("r1", "flip.run", nil)
			if !resp.GetOk() || d.ran.Load() != 1 {
				t.Fatalf("retry: ok=%v, tool ran %d times; want ok and once", resp.GetOk(), d.ran.Load())
			}
			again := e.mustCall("r1", "flip.run", nil)
			if d.ran.Load() != 1 || again.GetToolResult().GetStdout() != "ran once\n" {
				t.Errorf("a third call ran the tool again or answered otherwise: %v", again)
			}
			wantVerified(t, e.store, "r1", 2)
		})
	}
}

// wantVerified checks that request id verifies ok with attempts attempts.
func wantVerified(t *testing.T, s evidence.Store, id string, attempts int) {
	t.Helper()
	rep, err := evidence.Verify(context.Background(), s, id)
	if err != nil || rep.Status != evidence.StatusOK {
		t.Fatalf("verify %s = %+v, %v; want ok", id, rep, err)
	}
	keys, _ := s.List(context.Background(), evidence.RequestPrefix(id))
	got, err := evidence.ReadAttempts(context.Background(), s, id, keys)
	if err != nil || len(got) != attempts {
		t.Fatalf("attempts of %s = %+v, %v; want %d", id, got, err, attempts)
	}
	for _, a := range got[:len(got)-1] {
		if a.State != evidence.NotDispatched {
			t.Errorf("attempt %d is %s, want %s", a.Number, a.State, evidence.NotDispatched)
		}
	}
}

// TestConcurrentRetriesOfANotDispatchedRequestRunItOnce: 64 callers retry
// one request id whose first attempt was not dispatched; the tool runs once.
func TestConcurrentRetriesOfANotDispatchedRequestRunItOnce(t *testing.T) {
	t.Parallel()
	d := &flipDriver{fails: 1}
	e := permitAllEnv(t, newFaultStore(), d)
	_, err := e.call(context.Background(), "r64", "flip.run", nil)
	wantCode(t, err, codes.Unavailable, "nothing was executed")
	var wg sync.WaitGroup
	var oks atomic.Int64
	for range 64 {
		wg.Go(func() {
			resp, err := e.call(context.Background(), "r64", "flip.run", nil)
			if err == nil && resp.GetOk() {
				oks.Add(1)
			}
		})
	}
	wg.Wait()
	if d.ran.Load() != 1 {
		t.Fatalf("the tool ran %d times under 64 concurrent retries, want once", d.ran.Load())
	}
	if oks.Load() == 0 {
		t.Error("no retry got the tool's answer")
	}
}

// TestCallerDeadlinePassedBeforeDispatchRunsNothing: a store that holds the
// decision past the caller's deadline closes the attempt; the tool never
// starts and is never recorded as timed out, and a retry runs it once.
func TestCallerDeadlinePassedBeforeDispatchRunsNothing(t *testing.T) {
	t.Parallel()
	store, d := newFaultStore(), &flipDriver{}
	store.hold[evidence.ArtifactPolicyDecision] = 300 * time.Millisecond
	e := permitAllEnv(t, store, d)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := e.call(ctx, "late-1", "flip.run", nil)
	wantCode(t, err, codes.DeadlineExceeded, "")
	waitFor(t, func() bool {
		_, err := store.Get(context.Background(), evidence.Key("late-1", evidence.ArtifactDispatch))
		return err == nil
	})
	if d.calls.Load() != 0 {
		t.Fatal("the driver was called for a caller whose deadline had passed")
	}
	if _, err := store.Get(context.Background(), evidence.Key("late-1", evidence.ArtifactToolResult)); err == nil {
		t.Fatal("a tool that never started has a tool_result.json")
	}
	store.hold[evidence.ArtifactPolicyDecision] = 0
	if resp := e.mustCall("late-1", "flip.run", nil); !resp.GetOk() || d.ran.Load() != 1 {
		t.Fatalf("retry: %v, ran %d; want ok and once", resp, d.ran.Load())
	}
}

// TestManifestFailureStillAnswersAndIsRolledForward: once response.json is
// durable the caller gets it even if the manifest fails; the retry rolls
// the record forward and replays the same response.
func TestManifestFailureStillAnswersAndIsRolledForward(t *testing.T) {
	t.Parallel()
	store, d := newFaultStore(), &flipDriver{}
	store.failNext(evidence.ArtifactManifest, 1)
	e := permitAllEnv(t, store, d)
	first := e.mustCall("m1", "flip.run", nil)
	if !first.GetOk() {
		t.Fatalf("first = %v", first)
	}
	again := e.mustCall("m1", "flip.run", nil)
	if again.GetToolResult().GetStdout() != first.GetToolResult().GetStdout() || d.ran.Load() != 1 {
		t.Fatalf("retry answered %v after %d runs; want the first answer, one run", again, d.ran.Load())
	}
	m, err := evidence.ParseManifest(e.artifact("m1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeCompleted || m.Recovered == "" {
		t.Fatalf("manifest = %+v, %v; want a recovered completed manifest", m, err)
	}
	wantVerified(t, store, "m1", 1)
}

// TestLostResponseIsTheSameStoryOnRetry: when neither store nor spool takes
// the response of a tool that ran, the caller is told so (ABORTED), a
// retry is told the same, and recovery then records the request as failed.
func TestLostResponseIsTheSameStoryOnRetry(t *testing.T) {
	t.Parallel()
	store, d := newFaultStore(), &flipDriver{}
	store.failNext(evidence.ArtifactResponse, 1)
	e := permitAllEnv(t, store, d)
	_, first := e.call(context.Background(), "lost-1", "flip.run", nil)
	wantCode(t, first, codes.Aborted, "ran, but")
	_, retry := e.call(context.Background(), "lost-1", "flip.run", nil)
	wantCode(t, retry, codes.Aborted, "ran, but")
	if d.ran.Load() != 1 {
		t.Fatalf("the tool ran %d times, want once", d.ran.Load())
	}
	if _, err := e.gw.revisit(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := evidence.ParseManifest(e.artifact("lost-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeFailed || !strings.Contains(m.Error, "the caller was told") {
		t.Fatalf("manifest = %+v, %v; want failed, saying what the caller was told", m, err)
	}
	_, after := e.call(context.Background(), "lost-1", "flip.run", nil)
	wantCode(t, after, codes.Aborted, "already failed")
}

// TestRecoverySweepFinalisesAbandonedRequests: a gateway that stopped
// mid-call left requests in every unfinished state; the sweep at the next
// start finalises this instance's, leaves another instance's alone, and
// afterwards nothing is incomplete.
func TestRecoverySweepFinalisesAbandonedRequests(t *testing.T) {
	t.Parallel()
	store := newFaultStore()
	d := &flipDriver{}
	e := permitAllEnv(t, store, d)
	ctx := context.Background()
	// A dead gateway's leftovers, made by failing the writes that would
	// have finished them.
	store.failNext(evidence.ArtifactPolicyDecision, 1)
	store.failNext(evidence.ArtifactDispatch, 1) // the close too: left open
	e.call(ctx, "open-1", "flip.run", nil)
	store.failNext(evidence.ArtifactResponse, 1)
	e.call(ctx, "ran-1", "flip.run", nil)
	store.failNext(evidence.ArtifactManifest, 1)
	e.mustCall("resp-1", "flip.run", nil)

	// A fresh gateway of the same instance, an hour later, sweeps them.
	later := permitAllEnv(t, store, d)
	later.gw.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	stats, err := later.gw.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Closed != 1 || stats.Interrupted != 1 || stats.RolledForward != 1 {
		t.Errorf("stats = %+v; want one closed, one interrupted, one rolled forward", stats)
	}
	reports := map[string]evidence.VerifyReport{}
	if err := evidence.VerifyAll(ctx, store, evidence.VerifyOptions{}, func(r evidence.VerifyReport) error {
		reports[r.RequestID] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, r := range reports {
		if r.Status == evidence.StatusIncomplete {
			t.Errorf("%s is still incomplete after the sweep: %v", id, r.Problems)
		}
	}
	if r := reports["open-1"]; r.Status != evidence.StatusNotDispatched {
		t.Errorf("open-1 verifies %s, want %s", r.Status, evidence.StatusNotDispatched)
	}
	m, err := evidence.ParseManifest(later.artifact("ran-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeInterrupted {
		t.Errorf("ran-1 manifest = %+v, %v; want interrupted", m, err)
	}
	resp := later.mustCall("open-1", "flip.run", nil)
	if !resp.GetOk() || !slices.Contains(resp.GetEvidenceRefs(), "requests/open-1/attempts/2/dispatch.json") {
		t.Errorf("the closed request's retry = %v; want it run in attempt 2", resp)
	}
}

// TestANotDispatchedIDCannotBeTakenByAnotherRequest: a request id whose
// attempt ran nothing stays bound to its request: another request under it
// is ALREADY_EXISTS, and never opens an attempt.
func TestANotDispatchedIDCannotBeTakenByAnotherRequest(t *testing.T) {
	t.Parallel()
	d := &flipDriver{fails: 1}
	e := permitAllEnv(t, newFaultStore(), d)
	_, err := e.call(context.Background(), "bound-1", "flip.run", map[string]any{"n": 1.0})
	wantCode(t, err, codes.Unavailable, "nothing was executed")
	_, err = e.call(context.Background(), "bound-1", "flip.run", map[string]any{"n": 2.0})
	wantCode(t, err, codes.AlreadyExists, "different request")
	opened := slices.ContainsFunc(e.artifactNames("bound-1"), func(n string) bool { return strings.HasPrefix(n, "attempts/") })
	if d.calls.Load() != 1 || opened {
		t.Errorf("another request under the id reached the driver or opened an attempt: %v", e.artifactNames("bound-1"))
	}
}

// TestSweepRevisitsWhatItFoundTooYoung: a request the sweep at start finds
// unfinished but too young to judge is revisited, and finalised once its
// age says it is abandoned.
func TestSweepRevisitsWhatItFoundTooYoung(t *testing.T) {
	t.Parallel()
	store, d := newFaultStore(), &flipDriver{}
	e := permitAllEnv(t, store, d)
	store.failNext(evidence.ArtifactManifest, 1)
	e.mustCall("young-1", "flip.run", nil)

	later := permitAllEnv(t, store, d)
	ctx := context.Background()
	if stats, err := later.gw.Recover(ctx); err != nil || stats.Waiting != 1 {
		t.Fatalf("sweep at start = %+v, %v; want the young request left waiting", stats, err)
	}
	later.gw.now = func() time.Time { return time.Now().Add(time.Hour) }
	if stats, err := later.gw.revisit(ctx); err != nil || stats.RolledForward != 1 {
		t.Fatalf("revisit = %+v, %v; want the request rolled forward", stats, err)
	}
	wantVerified(t, store, "young-1", 1)
}

// TestAFailedClaimDoesNotMakeTheRequestOurs: a replica whose claim of an id
// failed (another replica had it, running) notes the id for recovery, but
// must not finalise the other replica's request.
func TestAFailedClaimDoesNotMakeTheRequestOurs(t *testing.T) {
	t.Parallel()
	shared := evidence.NewMemoryStore()
	release := make(chan struct{})
	running := &hookDriver{run: func() { <-release }, out: drivers.Result{Stdout: "done\n"}}
	a := newEnv(t, envOptions{
		store:    shared,
		extra:    map[string]drivers.Driver{"flip": running},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	faulty := wrapFaults(shared)
	b := permitAllEnv(t, faulty, &flipDriver{})
	b.gw.instance, b.gw.engineBase = "replica-b", "toolgate/"+Version+"@replica-b"

	done := make(chan error, 1)
	go func() {
		_, err := a.call(context.Background(), "shared-1", "flip.run", nil)
		done <- err
	}()
	waitFor(t, func() bool {
		_, err := shared.Get(context.Background(), evidence.Key("shared-1", evidence.ArtifactDispatch))
		return err == nil
	})
	// The claim fails, and so does the read that would have found the
	// claim: B cannot tell the id is taken, and notes it for recovery.
	faulty.failNext(evidence.ArtifactRequest, 1)
	faulty.mu.Lock()
	faulty.getFails[evidence.ArtifactRequest] = 1
	faulty.mu.Unlock()
	_, err := b.call(context.Background(), "shared-1", "flip.run", nil)
	wantCode(t, err, codes.Unavailable, "nothing was executed")
	// Once it can read, B answers a retry as one: in flight, not run.
	_, err = b.call(context.Background(), "shared-1", "flip.run", nil)
	wantCode(t, err, codes.Aborted, "in flight")
	if _, err := b.gw.revisit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Get(context.Background(), evidence.Key("shared-1", evidence.ArtifactManifest)); err == nil {
		t.Fatal("the replica whose claim failed finalised the request the other replica is running")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the running replica's call failed: %v", err)
	}
	wantVerified(t, shared, "shared-1", 1)
}

// TestUnrecordedFailureIsRecordedLater: a driver that broke after dispatch
// fails the call; when its failure manifest cannot be written either,
// recovery writes it, saying what the caller was told.
func TestUnrecordedFailureIsRecordedLater(t *testing.T) {
	t.Parallel()
	store := newFaultStore()
	broken := &countingDriver{err: errors.New("connection reset by peer")}
	e := newEnv(t, envOptions{
		store:    store,
		extra:    map[string]drivers.Driver{"broken": broken},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	store.failNext(evidence.ArtifactManifest, 1)
	_, err := e.call(context.Background(), "reset-1", "broken.run", nil)
	wantCode(t, err, codes.Unavailable, "connection reset by peer")
	if _, err := e.gw.revisit(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := evidence.ParseManifest(e.artifact("reset-1", evidence.ArtifactManifest))
	if err != nil || m.Outcome != evidence.OutcomeFailed || !strings.Contains(m.Error, "connection reset by peer") {
		t.Fatalf("manifest = %+v, %v; want failed, quoting what the caller was told", m, err)
	}
	if broken.runs.Load() != 1 {
		t.Errorf("the driver ran %d times, want once", broken.runs.Load())
	}
}

// TestAClaimThatLandsAfterTheSweepLookedIsStillClosed: a claim whose
// write timed out may land at the store after a sweep has listed the
// request and found nothing (a frozen store that takes the write late).
// Recovery must not forget the request on that first look, or its attempt
// stays open until the next start.
func TestAClaimThatLandsAfterTheSweepLookedIsStillClosed(t *testing.T) {
	t.Parallel()
	mem := evidence.NewMemoryStore()
	faulty := wrapFaults(mem)
	e := permitAllEnv(t, faulty, &flipDriver{})
	faulty.failNext(evidence.ArtifactRequest, 1)
	faulty.mu.Lock()
	faulty.getFails[evidence.ArtifactRequest] = 1
	faulty.mu.Unlock()
	_, err := e.call(context.Background(), "late-claim", "flip.run", nil)
	wantCode(t, err, codes.Unavailable, "nothing was executed")

	// The sweep looks before the write lands: nothing to close yet.
	if _, err := e.gw.revisit(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Then the write the store took lands.
	req := fmt.Sprintf(`{"request_id":"late-claim","caller":"anonymous","tool_id":"flip.run","args":{},"ctx":{"run_id":"","step_id":"","policy_ref":""},"received_at":%q,"canonical_request_hash":"sha256:%s","gateway":%q}`,
		time.Now().UTC().Format(time.RFC3339Nano), strings.Repeat("0", 64), e.gw.engineBase)
	if err := mem.Put(context.Background(), evidence.Key("late-claim", evidence.ArtifactRequest), []byte(req)); err != nil {
		t.Fatal(err)
	}
	stats, err := e.gw.revisit(context.Background())
	if err != nil || stats.Closed != 1 {
		t.Fatalf("the sweep after the claim landed: %+v, %v; want the open attempt closed", stats, err)
	}
	attempts, err := evidence.ReadAttempts(context.Background(), mem, "late-claim", mustList(t, mem, evidence.RequestPrefix("late-claim")))
	if err != nil || !evidence.NeverDispatched(attempts) {
		t.Fatalf("attempts %+v, %v: want the first closed not dispatched", attempts, err)
	}
}

func mustList(t *testing.T, s evidence.Store, prefix string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestANotDispatchedCloseOutlivesTheProcess: the driver proves nothing
// was sent after the dispatch marker is stored, and the store refuses the
// close. With a spool the close waits there, and a gateway that never saw
// the call (a restart: nothing in memory) runs the retry once; without
// one, the caller is told that a restart would refuse the retry.
func TestANotDispatchedCloseOutlivesTheProcess(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		spool     bool
		firstSays string
	}{
		{"spooled", true, "nothing was executed (retry with the same request_id)"},
		{"no spool", false, "should this gateway restart first, the request is recorded interrupted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store, d := newFaultStore(), &flipDriver{fails: 1}
			signer := testSigner(t, 1)
			o := envOptions{
				store: store, signer: signer, extra: map[string]drivers.Driver{"flip": d},
				policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
			}
			if tc.spool {
				o.spoolDir = t.TempDir()
			}
			first := newEnv(t, o)
			store.failNext(evidence.ArtifactNotDispatched, 1)
			_, err := first.call(context.Background(), "r1", "flip.run", nil)
			wantCode(t, err, codes.Unavailable, tc.firstSays)
			if !tc.spool {
				return
			}
			// An auditor who reads the spool beside the store sees the
			// close win over the marker it follows.
			spool, err := evidence.OpenSpool(o.spoolDir)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := evidence.Verify(context.Background(), store, "r1", evidence.VerifyOptions{Spool: spool, TrustedKeys: []ed25519.PublicKey{signer.PublicKey()}})
			spool.Close()
			if err != nil || rep.Status != evidence.StatusNotDispatched {
				t.Fatalf("verify with the spool: %s %v (%v), want %s", rep.Status, rep.Problems, err, evidence.StatusNotDispatched)
			}
			restarted := newEnv(t, o)
			resp := restarted.mustCall("r1", "flip.run", nil)
			if !resp.GetOk() || d.ran.Load() != 1 {
				t.Fatalf("retry after a restart: ok=%v, tool ran %d times; want ok and once", resp.GetOk(), d.ran.Load())
			}
			wantVerified(t, store, "r1", 2)
		})
	}
}
