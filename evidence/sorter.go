package evidence

import (
	"context"
	"os"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// SorterInMemory is how many records a Sorter holds in memory before it
// writes them, sorted, to a temporary file.
const SorterInMemory = spillRecords

// Sorter sorts records, each a key and a value, by key, and records of
// equal keys in the order they were added, holding at most SorterInMemory
// of them in memory and the rest in temporary files: a reader that must
// visit a store's requests in an order other than their keys' (a log's)
// so keeps its memory flat however many there are. It is the sorter
// VerifyAll joins the logs with.
//
// Records are added, then read back once with Sorted; Close removes the
// temporary files and must be called in every case. A Sorter is not safe
// for concurrent use.
type Sorter struct{ s *spillSorter }

// NewSorter returns a Sorter whose temporary files go in a folder it
// makes under dir; "" means os.TempDir().
func NewSorter(dir string) (*Sorter, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	s, err := newSpillSorter(dir, SorterInMemory)
	if err != nil {
		return nil, err
	}
	return &Sorter{s}, nil
}

// Add adds a record; it copies key and value. A key or value larger than
// MaxArtifactSize is refused.
func (s *Sorter) Add(key string, value []byte) error { return s.s.add(key, value) }

// Sorted calls fn with every record in order, and stops at and returns
// the first error of fn or of reading the temporary files. The value is
// valid only until fn returns. Sorted may be called once.
func (s *Sorter) Sorted(ctx context.Context, fn func(key string, value []byte) error) error {
	return s.s.sorted(ctx, fn)
}

// Close removes the temporary files; it may be called more than once.
func (s *Sorter) Close() error { return s.s.close() }

// Claim returns where a log records the request's claim: of several
// claims, the one with the lowest index, then origin. ok is false when no
// log the verification read records a claim of it.
func (r VerifyReport) Claim() (pos LogPosition, ok bool) {
	for _, p := range r.Logged {
		if p.Kind != tlog.KindClaim {
			continue
		}
		if !ok || p.Index < pos.Index || (p.Index == pos.Index && p.Origin < pos.Origin) {
			pos, ok = p, true
		}
	}
	return pos, ok
}
