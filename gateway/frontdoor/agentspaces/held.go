package agentspaces

import (
	"sync"
	"time"

	"github.com/toolgate/toolgate/gateway"
)

// heldBatch is a batch paused at operation K, waiting for approval
// ApprovalID.
type heldBatch struct {
	RunID, Requester, Turn, PolicyRef string
	// Identity is the requester's, as it authenticated when the batch was
	// held; the requester's decision replaces it with the one it sends.
	Identity   *gateway.Identity
	Ops        []operation
	K          int
	ApprovalID string
	ExpiresAt  time.Time
}

// heldTable keeps paused batches in memory, at most max of them, each
// until its approval expires. It finds the approval an operationId names,
// and lets a caller that approves its own call resume its batch. It is a
// convenience: the truth is in the evidence, and a batch not held any more
// is re-sent by its client under the same turn.
type heldTable struct {
	mu    sync.Mutex
	max   int
	now   func() time.Time
	byApr map[string]*heldBatch
}

func newHeldTable(max int, now func() time.Time) *heldTable {
	return &heldTable{max: max, now: now, byApr: map[string]*heldBatch{}}
}

// put holds b, replacing a batch paused on the same approval (a re-sent
// batch). When the table is full, expired batches go first, then the one
// that expires soonest: its client can still re-send it.
func (t *heldTable) put(b *heldBatch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if _, ok := t.byApr[b.ApprovalID]; !ok && len(t.byApr) >= t.max {
		t.sweepLocked(now)
	}
	if _, ok := t.byApr[b.ApprovalID]; !ok && len(t.byApr) >= t.max {
		var first *heldBatch
		for _, h := range t.byApr {
			if first == nil || h.ExpiresAt.Before(first.ExpiresAt) {
				first = h
			}
		}
		delete(t.byApr, first.ApprovalID)
	}
	if !now.Before(b.ExpiresAt) {
		return
	}
	t.byApr[b.ApprovalID] = b
}

func (t *heldTable) sweepLocked(now time.Time) {
	for id, h := range t.byApr {
		if !now.Before(h.ExpiresAt) {
			delete(t.byApr, id)
		}
	}
}

// find returns the batches of run that match, unexpired.
func (t *heldTable) find(runID string, match func(*heldBatch) bool) []*heldBatch {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var out []*heldBatch
	for _, h := range t.byApr {
		if h.RunID == runID && now.Before(h.ExpiresAt) && (match == nil || match(h)) {
			out = append(out, h)
		}
	}
	return out
}

// take removes and returns the batch of run paused on approvalID, if it
// is held and unexpired. Only one caller gets it, so two resumes never
// run a batch twice over.
func (t *heldTable) take(runID, approvalID string) (*heldBatch, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.byApr[approvalID]
	if !ok || h.RunID != runID {
		return nil, false
	}
	delete(t.byApr, approvalID)
	if !t.now().Before(h.ExpiresAt) {
		return nil, false
	}
	return h, true
}

// size is how many batches are held, expired ones included until swept.
func (t *heldTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byApr)
}
