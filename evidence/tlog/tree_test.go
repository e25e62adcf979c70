package tlog

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	sumdb "golang.org/x/mod/sumdb/tlog"
)

// store is a map of tlog-tiles resources, as a log's prefix in a bucket.
type store map[string][]byte

func (s store) read(_ context.Context, path string) ([]byte, error) {
	if d, ok := s[path]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%s: %w", path, os.ErrNotExist)
}

func (s store) put(t *testing.T, objs []Object) {
	t.Helper()
	for _, o := range objs {
		if old, ok := s[o.Path]; ok && !bytes.Equal(old, o.Data) {
			t.Fatalf("%s rewritten with different bytes", o.Path)
		}
		s[o.Path] = o.Data
	}
}

func entry(i uint64) []byte { return fmt.Appendf(nil, "entry %d", i) }

// grow appends entries [from, to) and stores what a writer would publish
// at size to: the full resources and the partials.
func grow(t *testing.T, tr *Tree, s store, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := tr.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.put(t, tr.TakeFull())
	s.put(t, tr.Partials())
}

// The tiles and roots must be exactly those of an independent
// implementation, the Go checksum database's tile code, at every size:
// sizes around tile edges at levels 0 and 1 included.
func TestTreeMatchesSumdbTiles(t *testing.T) {
	t.Parallel()
	sizes := []uint64{0, 1, 2, 3, 255, 256, 257, 511, 512, 513, 700, 65535, 65536, 65537, 70000}
	tr, s := NewTree(), store{}
	var hashes sumdbHashes
	var size uint64
	for _, want := range sizes {
		for ; size < want; size++ {
			stored, err := sumdb.StoredHashes(int64(size), entry(size), hashes)
			if err != nil {
				t.Fatal(err)
			}
			hashes = append(hashes, stored...)
		}
		grow(t, tr, s, tr.Size(), want)
		root, err := sumdb.TreeHash(int64(want), hashes)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Root() != Hash(root) {
			t.Fatalf("size %d: root %x, sumdb %x", want, tr.Root(), root)
		}
		for _, tile := range sumdb.NewTiles(8, 0, int64(want)) {
			data, err := sumdb.ReadTileData(tile, hashes)
			if err != nil {
				t.Fatal(err)
			}
			path := strings.Replace(tile.Path(), "tile/8/", "tile/", 1)
			if !bytes.Equal(s[path], data) {
				t.Fatalf("size %d: %s differs from sumdb's tile (%d vs %d bytes)", want, path, len(s[path]), len(data))
			}
		}
	}
}

type sumdbHashes []sumdb.Hash

func (h sumdbHashes) ReadHashes(indexes []int64) ([]sumdb.Hash, error) {
	out := make([]sumdb.Hash, len(indexes))
	for i, x := range indexes {
		out[i] = h[x]
	}
	return out, nil
}

// A writer that restarts from its last checkpoint must continue with the
// same bytes as one that never stopped, whatever size it stopped at.
func TestRestoredTreeContinuesIdentically(t *testing.T) {
	t.Parallel()
	for _, stop := range []uint64{1, 255, 256, 257, 600, 65536, 65537} {
		t.Run(fmt.Sprint("stopped at ", stop), func(t *testing.T) {
			whole, s := NewTree(), store{}
			grow(t, whole, s, 0, stop)
			restored, err := RestoreTree(context.Background(), stop, s.read)
			if err != nil {
				t.Fatal(err)
			}
			if restored.Root() != whole.Root() {
				t.Fatalf("restored root %x, want %x", restored.Root(), whole.Root())
			}
			end := stop + 300
			grow(t, whole, s, stop, end)
			again := store{}
			maps.Copy(again, s)
			grow(t, restored, again, stop, end)
			if restored.Root() != whole.Root() || !maps.EqualFunc(s, again, bytes.Equal) {
				t.Fatal("the restored tree published different resources")
			}
		})
	}
}

// A partial tile or bundle altered in the bucket must stop a restart, not
// be built on.
func TestRestoreRefusesAlteredResources(t *testing.T) {
	t.Parallel()
	tr, s := NewTree(), store{}
	grow(t, tr, s, 0, 300)
	keys := slices.Sorted(maps.Keys(s))
	for _, k := range keys {
		if !strings.Contains(k, ".p/") {
			continue
		}
		t.Run(k, func(t *testing.T) {
			bad := store{}
			maps.Copy(bad, s)
			flipped := bytes.Clone(s[k])
			flipped[len(flipped)-1] ^= 1
			bad[k] = flipped
			restored, err := RestoreTree(context.Background(), 300, bad.read)
			if err == nil && restored.Root() == tr.Root() {
				t.Fatalf("a flipped bit in %s went unnoticed", k)
			}
		})
	}
	if _, err := RestoreTree(context.Background(), 301, s.read); err == nil {
		t.Fatal("restored a size whose partial tiles are not stored")
	}
}

// Every inclusion proof built from the stored tiles verifies against the
// root, for entries in full and partial tiles alike.
func TestInclusionProofsVerify(t *testing.T) {
	t.Parallel()
	tr, s := NewTree(), store{}
	for _, size := range []uint64{1, 2, 7, 256, 257, 1000, 65536 + 700} {
		grow(t, tr, s, tr.Size(), size)
		root := tr.Root()
		for _, index := range []uint64{0, size / 3, size / 2, size - 1} {
			p, err := InclusionProof(context.Background(), index, size, s.read)
			if err != nil {
				t.Fatalf("size %d index %d: %v", size, index, err)
			}
			path := make([][]byte, len(p))
			for i := range p {
				path[i] = p[i][:]
			}
			leaf := LeafHash(entry(index))
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, index, size, leaf[:], path, root[:]); err != nil {
				t.Fatalf("size %d index %d: %v", size, index, err)
			}
		}
	}
}

func TestBundles(t *testing.T) {
	t.Parallel()
	tr, s := NewTree(), store{}
	grow(t, tr, s, 0, 259)
	full, err := ParseBundle(s["tile/entries/000"], 256)
	if err != nil || !bytes.Equal(full[255], entry(255)) {
		t.Fatalf("full bundle: %v", err)
	}
	part, err := ParseBundle(s["tile/entries/001.p/3"], 3)
	if err != nil || !bytes.Equal(part[2], entry(258)) {
		t.Fatalf("partial bundle: %v", err)
	}
	for name, data := range map[string][]byte{
		"a dangling byte":    append(bytes.Clone(s["tile/entries/001.p/3"]), 0),
		"an entry cut short": s["tile/entries/001.p/3"][:10],
		"one entry too few":  s["tile/entries/001.p/3"][:2+len(entry(256))],
	} {
		if _, err := ParseBundle(data, 3); err == nil {
			t.Errorf("%s parsed", name)
		}
	}
	if err := tr.Append(make([]byte, MaxLeafSize+1)); err == nil {
		t.Fatal("an entry too large for a bundle was appended")
	}
}
