package browse

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// Summary is what the index keeps of one request: the fields the requests
// page shows and filters on. Everything in it comes from the store.
type Summary struct {
	ID        string
	Caller    string
	Tool      string
	Driver    string
	RunID     string
	StepID    string
	ParentID  string
	PolicyRef string
	Received  time.Time
	Decision  string
	RuleID    string
	// State is the request's state as its artifacts show it (see state).
	State string
	// keys is how many keys the request had when it was read: a request
	// whose count is unchanged is not read again.
	keys int
}

// Request states, in Summary.State.
const (
	StateClaimed         = "claimed"
	StateDecided         = "decided"
	StatePendingApproval = "pending-approval"
	StateNotDispatched   = "not-dispatched"
	StateDispatched      = "dispatched"
	// Finished requests have their manifest's outcome: completed, failed
	// or interrupted.
)

// Index is the console's index of a store's requests, newest first. It is
// built by reading the store (Refresh) and kept current by refreshing it:
// a refresh lists the store's keys once and reads only the requests that
// are new or have new keys, so that the requests page is a scan of memory,
// never a listing of the store.
//
// An in-memory index, rather than an embedded database, costs no
// dependency and no file to keep consistent with the bucket: the bucket is
// the only truth, and the index is rebuilt from it on every start (about
// 300 bytes a request: 30 MB for 100,000 requests).
type Index struct {
	store evidence.Reader
	log   *slog.Logger
	mu    sync.Mutex // serialises refreshes
	snap  atomic.Pointer[snapshot]
}

// snapshot is one immutable state of the index.
type snapshot struct {
	all   []*Summary // newest first
	byID  map[string]int
	built time.Time
	// runs maps a run id to its requests' positions in all.
	runs map[string][]int
}

// NewIndex returns an empty index of store; Refresh fills it.
func NewIndex(store evidence.Reader, log *slog.Logger) *Index {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x := &Index{store: store, log: log}
	x.snap.Store(&snapshot{byID: map[string]int{}, runs: map[string][]int{}})
	return x
}

// Refresh reads the store's requests that are new or changed since the
// last refresh, drops the ones gone, and swaps the new state in.
func (x *Index) Refresh(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := x.snap.Load()
	var all []*Summary
	err := evidence.WalkRequests(ctx, x.store, func(id string, keys []string) error {
		if i, ok := old.byID[id]; ok && old.all[i].keys == len(keys) {
			all = append(all, old.all[i])
			return nil
		}
		s, err := readSummary(ctx, x.store, id, keys)
		if err != nil {
			return err
		}
		all = append(all, s)
		return nil
	})
	if err != nil {
		return fmt.Errorf("console: index: %w", err)
	}
	x.snap.Store(newSnapshot(all))
	return nil
}

