package frontdoor_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/internal/argsize"
)

// oneKey authenticates the key "k" as caller "c".
type oneKey struct{}

func (oneKey) Enabled() bool { return true }
func (oneKey) CallerForKey(key string) (string, bool) {
	return "c", key == "k"
}

// countingReader counts the bytes read of it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readBodyDoor answers the status ReadBody gave and, on success, the
// body's length.
func readBodyDoor(limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := frontdoor.ReadBody(w, r, limit)
		if err != nil {
			var be *frontdoor.BodyError
			if !errors.As(err, &be) {
				http.Error(w, "not a BodyError: "+err.Error(), http.StatusInternalServerError)
				return
			}
			http.Error(w, be.Message, be.Status)
			return
		}
		fmt.Fprintf(w, "%d", len(body))
	})
}

func serveBody(t *testing.T, h http.Handler, body io.Reader, contentLength int64) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", body)
	req.ContentLength = contentLength
	req.Header.Set("Authorization", "Bearer k")
	h.ServeHTTP(rec, req)
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// TestReadBodyRefusesBeforeDecoding: an authenticated caller's body is
// refused by size, by declared size (unread), and by shape, each with
// its status; what fits is read whole.
func TestReadBodyRefusesBeforeDecoding(t *testing.T) {
	t.Parallel()
	h := frontdoor.Plumbing{Keys: oneKey{}}.Wrap(readBodyDoor(0))
	over := argsize.MaxBodyBytes + 1
	for _, tc := range []struct {
		name       string
		body       string
		declared   bool // Content-Length sent; else chunked
		wantStatus int
		wantIn     string
		maxRead    int64
	}{
		{"a small object is read", `{"a":[1,2,3]}`, true, http.StatusOK, "13", -1},
		{"16 MiB declared is refused unread", strings.Repeat("x", 16<<20), true, http.StatusRequestEntityTooLarge, "more than 1114112 bytes", 0},
		{"16 MiB chunked is refused at the limit", strings.Repeat("x", 16<<20), false, http.StatusRequestEntityTooLarge, "more than 1114112 bytes", argsize.MaxBodyBytes + 1},
		{"one byte over the limit is refused", `"` + strings.Repeat("x", over-2) + `"`, true, http.StatusRequestEntityTooLarge, "the limit", 0},
		{"a body at the limit is read", `"` + strings.Repeat("x", argsize.MaxBodyBytes-2) + `"`, true, http.StatusOK, fmt.Sprint(argsize.MaxBodyBytes), -1},
		{"100,000 values within the limit are refused", "[" + strings.Repeat("0,", 100_000) + "0]", true, http.StatusRequestEntityTooLarge, "more than 69632 values", -1},
		{"nesting deeper than the arguments may is refused", strings.Repeat("[", 40) + strings.Repeat("]", 40), true, http.StatusBadRequest, "nested deeper than 36 levels", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src := &countingReader{r: strings.NewReader(tc.body)}
			cl := int64(len(tc.body))
			if !tc.declared {
				cl = -1
			}
			status, text := serveBody(t, h, src, cl)
			if status != tc.wantStatus || !strings.Contains(text, tc.wantIn) {
				t.Fatalf("got %d %.200q, want %d with %q", status, text, tc.wantStatus, tc.wantIn)
			}
			if tc.maxRead >= 0 && src.n.Load() > tc.maxRead+32<<10 {
				t.Fatalf("read %d bytes of the body, want at most %d", src.n.Load(), tc.maxRead)
			}
		})
	}
}

// blockingReader returns its bytes, then blocks until release closes.
type blockingReader struct {
	data    []byte
	release chan struct{}
	drained chan struct{}
	once    sync.Once
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	b.once.Do(func() { close(b.drained) })
	<-b.release
	return 0, io.EOF
}

// TestBodyBudgetBoundsConcurrentBodies: while one caller's large body is
// held, a second large body beyond the doors' budget is refused 503
// rather than read, and the budget is whole again once the first
// request ends.
func TestBodyBudgetBoundsConcurrentBodies(t *testing.T) {
	t.Parallel()
	budget := frontdoor.NewBodyBudget(argsize.MaxBodyBytes + 64<<10)
	h := frontdoor.Plumbing{Keys: oneKey{}, Budget: budget}.Wrap(readBodyDoor(0))
	first := &blockingReader{data: bytes.Repeat([]byte("1"), argsize.MaxBytes), release: make(chan struct{}), drained: make(chan struct{})}
	done := make(chan int)
	go func() {
		status, _ := serveBody(t, h, first, -1)
		done <- status
	}()
	<-first.drained
	if got := budget.InUse(); got < argsize.MaxBytes {
		t.Fatalf("the first body holds %d bytes of the budget, want its %d", got, argsize.MaxBytes)
	}
	status, text := serveBody(t, h, strings.NewReader(strings.Repeat("2", argsize.MaxBytes)), -1)
	if status != http.StatusServiceUnavailable || !strings.Contains(text, "retry later") {
		t.Fatalf("the second body: %d %q, want 503", status, text)
	}
	if status, _ := serveBody(t, h, strings.NewReader(`{"small":true}`), -1); status != http.StatusOK {
		t.Fatalf("a small body beside the large one: %d", status)
	}
	close(first.release)
	if status := <-done; status != http.StatusOK {
		t.Fatalf("the first body: %d", status)
	}
	if got := budget.InUse(); got != 0 {
		t.Fatalf("%d bytes of the budget still held after every request ended", got)
	}
	if status, _ := serveBody(t, h, strings.NewReader(strings.Repeat("3", argsize.MaxBytes)), -1); status != http.StatusOK {
		t.Fatalf("a large body once the budget is free: %d", status)
	}
}

// TestUnauthenticatedBodyIsNeverRead: ReadBody says 401, reading nothing.
func TestUnauthenticatedBodyIsNeverRead(t *testing.T) {
	t.Parallel()
	h := frontdoor.Plumbing{Keys: oneKey{}}.Wrap(readBodyDoor(0))
	src := &countingReader{r: strings.NewReader(`{"a":1}`)}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", src)
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || src.n.Load() != 0 {
		t.Fatalf("got %d after reading %d bytes", rec.Code, src.n.Load())
	}
}
