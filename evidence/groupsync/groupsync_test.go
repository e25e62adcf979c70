package groupsync

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestSyncStartsAfterTheCall checks the guarantee: the sync that answers
// a caller began after the caller asked, even when one was running.
func TestSyncStartsAfterTheCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var started atomic.Int64 // syncs begun
		var mu sync.Mutex
		var ended []int64 // the number of each sync, as it ends
		g := New(func(string) error {
			n := started.Add(1)
			time.Sleep(time.Millisecond)
			mu.Lock()
			ended = append(ended, n)
			mu.Unlock()
			return nil
		})
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%7) * 300 * time.Microsecond)
				before := started.Load()
				if err := g.Sync(context.Background(), "d"); err != nil {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				// Some sync numbered above before has ended.
				covered := false
				for _, n := range ended {
					covered = covered || n > before
				}
				if !covered {
					t.Errorf("caller %d answered by a sync that began before it asked", i)
				}
			})
		}
		wg.Wait()
		if n := started.Load(); n >= 50 || n < 2 {
			t.Errorf("%d syncs for 50 callers: not shared", n)
		}
		synctest.Wait() // the last round's goroutine ends
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.names) != 0 {
			t.Errorf("%d names left behind", len(g.names))
		}
	})
}

func TestSyncSharesTheError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fail := errors.New("EIO")
		release := make(chan struct{})
		var calls atomic.Int64
		g := New(func(name string) error {
			if calls.Add(1) == 1 {
				<-release // the first sync holds the others in the next round
				return nil
			}
			return fail
		})
		first := make(chan error)
		go func() { first <- g.Sync(context.Background(), "d") }()
		synctest.Wait()
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- g.Sync(context.Background(), "d") }()
		}
		synctest.Wait()
		close(release)
		if err := <-first; err != nil {
			t.Errorf("first: %v", err)
		}
		for range 3 {
			if err := <-errs; !errors.Is(err, fail) {
				t.Errorf("got %v, want the shared sync's error", err)
			}
		}
		if calls.Load() != 2 {
			t.Errorf("%d syncs, want 2", calls.Load())
		}
	})
}

func TestSyncNamesAreIndependent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		stuck := make(chan struct{})
		g := New(func(name string) error {
			if name == "stuck" {
				<-stuck
			}
			return nil
		})
		go g.Sync(context.Background(), "stuck")
		synctest.Wait()
		if err := g.Sync(context.Background(), "other"); err != nil {
			t.Fatal(err)
		}
		// A caller that gives up on a stuck name is answered at once.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := g.Sync(ctx, "stuck"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v", err)
		}
		close(stuck)
		synctest.Wait()
	})
}
