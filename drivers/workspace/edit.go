package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// Bounds on one editFile. It holds the driver's write lock while it works,
// so its work is bounded in count, in bytes and in time: no single call can
// keep every other write of the workspace waiting.
const (
	// maxEdits is the most edits one call may carry.
	maxEdits = 1000
	// editWorkBudget bounds the bytes one call may scan and copy: every
	// edit searches the file as the previous edits left it and rebuilds
	// it, so the work is about the number of edits times the file size.
	// 256 MiB takes well under a second.
	editWorkBudget = 256 << 20
	// editTimeout bounds one call, waiting for the lock included, whatever
	// deadline the caller gave.
	editTimeout = 10 * time.Second
)

// errEditBudget marks edits refused for the work they would take.
var errEditBudget = errors.New("edit budget exceeded")

// checkEditBudget refuses n edits on a file of size bytes when they would
// take more than the edit budget.
func checkEditBudget(n int, size int64) error {
	if size > 0 && int64(n) > editWorkBudget/size {
		return fmt.Errorf("%w: %d edits on a file of %d bytes exceed the budget of %d bytes (edits × file size); split them into several calls",
			errEditBudget, n, size, editWorkBudget)
	}
	return nil
}

// checkEditBudgetEarly refuses an edit over budget from the file's current
// size, before the edit waits for the write lock. The file is looked up the
// way every file operation does it, without following links; a file that
// cannot be found is left for the locked step to report.
func (d *Driver) checkEditBudgetEarly(e editArgs) error {
	pl, err := d.locate(e.path, false)
	if err != nil {
		return nil
	}
	defer pl.close()
	if _, size, err := pl.lstat(); err == nil {
		return checkEditBudget(len(e.edits), size)
	}
	return nil
}

// applyEdits applies edits to content in order, each to the first
// occurrence of its oldContent in what the previous edits left. Each edit
// costs one search and at most one copy into a second buffer, reused, so
// memory stays at two file sizes. The work is counted against the budget as
// it goes, since edits may grow the file; ctx is checked between edits.
func applyEdits(ctx context.Context, p string, content []byte, edits []edit) ([]byte, error) {
	cur := content
	var spare []byte
	var work int64
	for i, ed := range edits {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		work += int64(len(cur))
		if work > editWorkBudget {
			return nil, fmt.Errorf("%w: edits[%d] would scan more than %d bytes in all (edits × file size); nothing was written",
				errEditBudget, i, editWorkBudget)
		}
		at := bytes.Index(cur, []byte(ed.old))
		if at < 0 {
			return nil, fmt.Errorf("edits[%d]: oldContent not found in %s after the preceding edits; nothing was written", i, p)
		}
		size := len(cur) - len(ed.old) + len(ed.new)
		if size > maxContentBytes {
			return nil, fmt.Errorf("edits[%d]: the edited file would exceed %d bytes; nothing was written", i, maxContentBytes)
		}
		if len(ed.old) == len(ed.new) {
			copy(cur[at:], ed.new)
			continue
		}
		spare = append(spare[:0], cur[:at]...)
		spare = append(spare, ed.new...)
		spare = append(spare, cur[at+len(ed.old):]...)
		cur, spare = spare, cur
	}
	return cur, nil
}

// lockWrites takes the driver's write lock, giving up when ctx ends first.
// The returned function releases it.
func (d *Driver) lockWrites(ctx context.Context) (unlock func(), err error) {
	select {
	case d.writeLock <- struct{}{}:
		return func() { <-d.writeLock }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("the workspace stayed busy with other writes until this call's deadline: %w", ctx.Err())
	}
}

// timedOut records a failure at the call's deadline.
func (r *report) timedOut(err error) { r.fail(categoryTimeout, exitTimeout, err) }
