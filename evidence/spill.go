package evidence

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// Defaults of a spillSorter.
const (
	// spillFanIn is how many runs one merge reads at once. More runs than
	// that are first merged in groups, so that open files and read buffers
	// stay bounded however many records are sorted.
	spillFanIn = 64
	// spillBufSize is the buffer of each run file read or written.
	spillBufSize = 32 << 10
	// spillMaxField bounds a key or a value: nothing larger is added, so a
	// larger length read back from a run file means a damaged file, which
	// must not make the sorter allocate it.
	spillMaxField = MaxArtifactSize
)

// spillSorter sorts records, each a key and a value, by key, and records
// of equal keys in the order they were added, while holding at most a
// fixed number of them in memory: a full batch is sorted and written to a
// temporary file (a run), and sorted merges the runs and the last, partial
// batch. Memory so stays flat however many records are sorted, which is
// what lets a verifier join a log of millions of entries against a bucket.
//
// Records are added, then read back once with sorted; close removes the
// temporary files and must be called in every case. A spillSorter is not
// safe for concurrent use.
type spillSorter struct {
	parent string // the caller's folder
	dir    string // the sorter's own folder under parent, made at the first spill
	max    int    // records held in memory at most
	fanIn  int
	// maxField is the largest key or value, spillMaxField but in tests.
	maxField int
	arena    []byte      // keys and values of the batch, back to back
	batch    []spillSpan // the batch's records, in the order added
	runs     []string    // run files, oldest first
	seq      int         // names run files
	used     bool        // sorted has been called
}

// spillSpan locates one record of the batch in the arena.
type spillSpan struct{ off, klen, vlen int }

// newSpillSorter returns a sorter that keeps at most maxInMemory records
// in memory and writes the others to a folder it makes under dir.
func newSpillSorter(dir string, maxInMemory int) (*spillSorter, error) {
	if maxInMemory < 1 {
		return nil, fmt.Errorf("evidence: spill: %d records in memory, want at least 1", maxInMemory)
	}
	if dir == "" {
		return nil, errors.New("evidence: spill: no folder for temporary files")
	}
	return &spillSorter{parent: dir, max: maxInMemory, fanIn: spillFanIn, maxField: spillMaxField}, nil
}

// add adds a record. It copies key and value, so the caller may reuse
// value's array once add returns.
func (s *spillSorter) add(key string, value []byte) error {
	if s.used {
		return errors.New("evidence: spill: add after sorted")
	}
	if len(key) > s.maxField || len(value) > s.maxField {
		return fmt.Errorf("evidence: spill: a key or value is larger than %d bytes", s.maxField)
	}
	off := len(s.arena)
	s.arena = append(append(s.arena, key...), value...)
	s.batch = append(s.batch, spillSpan{off: off, klen: len(key), vlen: len(value)})
	if len(s.batch) < s.max {
		return nil
	}
	return s.spill()
}

func (s *spillSorter) key(r spillSpan) []byte { return s.arena[r.off : r.off+r.klen] }

func (s *spillSorter) value(r spillSpan) []byte {
	return s.arena[r.off+r.klen : r.off+r.klen+r.vlen]
}

