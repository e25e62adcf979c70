package evidence_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/tlog"
)

// A signing gateway logs a request's claim and manifest; Prove writes the
// proof file an auditor hands a third party, who checks it with
// VerifyProof and nothing but the gateway's public key.
func ExampleProve() {
	ctx := context.Background()
	store := evidence.NewMemoryStore()
	signer, err := evidence.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		log.Fatal(err)
	}
	origin, err := evidence.LogOrigin(ctx, store, "gw-1")
	if err != nil {
		log.Fatal(err)
	}
	cs, err := signer.CheckpointSigner(origin)
	if err != nil {
		log.Fatal(err)
	}
	sealer, trusted, err := evidence.LogKeys(signer)
	if err != nil {
		log.Fatal(err)
	}
	logw, err := evidence.OpenLog(ctx, store, evidence.LogConfig{
		Instance: "gw-1", Origin: origin, Gateway: "toolgate/1@gw-1", Interval: time.Second, OpTimeout: time.Second,
		MaxPending: 100, Logger: slog.New(slog.DiscardHandler), Sealer: sealer, Trusted: trusted,
		SignCheckpoint: func(size uint64, root tlog.Hash) ([]byte, error) { return tlog.SignCheckpoint(cs, size, root) },
	})
	if err != nil {
		log.Fatal(err)
	}
	gateway := evidence.WithLog(store, logw)

	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	req, _ := json.Marshal(evidence.RequestRecord{RequestID: "r1", Caller: "alice", ToolID: "workspace.readFile",
		Args: json.RawMessage(`{}`), ReceivedAt: at, CanonicalRequestHash: "sha256:" + strings.Repeat("0", 64), Gateway: "toolgate/1@gw-1"})
	m := evidence.Manifest{Version: evidence.ManifestVersion, RequestID: "r1", Outcome: evidence.OutcomeCompleted, CreatedAt: at,
		Artifacts: []evidence.ArtifactDigest{evidence.Digest(evidence.Key("r1", evidence.ArtifactRequest), req)}}
	if err := signer.Sign(&m); err != nil {
		log.Fatal(err)
	}
	manifest, err := evidence.EncodeManifest(m)
	if err != nil {
		log.Fatal(err)
	}
	if err := gateway.Put(ctx, evidence.Key("r1", evidence.ArtifactRequest), req); err != nil { // logs the claim
		log.Fatal(err)
	}
	if err := gateway.Put(ctx, evidence.Key("r1", evidence.ArtifactManifest), manifest); err != nil { // logs the completion
		log.Fatal(err)
	}
	if err := logw.Flush(ctx); err != nil { // the gateway does this every log.checkpoint_interval
		log.Fatal(err)
	}

	proof, err := evidence.Prove(ctx, store, "r1", evidence.ProveOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rep, err := evidence.VerifyProof(proof, evidence.ProofOptions{LogKeys: []ed25519.PublicKey{signer.PublicKey()}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("request %s, outcome %s: entry %d of a log of %d entries\n", rep.RequestID, rep.Outcome, rep.Index, rep.CheckpointSize)
	// Output:
	// request r1, outcome completed: entry 1 of a log of 2 entries
}
