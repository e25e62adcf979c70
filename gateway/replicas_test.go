package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/gateway/telemetry"
)

// replicaPair is two gateways with keys of their own sharing one store,
// each trusting the keys trust names.
type replicaPair struct {
	dir        string // the shared file store's folder
	a, b       *env
	signA      *evidence.Signer
	signB      *evidence.Signer
	telA, telB *telemetry.Telemetry
}

func newReplicaPair(t *testing.T, trustEachOther bool) replicaPair {
	t.Helper()
	dir := t.TempDir()
	store, err := evidence.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	p := replicaPair{dir: dir, signA: newTestSigner(t), signB: newTestSigner(t), telA: newTelemetry(t), telB: newTelemetry(t)}
	var trustA, trustB []ed25519.PublicKey
	if trustEachOther {
		trustA, trustB = []ed25519.PublicKey{p.signB.PublicKey()}, []ed25519.PublicKey{p.signA.PublicKey()}
	}
	pol := map[string]string{"policy.default.cedar": readOnlyPolicy}
	p.a = newEnv(t, envOptions{policies: pol, store: store, signer: p.signA, instance: "gw-a", trustedKeys: trustA, telemetry: p.telA})
	p.b = newEnv(t, envOptions{policies: pol, store: store, signer: p.signB, instance: "gw-b", trustedKeys: trustB, telemetry: p.telB})
	return p
}

// resign replaces request id's manifest with the same manifest signed by
// signer, as someone who holds signer's key and can write to the store.
func resign(t *testing.T, p replicaPair, id string, signer *evidence.Signer) {
	t.Helper()
	editManifest(t, p, id, func(m *evidence.Manifest) {
		if err := signer.Sign(m); err != nil {
			t.Fatal(err)
		}
	})
}

// editManifest rewrites request id's stored manifest with edit's change.
func editManifest(t *testing.T, p replicaPair, id string, edit func(*evidence.Manifest)) {
	t.Helper()
	rewrite(t, filepath.Join(p.dir, evidence.Key(id, evidence.ArtifactManifest)), func(t *testing.T, raw []byte) []byte {
		m, err := evidence.ParseManifest(raw)
		if err != nil {
			t.Fatal(err)
		}
		edit(&m)
		data, err := evidence.EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	})
}

