package tlog_test

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// A log of one claim: sign its checkpoint, write the proof file, and
// check it as an auditor would, with the log's public key only.
func ExampleVerifyInclusion() {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	entry, err := tlog.Entry{
		Kind: tlog.KindClaim, RequestID: "req-1",
		CanonicalRequestHash: "sha256:" + fmt.Sprintf("%064x", 1),
		RequestSHA256:        fmt.Sprintf("%064x", 2),
		ReceivedAt:           time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC),
		Gateway:              "toolgate/1.0.0@gw-1",
	}.Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}
	signer, err := tlog.NewSigner("toolgate.log/0123456789abcdef/gw-1", key)
	if err != nil {
		fmt.Println(err)
		return
	}
	// A tree of one leaf has the leaf hash as its root and an empty path.
	signed, err := tlog.SignCheckpoint(signer, 1, tlog.LeafHash(entry))
	if err != nil {
		fmt.Println(err)
		return
	}
	file := tlog.Proof{Extra: entry, Index: 0, Checkpoint: signed}.Marshal()

	proof, err := tlog.ParseProof(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	cp, err := tlog.OpenCheckpoint(proof.Checkpoint, tlog.CheckpointPolicy{
		LogKeys: []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, Strict: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cp.Origin, cp.Size, tlog.VerifyInclusion(proof, cp, proof.Extra))
	// Output: toolgate.log/0123456789abcdef/gw-1 1 <nil>
}