// sortBatch sorts the batch by key, keeping the order of equal keys. A
// record added later lies further into the arena, so ordering equal keys
// by offset keeps them in the order added, with an unstable sort that is
// several times faster than a stable one.
func (s *spillSorter) sortBatch() {
	slices.SortFunc(s.batch, func(a, b spillSpan) int {
		if c := bytes.Compare(s.key(a), s.key(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
}

// spill sorts the batch, writes it as a new run and empties it.
func (s *spillSorter) spill() error {
	s.sortBatch()
	w, err := s.newRun()
	if err != nil {
		return err
	}
	for _, r := range s.batch {
		w.write(s.key(r), s.value(r))
	}
	if err := w.close(); err != nil {
		return err
	}
	s.runs = append(s.runs, w.f.Name())
	s.arena, s.batch = s.arena[:0], s.batch[:0]
	return nil
}

// newRun creates the next run file, and the sorter's folder first if need
// be.
func (s *spillSorter) newRun() (*runWriter, error) {
	if s.dir == "" {
		dir, err := os.MkdirTemp(s.parent, "spill-")
		if err != nil {
			return nil, fmt.Errorf("evidence: spill: %w", err)
		}
		s.dir = dir
	}
	s.seq++
	name := filepath.Join(s.dir, fmt.Sprintf("run-%06d", s.seq))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("evidence: spill: %w", err)
	}
	return &runWriter{f: f, w: bufio.NewWriterSize(f, spillBufSize)}, nil
}

// sorted calls fn with every record in order, and stops at and returns the
// first error of fn. The value passed to fn is valid only until fn
// returns, and fn must not modify it. sorted may be called once.
func (s *spillSorter) sorted(ctx context.Context, fn func(key string, value []byte) error) error {
	if s.used {
		return errors.New("evidence: spill: sorted called twice")
	}
	s.used = true
	// Merge the oldest runs in groups until one merge can take the rest
	// and the batch; a group's output takes its place at the front, so
	// equal keys keep their order.
	for len(s.runs) >= s.fanIn {
		if err := s.mergeGroup(ctx); err != nil {
			return err
		}
	}
	s.sortBatch()
	m, err := s.openMerge(s.runs, &batchSource{s: s})
	if err != nil {
		return err
	}
	defer m.close()
	return m.each(ctx, func(k, v []byte) error { return fn(string(k), v) })
}

// mergeGroup merges the fanIn oldest runs into one.
func (s *spillSorter) mergeGroup(ctx context.Context) error {
	group := s.runs[:s.fanIn]
	m, err := s.openMerge(group, nil)
	if err != nil {
		return err
	}
	w, err := s.newRun()
	if err != nil {
		m.close()
		return err
	}
	err = m.each(ctx, func(k, v []byte) error {
		w.write(k, v)
		return nil
	})
	m.close()
	if err := errors.Join(err, w.close()); err != nil {
		return err
	}
	for _, name := range group {
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("evidence: spill: %w", err)
		}
	}
	s.runs = append([]string{w.f.Name()}, s.runs[s.fanIn:]...)
	return nil
}

// close removes the sorter's temporary files. It may be called more than
// once.
func (s *spillSorter) close() error {
	s.used = true
	s.arena, s.batch, s.runs = nil, nil, nil
	if s.dir == "" {
		return nil
	}
	dir := s.dir
	s.dir = ""
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("evidence: spill: %w", err)
	}
	return nil
}

// runWriter writes one run file: each record as the uvarint length of its
// key, the uvarint length of its value, the key and the value.
type runWriter struct {
	f   *os.File
	w   *bufio.Writer
	hdr [2 * binary.MaxVarintLen64]byte
}

// write appends a record. An error sticks in the buffered writer and
// comes out of close.
func (w *runWriter) write(key, value []byte) {
	n := binary.PutUvarint(w.hdr[:], uint64(len(key)))
	n += binary.PutUvarint(w.hdr[n:], uint64(len(value)))
	_, _ = w.w.Write(w.hdr[:n])
	_, _ = w.w.Write(key)
	_, _ = w.w.Write(value)
}

func (w *runWriter) close() error {
	err := errors.Join(w.w.Flush(), w.f.Close())
	if err != nil {
		return fmt.Errorf("evidence: spill: write %s: %w", w.f.Name(), err)
	}
	return nil
}

// spillSource is one sorted stream of records that a merge reads.
type spillSource interface {
	// next moves to the next record and reports whether there is one.
	next() (bool, error)
	// key and value are the current record's, valid until next.
	key() []byte
	value() []byte
}

// batchSource reads the sorter's sorted batch.
type batchSource struct {
	s *spillSorter
	i int // one past the current record
}

func (b *batchSource) next() (bool, error) {
	b.i++
	return b.i <= len(b.s.batch), nil
}

func (b *batchSource) key() []byte   { return b.s.key(b.s.batch[b.i-1]) }
func (b *batchSource) value() []byte { return b.s.value(b.s.batch[b.i-1]) }

// runReader reads a run file.
type runReader struct {
	f        *os.File
	r        *bufio.Reader
	maxField int
	k, v     []byte
}

func (r *runReader) key() []byte   { return r.k }
func (r *runReader) value() []byte { return r.v }

func (r *runReader) next() (bool, error) {
	klen, err := binary.ReadUvarint(r.r)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, r.damaged(err)
	}
	vlen, err := binary.ReadUvarint(r.r)
	if err != nil {
		return false, r.damaged(err)
	}
	if klen > uint64(r.maxField) || vlen > uint64(r.maxField) {
		return false, r.damaged(fmt.Errorf("record of %d+%d bytes", klen, vlen))
	}
	r.k = slices.Grow(r.k[:0], int(klen))[:klen]
	r.v = slices.Grow(r.v[:0], int(vlen))[:vlen]
	if _, err := io.ReadFull(r.r, r.k); err != nil {
		return false, r.damaged(err)
	}
	if _, err := io.ReadFull(r.r, r.v); err != nil {
		return false, r.damaged(err)
	}
	return true, nil
}

// damaged reports a run file that does not read back as it was written.
func (r *runReader) damaged(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("evidence: spill: %s is damaged: %w", r.f.Name(), err)
}

// spillMerge merges sorted sources. A heap orders them by their current
// key and, for equal keys, by their position: older runs first, the batch
// last, which keeps records of equal keys in the order they were added.
type spillMerge struct {
	files []*os.File
	heap  mergeHeap
}

type mergeItem struct {
	src spillSource
	pos int
}

type mergeHeap []mergeItem

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].src.key(), h[j].src.key()); c != 0 {
		return c < 0
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeItem)) }
func (h *mergeHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// openMerge opens runs and, unless tail is nil, adds tail after them.
func (s *spillSorter) openMerge(runs []string, tail spillSource) (*spillMerge, error) {
	m := &spillMerge{}
	srcs := make([]spillSource, 0, len(runs)+1)
	for _, name := range runs {
		f, err := os.Open(name)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("evidence: spill: %w", err)
		}
		m.files = append(m.files, f)
		srcs = append(srcs, &runReader{f: f, r: bufio.NewReaderSize(f, spillBufSize), maxField: s.maxField})
	}
	if tail != nil {
		srcs = append(srcs, tail)
	}
	for pos, src := range srcs {
		ok, err := src.next()
		if err != nil {
			m.close()
			return nil, err
		}
		if ok {
			m.heap = append(m.heap, mergeItem{src: src, pos: pos})
		}
	}
	heap.Init(&m.heap)
	return m, nil
}

// each calls fn with every record in order.
func (m *spillMerge) each(ctx context.Context, fn func(key, value []byte) error) error {
	for n := 0; len(m.heap) > 0; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("evidence: spill: %w", err)
			}
		}
		top := m.heap[0].src
		if err := fn(top.key(), top.value()); err != nil {
			return err
		}
		ok, err := top.next()
		switch {
		case err != nil:
			return err
		case ok:
			heap.Fix(&m.heap, 0)
		default:
			heap.Pop(&m.heap)
		}
	}
	return nil
}

func (m *spillMerge) close() {
	for _, f := range m.files {
		// Read-only: closing can lose nothing.
		_ = f.Close()
	}
}