// Run refreshes the index until ctx ends, waiting interval after each
// refresh ends (a refresh lists every key of the store: on a large bucket
// it takes a while, and refreshes never run back to back), and logs a
// refresh that fails (the index it had stays).
func (x *Index) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := x.Refresh(ctx); err != nil && ctx.Err() == nil {
			x.log.Warn("console: index refresh failed; the pages show the index as it was", "err", err)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func newSnapshot(all []*Summary) *snapshot {
	slices.SortFunc(all, func(a, b *Summary) int {
		return cmp.Or(b.Received.Compare(a.Received), strings.Compare(a.ID, b.ID))
	})
	s := &snapshot{all: all, byID: make(map[string]int, len(all)), runs: map[string][]int{}, built: time.Now()}
	for i, r := range all {
		s.byID[r.ID] = i
		if r.RunID != "" {
			s.runs[r.RunID] = append(s.runs[r.RunID], i)
		}
	}
	return s
}

// Len is how many requests the index holds.
func (x *Index) Len() int { return len(x.snap.Load().all) }

// Get returns the summary of request id.
func (x *Index) Get(id string) (Summary, bool) {
	s := x.snap.Load()
	i, ok := s.byID[id]
	if !ok {
		return Summary{}, false
	}
	return *s.all[i], true
}

// Run returns the requests of run id, oldest first.
func (x *Index) RunCalls(id string) []Summary {
	s := x.snap.Load()
	pos := s.runs[id]
	out := make([]Summary, 0, len(pos))
	for _, i := range slices.Backward(pos) {
		out = append(out, *s.all[i])
	}
	return out
}

// Filter selects requests; empty fields select everything.
type Filter struct {
	Caller, Tool, Decision, Rule, State, RunID string
	// Query is matched as a substring of the request id.
	Query string
	// From and To bound the received time (To exclusive); zero: unbounded.
	From, To time.Time
	// After continues a listing after this request id.
	After string
	// Limit is the page size.
	Limit int
	// Deadline, when set, ends the scan early: the page then holds what
	// was found so far and Next continues the scan (Page.Partial), so
	// that a reader who may see few requests, each decided by Cedar the
	// first time, still gets a page in time.
	Deadline time.Time
}

func (f Filter) match(s *Summary) bool {
	return (f.Caller == "" || s.Caller == f.Caller) && (f.Tool == "" || s.Tool == f.Tool) &&
		(f.Decision == "" || s.Decision == f.Decision) && (f.Rule == "" || s.RuleID == f.Rule) &&
		(f.State == "" || s.State == f.State) && (f.RunID == "" || s.RunID == f.RunID) &&
		(f.Query == "" || strings.Contains(s.ID, f.Query)) &&
		(f.From.IsZero() || !s.Received.Before(f.From)) && (f.To.IsZero() || s.Received.Before(f.To))
}

// Page is one page of a listing.
type Page struct {
	Rows []Summary
	// Next is the After of the next page, "" on the last one.
	Next string
	// Partial: the scan ran out of time before the page was full.
	Partial bool
	// Scanned is how many requests the scan passed.
	Scanned int
	// Total is how many requests the index holds.
	Total int
}

// Query returns, newest first, up to f.Limit requests that f selects and
// visible lets the reader see.
func (x *Index) Query(f Filter, visible func(*Summary) bool) Page {
	s := x.snap.Load()
	start := 0
	if f.After != "" {
		if i, ok := s.byID[f.After]; ok {
			start = i + 1
		}
	}
	p := Page{Total: len(s.all)}
	for i := start; i < len(s.all); i++ {
		if (i-start)%256 == 255 && !f.Deadline.IsZero() && time.Now().After(f.Deadline) {
			p.Next, p.Partial = s.all[i-1].ID, true
			break
		}
		p.Scanned++
		r := s.all[i]
		if !f.match(r) || !visible(r) {
			continue
		}
		if len(p.Rows) == f.Limit {
			p.Next = p.Rows[len(p.Rows)-1].ID
			break
		}
		p.Rows = append(p.Rows, *r)
	}
	return p
}

// readSummary reads what the index keeps of request id, whose keys are
// keys. An artifact that does not parse leaves its fields empty: the
// request page and verification say what is wrong with it.
func readSummary(ctx context.Context, r evidence.Reader, id string, keys []string) (*Summary, error) {
	s := &Summary{ID: id, keys: len(keys)}
	var req evidence.RequestRecord
	if err := readJSON(ctx, r, keys, evidence.Key(id, evidence.ArtifactRequest), &req); err != nil {
		return nil, err
	}
	s.Caller, s.Tool, s.RunID, s.StepID = req.Caller, req.ToolID, req.Ctx.RunID, req.Ctx.StepID
	s.ParentID, s.PolicyRef, s.Received = req.ParentRequestID, req.Ctx.PolicyRef, req.ReceivedAt
	var dec evidence.DecisionRecord
	if err := readJSON(ctx, r, keys, lastDecisionKey(id, keys), &dec); err != nil {
		return nil, err
	}
	s.Decision, s.RuleID, s.Driver = dec.Decision, dec.RuleID, dec.Driver
	state, err := requestState(ctx, r, id, keys, dec.Decision != "")
	if err != nil {
		return nil, err
	}
	s.State = state
	return s, nil
}

// requestState derives a request's state from its artifacts: the
// manifest's outcome once it has one, else what its attempts show.
func requestState(ctx context.Context, r evidence.Reader, id string, keys []string, decided bool) (string, error) {
	if slices.Contains(keys, evidence.Key(id, evidence.ArtifactManifest)) {
		var m evidence.Manifest
		if err := readJSON(ctx, r, keys, evidence.Key(id, evidence.ArtifactManifest), &m); err != nil {
			return "", err
		}
		if m.Outcome == "" {
			return "unreadable", nil
		}
		return m.Outcome, nil
	}
	if slices.Contains(keys, evidence.Key(id, evidence.ArtifactApprovalRequest)) &&
		!slices.Contains(keys, evidence.Key(id, evidence.ArtifactApproval)) {
		return StatePendingApproval, nil
	}
	attempts, err := evidence.ReadAttempts(ctx, r, id, keys)
	if err != nil || len(attempts) == 0 {
		return "unreadable", nil
	}
	switch last := attempts[len(attempts)-1]; {
	case last.State == evidence.Dispatched:
		return StateDispatched, nil
	case last.State == evidence.NotDispatched:
		return StateNotDispatched, nil
	case decided:
		return StateDecided, nil
	}
	return StateClaimed, nil
}

// readJSON decodes key into v when keys lists it. A missing or malformed
// artifact leaves v as it is; only a failing store is an error.
func readJSON(ctx context.Context, r evidence.Reader, keys []string, key string, v any) error {
	if !slices.Contains(keys, key) {
		return nil
	}
	data, err := r.Get(ctx, key)
	if errors.Is(err, evidence.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_ = json.Unmarshal(data, v) // a malformed artifact is verification's to report
	return nil
}

// lastDecisionKey is the key of the last decided attempt's decision.
func lastDecisionKey(id string, keys []string) string {
	key, last := evidence.Key(id, evidence.ArtifactPolicyDecision), 0
	for _, k := range keys {
		if n, name, ok := evidence.ParseAttemptKey(id, k); ok && name == evidence.ArtifactPolicyDecision && n > last {
			key, last = k, n
		}
	}
	return key
}
