package gateway

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/lease"
)

// testLeaseHeartbeat keeps the lease tests short: a newcomer takes an
// unrenewed lease over after three of them.
const testLeaseHeartbeat = 10 * time.Millisecond

// takeLease takes the lease on the harness's instance name in store;
// it is not renewed (Run is not started): a process that stops, or is
// stopped, right after.
func takeLease(t *testing.T, store evidence.Store) *lease.Lease {
	t.Helper()
	l, err := lease.Acquire(context.Background(), store, lease.Options{Instance: "test-host", Heartbeat: testLeaseHeartbeat,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// leaseEnv is permitAllEnv holding l.
func leaseEnv(t *testing.T, store evidence.Store, d *flipDriver, l *lease.Lease) *env {
	return newEnv(t, envOptions{
		store:    store,
		extra:    map[string]drivers.Driver{"flip": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
		lease:    l,
	})
}

// TestFencedProcessNeverFinalisesAnotherEpochsRequest: two processes
// with one instance name. The older one (epoch 1) stopped, the newer one
// (epoch 2) took the name over and runs a call; the older wakes up with
// that call and one of its own left dispatched in the store. Its
// recovery finalises neither: the newer process's is not its own, and
// for its own it no longer holds the name. New calls to it get
// UNAVAILABLE and run nothing. The newer process finalises both, in time.
func TestFencedProcessNeverFinalisesAnotherEpochsRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, d := newFaultStore(), &flipDriver{}
	older := leaseEnv(t, store, d, takeLease(t, store))
	store.failNext(evidence.ArtifactResponse, 1)
	_, err := older.call(ctx, "older-ran", "flip.run", nil)
	wantCode(t, err, codes.Aborted, "ran, but")

	newer := leaseEnv(t, store, d, takeLease(t, store))
	store.failNext(evidence.ArtifactResponse, 1)
	_, err = newer.call(ctx, "newer-ran", "flip.run", nil)
	wantCode(t, err, codes.Aborted, "ran, but")
	if claim, err := evidence.ParseRequestRecord(newer.artifact("newer-ran", evidence.ArtifactRequest)); err != nil || claim.Gateway != "toolgate/"+Version+"@test-host#2" {
		t.Fatalf("the newer process's claim names %q (%v), want its epoch, #2", claim.Gateway, err)
	}

	// The older process wakes up long after: every request looks abandoned.
	older.gw.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := older.gw.Recover(ctx); err == nil {
		t.Error("the fenced process's recovery reported no error for its own request it may no longer finalise")
	}
	if _, err := older.gw.revisit(ctx); err == nil {
		t.Error("the fenced process's revisit reported no error")
	}
	for _, id := range []string{"older-ran", "newer-ran"} {
		if _, err := store.Get(ctx, evidence.Key(id, evidence.ArtifactManifest)); err == nil {
			t.Errorf("the fenced process wrote a manifest for %s", id)
		}
	}
	ran := d.ran.Load()
	_, err = older.call(ctx, "to-older", "flip.run", nil)
	wantCode(t, err, codes.Unavailable, "taken over by a newer gateway process")
	if d.ran.Load() != ran {
		t.Error("the fenced process ran a call")
	}

	newer.gw.now = older.gw.now
	stats, err := newer.gw.Recover(ctx)
	if err != nil || stats.Interrupted != 2 {
		t.Fatalf("the newer process's recovery: %+v, %v; want both requests interrupted", stats, err)
	}
}

// TestOwnsByEpoch: a process owns its instance's records of its own epoch
// and earlier ones, and those written before epochs existed; never a newer
// epoch's, nor another instance's.
func TestOwnsByEpoch(t *testing.T) {
	t.Parallel()
	store := newFaultStore()
	takeLease(t, store)
	l := takeLease(t, store) // epoch 2
	e := leaseEnv(t, store, &flipDriver{}, l)
	base := "toolgate/" + Version + "@test-host"
	for _, tc := range []struct {
		gateway string
		want    bool
	}{
		{base, true},
		{base + "#1", true},
		{base + "#2", true},
		{base + "#3", false},
		{"toolgate/" + Version + "@other-host#2", false},
		{"toolgate/" + Version + "@other-host", false},
		{"", false},
	} {
		if got := e.gw.owns(tc.gateway); got != tc.want {
			t.Errorf("owns(%q) = %v, want %v", tc.gateway, got, tc.want)
		}
	}
}