// TestReplicasReplayEachOthersResponses (issue 24, class 4): two
// replicas with keys of their own share a store. A retry that lands on
// the other replica is replayed when that replica trusts the first one's
// key (evidence.trusted_keys), and refused as tampering, naming the key,
// when it does not; a manifest re-signed by an attacker's key is refused
// by both.
func TestReplicasReplayEachOthersResponses(t *testing.T) {
	t.Parallel()
	args := map[string]any{"command": "touch pwned"}
	tests := []struct {
		name           string
		trustEachOther bool
		// tamper, if set, changes the stored evidence of id before the retries.
		tamper func(t *testing.T, p replicaPair, id string)
		// wantMsg, if set, is in the DATA_LOSS every retry gets.
		wantMsg func(p replicaPair) string
	}{
		{name: "replicas that trust each other replay each other's responses", trustEachOther: true},
		{
			name:    "a replica that does not trust the other's key refuses it as tampering",
			wantMsg: func(p replicaPair) string { return "which this gateway does not trust (evidence.trusted_keys)" },
		},
		{
			name: "a manifest re-signed by an attacker's key is refused by both", trustEachOther: true,
			tamper: func(t *testing.T, p replicaPair, id string) { resign(t, p, id, newTestSigner(t)) },
			wantMsg: func(p replicaPair) string {
				return "which this gateway does not trust (evidence.trusted_keys)"
			},
		},
		{
			name: "a manifest whose signature does not match is refused by both", trustEachOther: true,
			tamper: func(t *testing.T, p replicaPair, id string) {
				// The signature stays the one of the old content.
				editManifest(t, p, id, func(m *evidence.Manifest) { m.CreatedAt = m.CreatedAt.Add(-time.Hour) })
			},
			wantMsg: func(p replicaPair) string { return "does not match its content" },
		},
		{
			name: "an unsigned manifest is refused by both", trustEachOther: true,
			tamper: func(t *testing.T, p replicaPair, id string) {
				editManifest(t, p, id, func(m *evidence.Manifest) { m.Signature = nil })
			},
			wantMsg: func(p replicaPair) string { return "it is not signed, though this gateway signs every manifest" },
		},
		{
			name: "a manifest that does not parse is refused by both", trustEachOther: true,
			tamper: func(t *testing.T, p replicaPair, id string) {
				rewrite(t, filepath.Join(p.dir, evidence.Key(id, evidence.ArtifactManifest)), func(*testing.T, []byte) []byte {
					return []byte(`{"version":"forged"}`)
				})
			},
			wantMsg: func(p replicaPair) string { return "it is unreadable" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newReplicaPair(t, tc.trustEachOther)
			const id = "replica-1"
			first := p.a.mustCall(id, "workspace.shell", args)
			if tc.tamper != nil {
				tc.tamper(t, p, id)
			}
			for _, r := range []struct {
				name string
				e    *env
				tel  *telemetry.Telemetry
				own  bool
			}{{"the other replica", p.b, p.telB, false}, {"the same replica", p.a, p.telA, true}} {
				resp, err := r.e.call(context.Background(), id, "workspace.shell", args)
				wantRefused := tc.wantMsg != nil && (tc.tamper != nil || !r.own)
				if !wantRefused {
					if err != nil || !proto.Equal(resp, first) {
						t.Fatalf("%s: the retry got %v %v, want the first reply %v", r.name, resp, err, first)
					}
					continue
				}
				wantCode(t, err, codes.DataLoss, "evidence tampering: requests/"+id+"/manifest.json failed authentication")
				wantCode(t, err, codes.DataLoss, tc.wantMsg(p))
				wantCode(t, err, codes.DataLoss, "nothing was executed")
				if got := metricValue(t, r.tel, telemetry.MetricTampering, "record="+telemetry.RecordResponse); got != 1 {
					t.Errorf("%s: tampering counted %v times, want 1", r.name, got)
				}
			}
			if !tc.trustEachOther {
				_, err := p.b.call(context.Background(), id, "workspace.shell", args)
				wantCode(t, err, codes.DataLoss, "signed by key "+p.signA.KeyID()+", which this gateway does not trust")
			}
			if fileExists(filepath.Join(p.a.workspace, "pwned")) || fileExists(filepath.Join(p.b.workspace, "pwned")) {
				t.Fatal("a retry ran the denied command")
			}
		})
	}
}

// TestSharedMACKeyOpensTheOtherReplicasRecords: with evidence.shared_mac_key
// each replica MACs with the shared key, so each opens what the other
// MACed, and still opens what it MACed with its own key before; without it
// a replica's MAC is foreign to the other.
func TestSharedMACKeyOpensTheOtherReplicasRecords(t *testing.T) {
	t.Parallel()
	shared := bytes.Repeat([]byte{7}, 32)
	signA, signB := newTestSigner(t), newTestSigner(t)
	build := func(s *evidence.Signer, mac []byte) *Gateway {
		g := &Gateway{signer: s}
		if err := g.setTrust(nil, mac); err != nil {
			t.Fatal(err)
		}
		return g
	}
	const key = "requests/r1/dispatch.json"
	body := []byte(`{"state":"dispatched"}`)
	for _, tc := range []struct {
		name       string
		mac        []byte
		wantOpened bool
	}{
		{"with a shared MAC key", shared, true},
		{"without one", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := build(signA, tc.mac), build(signB, tc.mac)
			sealed, err := a.sealer.MAC(key, body)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = b.trusted.Open(key, sealed)
			if (err == nil) != tc.wantOpened {
				t.Fatalf("the other replica opens a MACed record: %v, want opened %v", err, tc.wantOpened)
			}
			if err != nil && !errors.Is(err, trust.ErrUntrustedKey) {
				t.Fatalf("Open = %v, want ErrUntrustedKey", err)
			}
			// What A sealed with its own derived key before the shared key
			// was configured still opens.
			before, err := build(signA, nil).sealer.MAC(key, body)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := a.trusted.Open(key, before); err != nil {
				t.Fatalf("a replica's own earlier MAC no longer opens: %v", err)
			}
		})
	}
	if err := (&Gateway{}).setTrust(nil, shared); err == nil || !strings.Contains(err.Error(), "need a signer") {
		t.Fatalf("a shared MAC key without a signer: %v, want refused", err)
	}
}
