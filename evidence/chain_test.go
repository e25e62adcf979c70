package evidence

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/evidence/groupsync"
)

// gatedSyncs makes s's folder syncs wait for a value on release and
// return it; the first sync of each folder announces itself on started.
func gatedSyncs(s *FileStore) (started chan string, release chan error) {
	started, release = make(chan string, 16), make(chan error)
	s.syncs = groupsync.New(func(dir string) error {
		started <- dir
		if err := <-release; err != nil {
			return err
		}
		return s.syncDir(dir)
	})
	return started, release
}

func exists(dir, key string) bool {
	_, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(key)))
	return err == nil
}

// TestChainLinksAfterTheEarlierWriteIsDurable: a chained write returns
// before its folder is synced, and the next write's name is not taken
// until that sync has ended.
func TestChainLinksAfterTheEarlierWriteIsDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	mustPut(t, s, "requests/r1/request.json", []byte(`{"claim":1}`)) // folders made and synced
	started, release := gatedSyncs(s)
	chain := &Chain{}
	ctx := WithChain(context.Background(), chain)

	if err := s.Put(ctx, "requests/r1/a.json", []byte(`{"a":1}`)); err != nil {
		t.Fatalf("first chained Put: %v", err)
	}
	if got := <-started; got != "requests/r1" {
		t.Fatalf("synced %q, want the request's folder", got)
	}
	second := make(chan error, 1)
	go func() { second <- s.Put(ctx, "requests/r1/b.json", []byte(`{"b":1}`)) }()
	select {
	case err := <-second:
		t.Fatalf("second Put returned (%v) while the first write's folder was not synced", err)
	default:
	}
	if exists(dir, "requests/r1/b.json") {
		t.Fatal("the second write's name was taken before the first write was durable")
	}
	release <- nil // the first write's sync
	if err := <-second; err != nil {
		t.Fatalf("second chained Put: %v", err)
	}
	if !exists(dir, "requests/r1/b.json") {
		t.Fatal("the second write is not linked")
	}
	<-started
	waited := make(chan error, 1)
	go func() { waited <- chain.Wait(context.Background()) }()
	release <- nil
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if err := chain.Wait(context.Background()); err != nil {
		t.Fatalf("a second Wait, nothing pending: %v", err)
	}
}

// TestChainReportsTheWriteThatIsNotDurable: when a write's folder sync
// fails, the next write is not linked and its error carries the earlier
// write, for the caller to keep elsewhere.
func TestChainReportsTheWriteThatIsNotDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileStore(t, dir)
	mustPut(t, s, "requests/r1/request.json", []byte(`{"claim":1}`))
	started, release := gatedSyncs(s)
	chain := &Chain{}
	ctx := WithChain(context.Background(), chain)
	first := []byte(`{"a":1}`)
	if err := s.Put(ctx, "requests/r1/a.json", first); err != nil {
		t.Fatal(err)
	}
	<-started
	second := make(chan error, 1)
	go func() { second <- s.Put(ctx, "requests/r1/b.json", []byte(`{"b":1}`)) }()
	release <- errors.New("disk on fire")
	err := <-second
	var nd *NotDurableError
	if !errors.As(err, &nd) || nd.Key != "requests/r1/a.json" || !bytes.Equal(nd.Data, first) {
		t.Fatalf("second Put = %v, want a NotDurableError carrying the first write", err)
	}
	if exists(dir, "requests/r1/b.json") {
		t.Fatal("a write was linked after an earlier one failed to become durable")
	}
	if found := tempFiles(t, dir); len(found) != 0 {
		t.Fatalf("temporary files left behind: %q", found)
	}
	if err := chain.Wait(context.Background()); err != nil {
		t.Fatalf("the failure was reported twice: %v", err)
	}
}

// TestChainIgnoredWhereWritesMustBeDurable: the spool, and a logged
// record (a claim, a manifest), are durable when Put returns even when
// chained.
func TestChainIgnoredWhereWritesMustBeDurable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T, dir string) (Store, *FileStore)
		key  string
	}{
		{"spool", func(t *testing.T, dir string) (Store, *FileStore) {
			sp, err := OpenSpool(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sp.Close() })
			return sp, sp.files
		}, "requests/r1/response.json"},
		{"logged manifest", func(t *testing.T, dir string) (Store, *FileStore) {
			fs := newTestFileStore(t, dir)
			l, logged := openLogged(t, fs, testLogConfig(t, fs))
			t.Cleanup(func() { l.Close(context.Background()) })
			return logged, fs
		}, "requests/r1/manifest.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, files := tc.open(t, t.TempDir())
			synced := countingSyncs(files)
			chain := &Chain{}
			if err := s.Put(WithChain(context.Background(), chain), tc.key, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if got := synced(); len(got) == 0 || got[len(got)-1] != "requests/r1" {
				t.Fatalf("synced %v when Put returned, want the record's folder synced", got)
			}
			if chain.pending != nil {
				t.Fatal("the chain still waits on a write that had to be durable")
			}
		})
	}
}

// TestChainSyncsEachFolderOnce: a chained write does not sync again the
// folders its chain's last write is syncing.
func TestChainSyncsEachFolderOnce(t *testing.T) {
	t.Parallel()
	s := newTestFileStore(t, t.TempDir())
	mustPut(t, s, "requests/r1/request.json", []byte(`{}`))
	synced := countingSyncs(s)
	chain := &Chain{}
	ctx := WithChain(context.Background(), chain)
	for _, key := range []string{"requests/r1/attempts/1/policy_decision.json", "requests/r1/attempts/1/dispatch.json"} {
		if err := s.Put(ctx, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := chain.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"requests/r1", "requests/r1/attempts", "requests/r1/attempts/1", "requests/r1/attempts/1"}
	if got := synced(); !slices.Equal(got, want) {
		t.Errorf("synced %v, want %v", got, want)
	}
}
