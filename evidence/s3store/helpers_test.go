package s3store

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/evidence/storage"
)

func mustPut(t testing.TB, s storage.Store, key string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), key, data); err != nil {
		t.Fatalf("Put(%q) = %v", key, err)
	}
}

func mustGet(t testing.TB, s storage.Store, key string) []byte {
	t.Helper()
	data, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v", key, err)
	}
	return data
}

func mustList(t testing.TB, s storage.Store, prefix string) []string {
	t.Helper()
	keys, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q) = %v", prefix, err)
	}
	return keys
}

// raceOneKey has writers put different data under key at once, and
// checks that exactly one wins and its data is what is stored.
func raceOneKey(t *testing.T, s storage.Store, key string, writers int, data func(i int) []byte) {
	t.Helper()
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() { errs[i] = s.Put(context.Background(), key, data(i)) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, storage.ErrExist):
			t.Fatalf("writer %d: Put = %v, want nil or ErrExist", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer succeeded")
	}
	if got := mustGet(t, s, key); !bytes.Equal(got, data(winner)) {
		t.Fatalf("stored data is not the winner's (writer %d)", winner)
	}
}
