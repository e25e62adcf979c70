package evidence

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// TestSorterSortsStablyPastMemory: records beyond what a Sorter holds in
// memory come back sorted, equal keys in the order added, and Close
// leaves no file behind.
func TestSorterSortsStablyPastMemory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := NewSorter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := SorterInMemory*2 + 7
	for i := range n {
		// Keys fall and repeat: key k is added three times.
		key := fmt.Sprintf("k%06d", (n-i)/3)
		if err := s.Add(key, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	var lastKey string
	lastValue := -1
	got := 0
	err = s.Sorted(context.Background(), func(key string, value []byte) error {
		var v int
		if _, err := fmt.Sscan(string(value), &v); err != nil {
			return err
		}
		switch {
		case key < lastKey:
			return fmt.Errorf("key %q after %q", key, lastKey)
		case key == lastKey && v < lastValue:
			return fmt.Errorf("key %q: record %d after %d", key, v, lastValue)
		}
		lastKey, lastValue = key, v
		got++
		return nil
	})
	if err != nil || got != n {
		t.Fatalf("%d of %d records: %v", got, n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestVerifyReportClaim: the claim of lowest index, then origin, whatever
// else the logs record.
func TestVerifyReportClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		logged []LogPosition
		want   LogPosition
		ok     bool
	}{
		{"none", nil, LogPosition{}, false},
		{"completion only", []LogPosition{{Kind: "completion", Origin: "a", Index: 1}}, LogPosition{}, false},
		{"one", []LogPosition{{Kind: "completion", Origin: "a", Index: 1}, {Kind: "claim", Origin: "a", Index: 4}},
			LogPosition{Kind: "claim", Origin: "a", Index: 4}, true},
		{"lowest index", []LogPosition{{Kind: "claim", Origin: "a", Index: 9}, {Kind: "claim", Origin: "b", Index: 2}},
			LogPosition{Kind: "claim", Origin: "b", Index: 2}, true},
		{"same index, origin", []LogPosition{{Kind: "claim", Origin: "z", Index: 2}, {Kind: "claim", Origin: "b", Index: 2}},
			LogPosition{Kind: "claim", Origin: "b", Index: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := VerifyReport{Logged: tc.logged}.Claim()
			if got != tc.want || ok != tc.ok {
				t.Errorf("Claim() = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
