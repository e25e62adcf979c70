package tlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/api/layout"
)

// Hash is a node of the log's Merkle tree (RFC 6962, SHA-256).
type Hash = [32]byte

// MaxLeafSize is the largest leaf an entry bundle can carry: its length
// is written as a big-endian uint16.
const MaxLeafSize = 1<<16 - 1

// tileWidth is the number of hashes in a full tile, and of entries in a
// full entry bundle (C2SP tlog-tiles).
const tileWidth = layout.TileWidth

// Object is one resource of the tlog-tiles layout: a hash tile or an entry
// bundle, full or partial, with its path relative to the log's prefix.
type Object struct {
	Path string
	Data []byte
}

// ReadFunc reads the resource at a path relative to the log's prefix.
type ReadFunc func(ctx context.Context, path string) ([]byte, error)

// Tree integrates entries into the tiles of a tlog-tiles log. It holds
// only the right edge of the tree: the compact range of the whole tree and
// the rightmost, incomplete tile of each level and entry bundle, so its
// memory is O(log n) however large the log grows. The same Tree serves the
// writer, which stores what it produces, and the verifier, which compares
// it with what is stored.
type Tree struct {
	rng    *compact.Range
	rows   [][]Hash // rows[l]: the hashes of the rightmost tile at tile level l
	bundle [][]byte // the entries of the rightmost entry bundle
	full   []Object // full tiles and bundles completed since TakeFull
	err    error    // a row that lost step with the range; never expected
}

var rangeFactory = compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// NewTree returns the tree of an empty log.
func NewTree() *Tree {
	return &Tree{rng: rangeFactory.NewEmptyRange(0)}
}

// Size is the number of entries in the tree.
func (t *Tree) Size() uint64 { return t.rng.End() }

// Root returns the root hash of the tree (the SHA-256 of nothing for the
// empty tree).
func (t *Tree) Root() Hash {
	root, err := t.rng.GetRootHash(nil)
	if err != nil || root == nil {
		return Hash(rfc6962.DefaultHasher.EmptyRoot())
	}
	return Hash(root)
}

// Append adds an entry as the next leaf of the tree.
func (t *Tree) Append(entry []byte) error {
	if len(entry) > MaxLeafSize {
		return fmt.Errorf("tlog: entry of %d bytes is larger than the %d-byte limit", len(entry), MaxLeafSize)
	}
	if t.err != nil {
		return t.err
	}
	index := t.Size()
	t.bundle = append(t.bundle, entry)
	if len(t.bundle) == tileWidth {
		t.full = append(t.full, Object{layout.EntriesPath(index/tileWidth, 0), marshalBundle(t.bundle)})
		t.bundle = nil
	}
	leaf := LeafHash(entry)
	if err := t.rng.Append(leaf[:], t.visit); err != nil {
		return fmt.Errorf("tlog: append entry %d: %w", index, err)
	}
	return t.err
}

// visit receives every node the compact range creates. The nodes at tree
// levels 0, 8, 16, … are the ones tiles store; each fills the next slot
// of its level's rightmost tile.
func (t *Tree) visit(id compact.NodeID, hash []byte) {
	if id.Level%layout.TileHeight != 0 {
		return
	}
	level := int(id.Level / layout.TileHeight)
	for len(t.rows) <= level {
		t.rows = append(t.rows, nil)
	}
	if want := id.Index % tileWidth; uint64(len(t.rows[level])) != want {
		t.err = fmt.Errorf("tlog: tile level %d: node %d arrived at slot %d", level, id.Index, len(t.rows[level]))
		return
	}
	t.rows[level] = append(t.rows[level], Hash(hash))
	if len(t.rows[level]) == tileWidth {
		t.full = append(t.full, Object{layout.TilePath(uint64(level), id.Index/tileWidth, 0), marshalTile(t.rows[level])})
		t.rows[level] = t.rows[level][:0]
	}
}

// TakeFull returns the full tiles and entry bundles completed since the
// last call, bundles before the tiles that hash them, lower levels first.
func (t *Tree) TakeFull() []Object {
	full := t.full
	t.full = nil
	return full
}

