package evidence

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// hungStore answers nothing until its caller gives up, as a frozen S3
// endpoint does.
type hungStore struct{ io.Closer }

func (hungStore) Put(ctx context.Context, _ string, _ []byte) error {
	<-ctx.Done()
	return ctx.Err()
}

func (hungStore) Get(ctx context.Context, _ string) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungStore) List(ctx context.Context, _ string) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungStore) Walk(ctx context.Context, _ string, _ func(string) error) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestOpTimeoutEndsEveryOperationOfAHungStore(t *testing.T) {
	t.Parallel()
	const limit = 50 * time.Millisecond
	s := WithOpTimeout(hungStore{}, limit)
	ops := []struct {
		name string
		run  func(context.Context) error
	}{
		{"put", func(ctx context.Context) error { return s.Put(ctx, "requests/r/request.json", []byte("{}")) }},
		{"get", func(ctx context.Context) error { _, err := s.Get(ctx, "requests/r/request.json"); return err }},
		{"list", func(ctx context.Context) error { _, err := s.List(ctx, "requests/r/"); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			start := time.Now()
			// The caller would wait an hour; the store's own limit ends it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			err := op.run(ctx)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "operation timeout of 50ms") {
				t.Fatalf("err = %v, want the operation timeout named", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("the operation took %v, want about %v", took, limit)
			}
		})
	}
}

func TestOpTimeoutPassesAnswersAndOtherErrorsThrough(t *testing.T) {
	t.Parallel()
	s := WithOpTimeout(NewMemoryStore(), time.Minute)
	ctx := context.Background()
	if err := s.Put(ctx, "requests/r/request.json", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "requests/r/request.json", []byte(`{"a":2}`)); !errors.Is(err, ErrExist) {
		t.Fatalf("second put: %v, want ErrExist", err)
	}
	if got, err := s.Get(ctx, "requests/r/request.json"); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("get = %q, %v", got, err)
	}
	if _, err := s.Get(ctx, "requests/r/missing.json"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("get of a missing key: %v, want ErrNotExist", err)
	}
	if keys, err := s.List(ctx, "requests/r/"); err != nil || len(keys) != 1 {
		t.Fatalf("list = %v, %v", keys, err)
	}
}
