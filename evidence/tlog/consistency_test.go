package tlog

import (
	"context"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// Every consistency proof built from the stored tiles of the larger tree
// verifies between the two roots, across tile edges at levels 0 and 1.
func TestConsistencyProofsVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr, s := NewTree(), store{}
	sizes := []uint64{1, 2, 3, 7, 8, 255, 256, 257, 1000, 65536, 65536 + 700}
	roots := map[uint64]Hash{}
	for _, size := range sizes {
		grow(t, tr, s, tr.Size(), size)
		roots[size] = tr.Root()
		for _, old := range sizes {
			if old > size {
				break
			}
			p, err := ConsistencyProof(ctx, old, size, s.read)
			if err != nil {
				t.Fatalf("%d to %d: %v", old, size, err)
			}
			hashes := make([][]byte, len(p))
			for i := range p {
				hashes[i] = p[i][:]
			}
			r1, r2 := roots[old], roots[size]
			if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old, size, hashes, r1[:], r2[:]); err != nil {
				t.Fatalf("%d to %d: %v", old, size, err)
			}
			if old > 0 && old < size {
				// The same proof must not pass for a forked older tree.
				forked := r1
				forked[0] ^= 1
				if proof.VerifyConsistency(rfc6962.DefaultHasher, old, size, hashes, forked[:], r2[:]) == nil {
					t.Fatalf("%d to %d: the proof verified against a forked root", old, size)
				}
			}
		}
	}
	if _, err := ConsistencyProof(ctx, 10, 9, s.read); err == nil {
		t.Fatal("a proof from a larger to a smaller size was built")
	}
	if _, err := ConsistencyProof(ctx, 3, 70000, s.read); err == nil {
		t.Fatal("a proof to a size whose tiles are not stored was built")
	}
}
