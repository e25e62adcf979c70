package agentspaces

import (
	"fmt"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestHeldBatchesAreBoundedAndExpire(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	h := newHeldTable(3, clock.now)
	for i := range 5 {
		h.put(&heldBatch{RunID: "r", ApprovalID: fmt.Sprint("apr_", i), ExpiresAt: clock.t.Add(time.Duration(10-i) * time.Minute)})
	}
	if n := h.size(); n != 3 {
		t.Fatalf("%d held, want the bound 3", n)
	}
	// The ones that expire soonest (the last put) went first.
	for _, tc := range []struct {
		id   string
		held bool
	}{{"apr_0", true}, {"apr_1", true}, {"apr_2", false}, {"apr_3", false}, {"apr_4", true}} {
		if got := len(h.find("r", func(b *heldBatch) bool { return b.ApprovalID == tc.id })) == 1; got != tc.held {
			t.Errorf("%s held %v, want %v", tc.id, got, tc.held)
		}
	}
	clock.t = clock.t.Add(7 * time.Minute) // apr_4 (6 min) expired
	if _, ok := h.take("r", "apr_4"); ok {
		t.Error("an expired batch was taken")
	}
	if got := h.find("r", nil); len(got) != 2 {
		t.Errorf("%d unexpired, want 2", len(got))
	}
	if _, ok := h.take("other-run", "apr_0"); ok {
		t.Error("another run took the batch")
	}
	if _, ok := h.take("r", "apr_0"); !ok {
		t.Error("apr_0 not taken")
	}
	if _, ok := h.take("r", "apr_0"); ok {
		t.Error("apr_0 taken twice")
	}
	h.put(&heldBatch{RunID: "r", ApprovalID: "apr_old", ExpiresAt: clock.t.Add(-time.Second)})
	if len(h.find("r", func(b *heldBatch) bool { return b.ApprovalID == "apr_old" })) != 0 {
		t.Error("a batch whose approval already expired was held")
	}
}

func TestARePausedBatchReplacesItself(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	h := newHeldTable(1, clock.now)
	h.put(&heldBatch{RunID: "r", Turn: "t1", ApprovalID: "apr_a", ExpiresAt: clock.t.Add(time.Hour)})
	h.put(&heldBatch{RunID: "r", Turn: "t1", ApprovalID: "apr_a", ExpiresAt: clock.t.Add(time.Hour)})
	if h.size() != 1 {
		t.Fatalf("%d held", h.size())
	}
}
