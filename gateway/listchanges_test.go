package gateway

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// received reports whether ch delivers a value (not a close) within d.
func received(ch <-chan struct{}, d time.Duration) bool {
	select {
	case _, ok := <-ch:
		return ok
	case <-time.After(d):
		return false
	}
}

// TestSubscribePolicyChangesFiresOnReload: every subscriber hears of each
// swap of the policy sets, by ReloadPolicies or by the watcher, once per
// pending change however many swaps it missed, never of a rejected
// reload, and nothing after it unsubscribed.
func TestSubscribePolicyChangesFiresOnReload(t *testing.T) {
	lg := newLiveGateway(t, liveOptions{policies: map[string]string{"policy.default.cedar": permitAll}})
	first, stopFirst := lg.gw.SubscribePolicyChanges()
	second, stopSecond := lg.gw.SubscribePolicyChanges()
	defer stopSecond()

	t.Run("a reload that swaps tells every subscriber", func(t *testing.T) {
		lg.reload(map[string]string{"policy.default.cedar": groupPolicy})
		if !received(first, time.Second) || !received(second, time.Second) {
			t.Fatal("a subscriber was not told of the swap")
		}
	})
	t.Run("many swaps unread are one pending change", func(t *testing.T) {
		for _, text := range []string{permitAll, groupPolicy, permitAll} {
			lg.reload(map[string]string{"policy.default.cedar": text})
		}
		if !received(first, time.Second) {
			t.Fatal("no change pending after three swaps")
		}
		if received(first, 50*time.Millisecond) {
			t.Fatal("three swaps left more than one change pending")
		}
		received(second, time.Second)
	})
	t.Run("a rejected reload tells nobody", func(t *testing.T) {
		lg.write(map[string]string{"policy.default.cedar": "permit (principal, action, resource"})
		if swapped, err := lg.gw.ReloadPolicies(); swapped || err == nil {
			t.Fatalf("a broken policy: swapped %v, %v", swapped, err)
		}
		if received(first, 100*time.Millisecond) {
			t.Fatal("told of a reload that kept the running sets")
		}
	})
	t.Run("the watcher's swaps are told too", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); lg.gw.WatchPolicies(ctx, 20*time.Millisecond) }()
		defer func() { cancel(); <-done }()
		lg.write(map[string]string{"policy.default.cedar": groupPolicy})
		if !received(first, 5*time.Second) {
			t.Fatal("the watcher swapped the sets in and no subscriber was told")
		}
		received(second, time.Second)
	})
	t.Run("unsubscribing closes the channel once and ends the deliveries", func(t *testing.T) {
		stopFirst()
		stopFirst()
		if _, ok := <-first; ok {
			t.Fatal("the channel is open after unsubscribing")
		}
		lg.reload(map[string]string{"policy.default.cedar": permitAll})
		if !received(second, time.Second) {
			t.Fatal("the remaining subscriber was not told")
		}
	})
	t.Run("subscriptions cost no goroutine", func(t *testing.T) {
		before := runtime.NumGoroutine()
		stops := make([]func(), 100)
		for i := range stops {
			_, stops[i] = lg.gw.SubscribePolicyChanges()
		}
		lg.reload(map[string]string{"policy.default.cedar": groupPolicy})
		if after := runtime.NumGoroutine(); after > before {
			t.Fatalf("%d goroutines before 100 subscriptions and a reload, %d after", before, after)
		}
		for _, stop := range stops {
			stop()
		}
		if n := len(lg.gw.changes.subs); n != 1 {
			t.Fatalf("%d subscriptions left, want only the second", n)
		}
	})
}
