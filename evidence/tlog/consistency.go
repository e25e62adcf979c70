package tlog

import (
	"context"
	"fmt"

	"github.com/transparency-dev/merkle/proof"
)

// ConsistencyProof returns the RFC 6962 consistency proof from the tree of
// size1 entries to the tree of size2 entries, reading the tiles of size2
// it needs: what a C2SP tlog-witness asks for before it cosigns a newer
// checkpoint. It is empty when size1 is 0 or equal to size2.
func ConsistencyProof(ctx context.Context, size1, size2 uint64, read ReadFunc) ([]Hash, error) {
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("tlog: consistency proof: %w", err)
	}
	hashes, err := proofHashes(ctx, nodes, size2, read)
	if err != nil {
		return nil, fmt.Errorf("tlog: consistency proof %d to %d: %w", size1, size2, err)
	}
	return hashes, nil
}