// Partials returns the partial tiles and entry bundle of the tree at its
// current size: what tlog-tiles requires a log to serve for every size it
// publishes a checkpoint for. It is empty when every tile is full.
func (t *Tree) Partials() []Object {
	size := t.Size()
	var out []Object
	if len(t.bundle) > 0 {
		out = append(out, Object{layout.EntriesPath(size/tileWidth, uint8(len(t.bundle))), marshalBundle(t.bundle)})
	}
	for level, row := range t.rows {
		if len(row) == 0 {
			continue
		}
		index := (size >> (layout.TileHeight * uint(level))) / tileWidth
		out = append(out, Object{layout.TilePath(uint64(level), index, uint8(len(row))), marshalTile(row)})
	}
	return out
}

// RestoreTree rebuilds the right edge of a stored tree of the given size
// from its partial tiles and entry bundle, which read returns. It checks
// that the bundle's entries hash to the tile's leaves; the caller checks
// the root against a signed checkpoint.
func RestoreTree(ctx context.Context, size uint64, read ReadFunc) (*Tree, error) {
	t := &Tree{}
	for level := 0; size>>(layout.TileHeight*uint(level)) > 0; level++ {
		row, err := readPartialTile(ctx, read, uint64(level), size)
		if err != nil {
			return nil, err
		}
		t.rows = append(t.rows, row)
	}
	if width := size % tileWidth; width > 0 {
		data, err := read(ctx, layout.EntriesPath(size/tileWidth, uint8(width)))
		if err != nil {
			return nil, fmt.Errorf("tlog: restore size %d: %w", size, err)
		}
		if t.bundle, err = parseBundle(data, int(width)); err != nil {
			return nil, fmt.Errorf("tlog: restore size %d: %w", size, err)
		}
		for i, e := range t.bundle {
			if LeafHash(e) != t.rows[0][i] {
				return nil, fmt.Errorf("tlog: restore size %d: entry %d does not hash to its tile's leaf", size, size-width+uint64(i))
			}
		}
	}
	hashes := t.borderHashes(size)
	rng, err := rangeFactory.NewRange(0, size, hashes)
	if err != nil {
		return nil, fmt.Errorf("tlog: restore size %d: %w", size, err)
	}
	t.rng = rng
	return t, nil
}

// readPartialTile reads the rightmost tile of a level at a tree size, or
// returns an empty row when that tile would be empty.
func readPartialTile(ctx context.Context, read ReadFunc, level, size uint64) ([]Hash, error) {
	count := size >> (layout.TileHeight * level)
	width := count % tileWidth
	if width == 0 {
		return nil, nil
	}
	data, err := read(ctx, layout.TilePath(level, count/tileWidth, uint8(width)))
	if err != nil {
		return nil, fmt.Errorf("tlog: restore size %d: %w", size, err)
	}
	row, err := parseTile(data, int(width))
	if err != nil {
		return nil, fmt.Errorf("tlog: restore size %d: tile level %d: %w", size, level, err)
	}
	return row, nil
}

// borderHashes returns the roots of the perfect subtrees that make up a
// tree of the given size, left to right. Each lies within the rightmost
// tile of the level of its height: the subtrees taller than a tile level
// cover exactly the full tiles to its left.
func (t *Tree) borderHashes(size uint64) [][]byte {
	var hashes [][]byte
	var start uint64
	for k := 63; k >= 0; k-- {
		if size&(1<<uint(k)) == 0 {
			continue
		}
		level := uint(k) / layout.TileHeight
		shift := layout.TileHeight * level
		rowStart := (size >> shift) / tileWidth * tileWidth
		first := (start >> shift) - rowStart
		n := uint64(1) << (uint(k) - shift)
		root := subtreeRoot(t.rows[level][first : first+n])
		hashes = append(hashes, root[:])
		start += 1 << uint(k)
	}
	return hashes
}

// subtreeRoot returns the root of a perfect subtree whose lowest stored
// row is hs (len(hs) a power of two).
func subtreeRoot(hs []Hash) Hash {
	if len(hs) == 1 {
		return hs[0]
	}
	l, r := subtreeRoot(hs[:len(hs)/2]), subtreeRoot(hs[len(hs)/2:])
	return Hash(rfc6962.DefaultHasher.HashChildren(l[:], r[:]))
}

