package evidence

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore is a Store held in memory, for tests and benchmarks. It
// follows the same rules as FileStore for keys and create-only writes but
// keeps nothing across restarts. The zero value is not usable; call
// NewMemoryStore.
type MemoryStore struct {
	mu   sync.RWMutex
	data map[string]memObject
	// last is the latest storage time handed out, so that a key stored
	// later never looks older even if the wall clock steps back.
	last time.Time
}

// memObject is one stored artifact and when it was stored.
type memObject struct {
	data []byte
	at   time.Time
}

var (
	_ Store      = (*MemoryStore)(nil)
	_ InfoWalker = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{data: make(map[string]memObject)}
}

// Close does nothing; it lets a MemoryStore stand where a StoreCloser is
// expected. The store stays usable.
func (s *MemoryStore) Close() error { return nil }

// Put stores a copy of data under key if key is not yet stored.
func (s *MemoryStore) Put(ctx context.Context, key string, data []byte) error {
	if err := checkPut(ctx, key, data); err != nil {
		return err
	}
	// Copy before locking: the caller may reuse data once Put returns.
	stored := slices.Clone(data)
	if stored == nil {
		stored = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[key]; ok {
		return fmt.Errorf("%w: %q", ErrExist, key)
	}
	// Wall clock only, as a file's or an S3 object's time is.
	at := time.Now().Round(0)
	if at.Before(s.last) {
		at = s.last
	}
	s.last = at
	s.data[key] = memObject{data: stored, at: at}
	return nil
}

// Get returns a copy of the data stored under key.
func (s *MemoryStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	s.mu.RLock()
	stored, ok := s.data[key]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotExist, key)
	}
	// Stored slices are never modified, so copying outside the lock is safe.
	return slices.Clone(stored.data), nil
}

// Walk calls fn with each key that starts with prefix, in ascending order.
// It works on a snapshot of the keys taken when it starts.
func (s *MemoryStore) Walk(ctx context.Context, prefix string, fn func(key string) error) error {
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("evidence: walk %q: %w", prefix, err)
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

// WalkInfo calls fn with each key that starts with prefix, in ascending
// order, with its size and the time Put stored it. Like Walk, it works on a
// snapshot of the keys taken when it starts; a key is reported with the
// size and time it was stored with, which never change.
func (s *MemoryStore) WalkInfo(ctx context.Context, prefix string, fn func(KeyInfo) error) error {
	return s.Walk(ctx, prefix, func(key string) error {
		s.mu.RLock()
		obj := s.data[key]
		s.mu.RUnlock()
		return fn(KeyInfo{Key: key, Size: int64(len(obj.data)), ModTime: obj.at})
	})
}

// List returns the keys that start with prefix, sorted.
func (s *MemoryStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: list %q: %w", prefix, err)
	}
	var keys []string
	s.mu.RLock()
	for k := range s.data {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.RUnlock()
	slices.Sort(keys)
	return keys, nil
}
