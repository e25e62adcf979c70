package gateway

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/toolgate/toolgate/drivers"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
)

// BenchmarkReplaySignatureCheck is what trusting replicas costs a replay.
// "check/own-key" is the check a replay made before replicas were trusted
// (evidence.CheckSignature with the gateway's own key), "check/keyring"
// and "check/keyring-replica" the keyring's (evidence.CheckSignatureWith,
// the gateway's key and eight replicas'), of a manifest the gateway signed
// and of one a replica signed: one Ed25519 verification each. "replay/own"
// and "replay/replica" are whole replayed RunTool calls over loopback gRPC
// on the memory store, of a request the gateway ran and of one its
// replica ran. "check/interleaved" makes the own-key check and the
// keyring's check of a replica's manifest one right after the other in
// every iteration and reports the ratio of their times.
func BenchmarkReplaySignatureCheck(b *testing.B) {
	store := evidence.NewMemoryStore()
	signA, signB := newBenchSigner(b), newBenchSigner(b)
	trusted := []ed25519.PublicKey{signB.PublicKey()}
	for range 7 {
		trusted = append(trusted, newBenchSigner(b).PublicKey())
	}
	gA, clientA := replayBenchGateway(b, store, signA, "bench-a", trusted)
	_, clientB := replayBenchGateway(b, store, signB, "bench-b", []ed25519.PublicKey{signA.PublicKey()})
	own, replica := replayBenchRequest("own-1"), replayBenchRequest("replica-1")
	for _, c := range []struct {
		client toolgatev1.ToolGatewayClient
		req    *toolgatev1.RunToolRequest
	}{{clientA, own}, {clientB, replica}} {
		if _, err := c.client.RunTool(context.Background(), c.req); err != nil {
			b.Fatal(err)
		}
	}
	manifest := func(id string) evidence.Manifest {
		raw, err := store.Get(context.Background(), evidence.Key(id, evidence.ArtifactManifest))
		if err != nil {
			b.Fatal(err)
		}
		m, err := evidence.ParseManifest(raw)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	mOwn, mReplica := manifest("own-1"), manifest("replica-1")
	checks := []struct {
		name  string
		check func() error
	}{
		{"check/own-key", func() error { return evidence.CheckSignature(gA.signer.PublicKey(), mOwn) }},
		{"check/keyring", func() error { return evidence.CheckSignatureWith(gA.trusted, mOwn) }},
		{"check/keyring-replica", func() error { return evidence.CheckSignatureWith(gA.trusted, mReplica) }},
	}
	for _, c := range checks {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.check(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// Both checks one right after the other in every iteration, so that a
	// shared machine's drift falls on both alike: keyring/own-key is the
	// ratio of their summed times.
	b.Run("check/interleaved", func(b *testing.B) {
		var ownTime, ringTime time.Duration
		i := 0
		for b.Loop() {
			start := time.Now()
			errOwn := checks[0].check()
			mid := time.Now()
			errRing := checks[2].check()
			ringTime += time.Since(mid)
			ownTime += mid.Sub(start)
			if errOwn != nil || errRing != nil {
				b.Fatal(errOwn, errRing)
			}
			i++
		}
		b.ReportMetric(float64(ownTime)/float64(i), "own-key-ns/op")
		b.ReportMetric(float64(ringTime)/float64(i), "keyring-ns/op")
		b.ReportMetric(float64(ringTime)/float64(ownTime), "keyring/own-key")
	})
	for _, r := range []struct {
		name string
		req  *toolgatev1.RunToolRequest
	}{{"replay/own", own}, {"replay/replica", replica}} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			i := 0
			for b.Loop() {
				if _, err := clientA.RunTool(context.Background(), r.req); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu.report(b, i)
		})
	}
}

func newBenchSigner(b *testing.B) *evidence.Signer {
	b.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := evidence.NewSigner(key)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// replayBenchGateway is a signing gateway over store, trusting trusted,
// serving noop.run, and a client of it.
func replayBenchGateway(b *testing.B, store evidence.Store, signer *evidence.Signer, instance string, trusted []ed25519.PublicKey) (*Gateway, toolgatev1.ToolGatewayClient) {
	b.Helper()
	engine, red := benchDecider(b)
	auth, _ := callerauth.New(nil, nil)
	g, err := New(Options{
		Decider: engine, Store: store, Signer: signer, TrustedKeys: trusted, Redactor: red, Auth: auth, Instance: instance,
		Drivers: map[string]drivers.Driver{"noop": noopDriver{}},
		Tools:   map[string]Tool{"noop.run": {Driver: "noop", Target: "run"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return g, toolgatev1.NewToolGatewayClient(serve(b, g))
}

func replayBenchRequest(id string) *toolgatev1.RunToolRequest {
	return &toolgatev1.RunToolRequest{RequestId: id, ToolId: "noop.run", Ctx: &toolgatev1.RunContext{RunId: "run-1"}}
}