// InclusionProof returns the RFC 6962 inclusion proof of the entry at
// index in the tree of the given size, reading the tiles it needs.
func InclusionProof(ctx context.Context, index, size uint64, read ReadFunc) ([]Hash, error) {
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, fmt.Errorf("tlog: inclusion proof: %w", err)
	}
	hashes, err := proofHashes(ctx, nodes, size, read)
	if err != nil {
		return nil, fmt.Errorf("tlog: inclusion proof: %w", err)
	}
	return hashes, nil
}

// proofHashes returns the hashes of a proof's nodes in the tree of the
// given size: the perfect nodes read from the tiles that hold them, and
// the ephemeral node, if any, rehashed from them.
func proofHashes(ctx context.Context, nodes proof.Nodes, size uint64, read ReadFunc) ([]Hash, error) {
	tiles := map[string][]Hash{}
	hashes := make([][]byte, 0, len(nodes.IDs))
	for _, id := range nodes.IDs {
		h, err := nodeHash(ctx, read, tiles, id, size)
		if err != nil {
			return nil, err
		}
		hashes = append(hashes, h[:])
	}
	hashes, err := nodes.Rehash(hashes, rfc6962.DefaultHasher.HashChildren)
	if err != nil {
		return nil, err
	}
	out := make([]Hash, len(hashes))
	for i, h := range hashes {
		out[i] = Hash(h)
	}
	return out, nil
}

// nodeHash returns the hash of a perfect node of a tree of the given size,
// computed from the stored row of the tile that holds it.
func nodeHash(ctx context.Context, read ReadFunc, tiles map[string][]Hash, id compact.NodeID, size uint64) (Hash, error) {
	tileLevel, tileIndex, nodeLevel, nodeIndex := layout.NodeCoordsToTileAddress(uint64(id.Level), id.Index)
	width := layout.PartialTileSize(tileLevel, tileIndex, size)
	path := layout.TilePath(tileLevel, tileIndex, width)
	row, ok := tiles[path]
	if !ok {
		data, err := read(ctx, path)
		if err != nil {
			return Hash{}, err
		}
		want := int(width)
		if want == 0 {
			want = tileWidth
		}
		if row, err = parseTile(data, want); err != nil {
			return Hash{}, fmt.Errorf("%s: %w", path, err)
		}
		tiles[path] = row
	}
	first, n := nodeIndex<<nodeLevel, uint64(1)<<nodeLevel
	if first+n > uint64(len(row)) {
		return Hash{}, fmt.Errorf("%s has no node %d at height %d", path, nodeIndex, nodeLevel)
	}
	return subtreeRoot(row[first : first+n]), nil
}

func marshalTile(row []Hash) []byte {
	out := make([]byte, 0, len(row)*len(Hash{}))
	for _, h := range row {
		out = append(out, h[:]...)
	}
	return out
}

// parseTile splits a tile into its hashes; it must hold exactly width.
func parseTile(data []byte, width int) ([]Hash, error) {
	if len(data) != width*len(Hash{}) {
		return nil, fmt.Errorf("tile of %d bytes, want %d hashes", len(data), width)
	}
	row := make([]Hash, width, tileWidth)
	for i := range row {
		row[i] = Hash(data[i*len(Hash{}):])
	}
	return row, nil
}

func marshalBundle(entries [][]byte) []byte {
	n := 0
	for _, e := range entries {
		n += 2 + len(e)
	}
	out := make([]byte, 0, n)
	for _, e := range entries {
		out = binary.BigEndian.AppendUint16(out, uint16(len(e)))
		out = append(out, e...)
	}
	return out
}

// ParseBundle splits an entry bundle into its entries; it must hold
// exactly width of them (256 for a full bundle) and nothing else.
func ParseBundle(data []byte, width int) ([][]byte, error) {
	return parseBundle(data, width)
}

var errBundle = errors.New("malformed entry bundle")

func parseBundle(data []byte, width int) ([][]byte, error) {
	entries := make([][]byte, 0, tileWidth)
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, fmt.Errorf("%w: %d dangling bytes", errBundle, len(data))
		}
		n := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+n {
			return nil, fmt.Errorf("%w: entry of %d bytes runs past the end", errBundle, n)
		}
		entries = append(entries, data[2:2+n])
		data = data[2+n:]
	}
	if len(entries) != width {
		return nil, fmt.Errorf("%w: %d entries, want %d", errBundle, len(entries), width)
	}
	return entries, nil
}
