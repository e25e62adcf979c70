package frontdoor

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/toolgate/toolgate/internal/argsize"
)

// Bodies are bounded three times before a door decodes one: by size (no
// larger than a call's arguments can be, plus the protocol's envelope), by
// the bytes all doors hold at once (BodyBudget), and by shape (ReadBody
// scans the JSON before any map is built). What one request costs is then
// a small multiple of the body limit, whatever the caller sends.

// ErrBodyBudget is the error a body's Read returns when the doors already
// hold as many body bytes as their BodyBudget allows.
var ErrBodyBudget = errors.New(budgetMessage)

const budgetMessage = "the gateway is reading as many request bodies as it may hold at once (limits.max_concurrent_calls bodies); retry later"

// BodyBudget bounds the request-body bytes the doors hold at once, across
// all their addresses. Serve sizes it as limits.max_concurrent_calls
// bodies at the largest body limit: the doors read no more in parallel
// than the gateway would run calls. A nil budget bounds nothing.
type BodyBudget struct {
	limit int64
	used  atomic.Int64
}

// NewBodyBudget returns a budget of limit bytes.
func NewBodyBudget(limit int64) *BodyBudget { return &BodyBudget{limit: limit} }

// reserve takes n bytes of the budget, or reports that they are not there.
func (b *BodyBudget) reserve(n int64) bool {
	if b == nil {
		return true
	}
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

func (b *BodyBudget) release(n int64) {
	if b != nil && n != 0 {
		b.used.Add(-n)
	}
}

// InUse is the number of body bytes held now.
func (b *BodyBudget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// budgetedBody counts what is read of a body against a BodyBudget: each
// Read reserves its buffer first, so that the bytes held never exceed the
// budget, and gives back what it did not fill. The plumbing releases the
// rest once the door's handler has returned.
type budgetedBody struct {
	io.ReadCloser
	budget *BodyBudget
	mu     sync.Mutex
	held   int64
	// refused is set when a Read found the budget spent.
	refused atomic.Bool
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return b.ReadCloser.Read(p)
	}
	if len(p) > budgetChunk {
		p = p[:budgetChunk]
	}
	want := int64(len(p))
	if !b.budget.reserve(want) {
		b.refused.Store(true)
		return 0, ErrBodyBudget
	}
	n, err := b.ReadCloser.Read(p)
	b.budget.release(want - int64(n))
	b.mu.Lock()
	b.held += int64(n)
	b.mu.Unlock()
	return n, err
}

// budgetChunk is the most one Read reserves: a large buffer with little
// to fill must not hold the budget for other bodies while it waits.
const budgetChunk = 32 << 10

// releaseAll gives back every byte the body took.
func (b *budgetedBody) releaseAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.budget.release(b.held)
	b.held = 0
}

// BodyError is why ReadBody refused a body: the HTTP status a door
// answers (413 too large, 503 over the budget, 401 unauthenticated, 400
// otherwise) and a message for the caller, which never quotes the body.
type BodyError struct {
	Status  int
	Message string
	err     error
}

func (e *BodyError) Error() string { return e.Message }
func (e *BodyError) Unwrap() error { return e.err }

// ReadBody reads the JSON body of a request the plumbing let through, at
// most limit bytes (at most argsize.MaxBodyBytes whatever limit says: no
// call can come out of a larger body), and checks its shape before it is
// decoded: no deeper than argsize.MaxBodyDepth, no more values than
// argsize.MaxBodyNodes. A body that declares a larger Content-Length is
// refused unread. Its errors are *BodyError.
//
// What it costs is the body once, sized up front when the length is
// declared: a door then decodes bytes that a call could be made of, and
// nothing else.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if limit <= 0 || limit > argsize.MaxBodyBytes {
		limit = argsize.MaxBodyBytes
	}
	tooLarge := &BodyError{Status: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("body: more than %d bytes, the limit", limit)}
	if r.ContentLength > limit {
		tooLarge.err = &http.MaxBytesError{Limit: limit}
		return nil, tooLarge
	}
	body, err := readCapped(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	if err != nil {
		return nil, bodyReadError(err, tooLarge)
	}
	if err := argsize.ScanJSON(body, argsize.MaxBodyDepth, argsize.MaxBodyNodes); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, argsize.ErrTooManyValues) {
			status = http.StatusRequestEntityTooLarge
		}
		return nil, &BodyError{Status: status, Message: "body: " + err.Error() +
			fmt.Sprintf(" (a call's arguments hold at most %d values, %d levels deep)", argsize.MaxNodes, argsize.MaxDepth), err: err}
	}
	return body, nil
}

// readCapped reads r to its end into one buffer: sized to the declared
// length when there is one (and the read that finds the end), otherwise
// doubled from 4 KiB but never past limit+1, so that a chunked body costs
// at most about twice the limit however long it runs.
func readCapped(r io.Reader, declared, limit int64) ([]byte, error) {
	size := int64(4 << 10)
	if declared > 0 {
		size = declared + 1
	}
	buf := make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, &http.MaxBytesError{Limit: limit}
			}
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// bodyReadError maps a failed read onto a BodyError.
func bodyReadError(err error, tooLarge *BodyError) *BodyError {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		tooLarge.err = err
		return tooLarge
	}
	switch {
	case errors.Is(err, ErrBodyBudget):
		return &BodyError{Status: http.StatusServiceUnavailable, Message: budgetMessage, err: err}
	case errors.Is(err, ErrUnauthenticated):
		return &BodyError{Status: http.StatusUnauthorized, Message: "missing or unknown API key", err: err}
	}
	return &BodyError{Status: http.StatusBadRequest, Message: "body: " + err.Error(), err: err}
}
