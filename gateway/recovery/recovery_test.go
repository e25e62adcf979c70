package recovery

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
)

// TestNotesAddUp: a second note of one request (a retry's failed claim
// beside the owner's proof) never erases what the first one said.
func TestNotesAddUp(t *testing.T) {
	t.Parallel()
	r := NewNotes()
	r.LeftUnfinished("r1", Unfinished{NotDispatched: 2, Reason: "refused"})
	r.LeftUnfinished("r1", Unfinished{})
	r.LeftUnfinished("r1", Unfinished{Told: "ran, but"})
	r.LeftUnfinished("r1", Unfinished{Aged: true})
	got, _ := r.Lookup("r1")
	if want := (Unfinished{Told: "ran, but", NotDispatched: 2, Reason: "refused"}); got != want {
		t.Errorf("note = %+v, want %+v", got, want)
	}
}

// TestNotesInFlightAcrossGoroutines: calls of one request entering and
// leaving from many goroutines leave no count behind.
func TestNotesInFlightAcrossGoroutines(t *testing.T) {
	t.Parallel()
	r := NewNotes()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			r.Enter("r1")
			r.Leave("r1")
		})
	}
	r.Enter("r1")
	wg.Wait()
	if r.OthersRunning("r1", 1) || !r.OthersRunning("r1", 0) {
		t.Fatal("one call in flight is not counted as one")
	}
	r.Leave("r1")
	if r.OthersRunning("r1", 0) {
		t.Fatal("a call that left is still counted")
	}
}

func TestApprovalsWatched(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	r := NewNotes()
	r.WatchApproval("a", at, at.Add(time.Hour))
	r.WatchApproval("b", at.Add(10*time.Minute), at.Add(2*time.Hour))
	r.WatchApproval("denied", at, time.Time{}) // due now
	r.ApprovalDecided("b")
	if n, age := r.PendingApprovals(at.Add(30 * time.Minute)); n != 1 || age != 30*time.Minute {
		t.Fatalf("pending = %d, oldest %v; want 1, 30m", n, age)
	}
	if got := r.ExpiredApprovals(at.Add(90 * time.Minute)); strings.Join(got, ",") != "a,denied" {
		t.Fatalf("expired = %v, want [a denied]", got)
	}
	r.UnwatchApproval("a")
	if got := r.ExpiredApprovals(at.Add(3 * time.Hour)); strings.Join(got, ",") != "b,denied" {
		t.Fatalf("expired after unwatching a = %v, want [b denied]", got)
	}
}

type bounded struct {
	drivers.Driver
	max time.Duration
}

func (b bounded) MaxRunTime() time.Duration { return b.max }

func TestLimitsDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		o    Options
		ds   map[string]drivers.Driver
		want Limits
	}{
		{"nothing set, no drivers", Options{OpTimeout: time.Second}, nil,
			Limits{Interval: DefaultSweepInterval, InterruptedAfter: 6 * time.Second, OpenAfter: 4 * time.Second, RespondedAfter: 2 * time.Second}},
		{"a bounded driver", Options{OpTimeout: time.Second}, map[string]drivers.Driver{"b": bounded{max: time.Minute}},
			Limits{Interval: DefaultSweepInterval, InterruptedAfter: time.Minute + 6*time.Second, OpenAfter: 4 * time.Second, RespondedAfter: 2 * time.Second}},
		{"an unbounded driver", Options{OpTimeout: time.Second}, map[string]drivers.Driver{"u": nil},
			Limits{Interval: DefaultSweepInterval, InterruptedAfter: time.Hour + 6*time.Second, OpenAfter: 4 * time.Second, RespondedAfter: 2 * time.Second}},
		{"all set", Options{Interval: time.Second, InterruptedAfter: time.Minute, OpTimeout: time.Second}, nil,
			Limits{Interval: time.Second, InterruptedAfter: time.Minute, OpenAfter: 4 * time.Second, RespondedAfter: 2 * time.Second}},
		{"the store's default deadline", Options{}, nil,
			Limits{Interval: DefaultSweepInterval, InterruptedAfter: 6 * evidence.DefaultOpTimeout, OpenAfter: 4 * evidence.DefaultOpTimeout, RespondedAfter: 2 * evidence.DefaultOpTimeout}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.o.Limits(tc.ds); got != tc.want {
				t.Fatalf("Limits = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	t.Parallel()
	l := Limits{OpenAfter: 4 * time.Second, RespondedAfter: 2 * time.Second, InterruptedAfter: time.Minute}
	open := evidence.Attempt{Number: 1, State: evidence.AttemptOpen}
	dispatched := evidence.Attempt{Number: 2, State: evidence.Dispatched}
	tests := []struct {
		name    string
		r       Request
		noted   bool
		left    Unfinished
		do      Action
		marked  bool
		outcome string
	}{
		{"a young response waits for its own manifest", Request{Responded: true, Last: dispatched, Age: time.Second}, false, Unfinished{}, Wait, false, ""},
		{"an old response is rolled forward", Request{Responded: true, Last: dispatched, Age: 3 * time.Second}, false, Unfinished{}, RollForward, false, ""},
		{"a response this process left is rolled forward at once", Request{Responded: true, Last: dispatched}, true, Unfinished{}, RollForward, false, ""},
		{"an attempt closed not dispatched is settled", Request{Last: evidence.Attempt{Number: 1, State: evidence.NotDispatched}, Age: time.Hour}, false, Unfinished{}, None, false, ""},
		{"a young open attempt waits", Request{Last: open, Age: time.Second}, false, Unfinished{}, Wait, false, ""},
		{"an old open attempt is closed", Request{Last: open, Age: 5 * time.Second}, false, Unfinished{}, Close, false, ""},
		{"a proven not-dispatched attempt is closed marked", Request{Last: dispatched}, true, Unfinished{NotDispatched: 2, Reason: "refused"}, Close, true, ""},
		{"a note of another attempt is no proof", Request{Last: dispatched, Age: time.Second}, false, Unfinished{NotDispatched: 1}, Wait, false, ""},
		{"what the caller was told is recorded", Request{Last: dispatched}, true, Unfinished{Told: "ran, but"}, Interrupt, false, evidence.OutcomeFailed},
		{"a dispatched request this process left is interrupted", Request{Last: dispatched}, true, Unfinished{}, Interrupt, false, evidence.OutcomeInterrupted},
		{"another process's dispatched request waits out the run time", Request{Last: dispatched, Age: 59 * time.Second}, false, Unfinished{}, Wait, false, ""},
		{"then it is interrupted", Request{Last: dispatched, Age: time.Minute}, false, Unfinished{}, Interrupt, false, evidence.OutcomeInterrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := l.Next(tc.r, tc.noted, tc.left)
			if got.Do != tc.do || got.Marked != tc.marked || got.Outcome != tc.outcome {
				t.Fatalf("Next = %+v; want do %v, marked %v, outcome %q", got, tc.do, tc.marked, tc.outcome)
			}
			if (got.Do == Close || got.Do == Interrupt) && got.Reason == "" {
				t.Fatal("a record recovery writes says nothing of why")
			}
		})
	}
}

func TestStatsCount(t *testing.T) {
	t.Parallel()
	var s Stats
	for _, a := range []Action{None, Wait, Wait, RollForward, Close, Interrupt} {
		s.Count(a)
	}
	if want := (Stats{Examined: 6, Waiting: 2, RolledForward: 1, Closed: 1, Interrupted: 1}); s != want {
		t.Fatalf("stats = %+v, want %+v", s, want)
	}
}
