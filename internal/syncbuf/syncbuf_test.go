package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestBufferTakesConcurrentWrites checks, under the race detector, that
// writers and a reader may use a Buffer at once and that no write is lost.
func TestBufferTakesConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := b.Write([]byte("line\n")); err != nil {
					t.Error(err)
				}
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
}
