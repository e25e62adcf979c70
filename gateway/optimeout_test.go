package gateway

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
)

// frozenStore stops answering once frozen is closed, as a SIGSTOPped
// MinIO does: every operation waits until its context ends.
type frozenStore struct {
	evidence.StoreCloser
	frozen chan struct{}
}

func (s *frozenStore) Put(ctx context.Context, key string, data []byte) error {
	select {
	case <-s.frozen:
		<-ctx.Done()
		return ctx.Err()
	default:
		return s.StoreCloser.Put(ctx, key, data)
	}
}

func (s *frozenStore) Get(ctx context.Context, key string) ([]byte, error) {
	select {
	case <-s.frozen:
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		return s.StoreCloser.Get(ctx, key)
	}
}

// TestAFrozenStoreDoesNotHoldTheCall: with the store frozen, a call with no
// deadline of its own ends at evidence.op_timeout with UNAVAILABLE and
// nothing runs, where it used to wait as long as the store did.
func TestAFrozenStoreDoesNotHoldTheCall(t *testing.T) {
	t.Parallel()
	const opTimeout = 200 * time.Millisecond
	frozen := &frozenStore{StoreCloser: evidence.NewMemoryStore(), frozen: make(chan struct{})}
	d := &countingDriver{out: drivers.Result{Stdout: "ran"}}
	e := newEnv(t, envOptions{
		store:    evidence.WithOpTimeout(frozen, opTimeout),
		extra:    map[string]drivers.Driver{"count": d},
		policies: map[string]string{"policy.default.cedar": `permit (principal, action, resource);`},
	})
	e.mustCall("before-freeze", "count.run", nil)
	close(frozen.frozen)

	start := time.Now()
	_, err := e.call(context.Background(), "during-freeze", "count.run", nil)
	took := time.Since(start)
	wantCode(t, err, codes.Unavailable, "operation timeout of 200ms")
	if took > 10*time.Second {
		t.Errorf("the call took %v against a frozen store, want about %v", took, opTimeout)
	}
	if got := d.runs.Load(); got != 1 {
		t.Errorf("the driver ran %d times, want only the call before the freeze", got)
	}
}
