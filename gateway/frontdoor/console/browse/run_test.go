package browse

import (
	"testing"
	"time"
)

func TestRunTreeNestsGuestCallsAndSurvivesCycles(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(id, parent string, sec int) Summary {
		return Summary{ID: id, ParentID: parent, Received: at.Add(time.Duration(sec) * time.Second)}
	}
	tests := []struct {
		name  string
		calls []Summary
		want  []string // id@depth, in order
	}{
		{name: "flat", calls: []Summary{s("a", "", 0), s("b", "", 1)}, want: []string{"a@0", "b@0"}},
		{name: "guest calls under their parent", calls: []Summary{s("p", "", 0), s("q", "", 1), s("g1", "p", 2), s("g2", "g1", 3)},
			want: []string{"p@0", "g1@1", "g2@2", "q@0"}},
		{name: "a parent outside the run", calls: []Summary{s("g", "elsewhere", 0)}, want: []string{"g@0"}},
		{name: "a parent cycle the store made up", calls: []Summary{s("x", "y", 0), s("y", "x", 1), s("self", "self", 2)},
			want: []string{"self@0", "x@0", "y@1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := runTree(tc.calls)
			if len(got) != len(tc.want) {
				t.Fatalf("%d calls, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, c := range got {
				if w := tc.want[i]; c.ID+"@"+itoa(c.Depth) != w {
					t.Fatalf("call %d is %s@%d, want %s", i, c.ID, c.Depth, w)
				}
			}
		})
	}
}
