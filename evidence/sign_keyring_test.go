package evidence

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/evidence/trust"
)

// TestCheckSignatureWith: a manifest passes when the key its key_id
// names is among the trusted ones and its signature matches; an unsigned
// manifest, one signed by a key not trusted, and one altered after signing
// are tampering, each told apart.
func TestCheckSignatureWith(t *testing.T) {
	t.Parallel()
	own, replica, attacker := testSigner(t, 1), testSigner(t, 2), testSigner(t, 3)
	keys, err := trust.NewKeyring([]ed25519.PublicKey{own.PublicKey(), replica.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(s *Signer) Manifest {
		m := sampleManifest()
		if err := s.Sign(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	altered := sign(replica)
	altered.Outcome = OutcomeFailed
	tests := []struct {
		name     string
		keys     *trust.Keyring
		m        Manifest
		wantKind error // nil: passes, ErrTampered alone: a bad signature
		wantMsg  string
	}{
		{"signed by the gateway's own key", keys, sign(own), nil, ""},
		{"signed by a trusted replica's key", keys, sign(replica), nil, ""},
		{"unsigned", keys, sampleManifest(), trust.ErrUnsealed, "the manifest is not signed"},
		{"signed by an untrusted key", keys, sign(attacker), trust.ErrUntrustedKey, "signed by key " + attacker.KeyID() + ", which is not trusted"},
		{"altered after signing", keys, altered, trust.ErrTampered, "the signature by key " + replica.KeyID() + " does not match the manifest's content"},
		{"no keyring trusts nothing", nil, sign(own), trust.ErrUntrustedKey, "which is not trusted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckSignatureWith(tc.keys, tc.m)
			if tc.wantKind == nil {
				if err != nil {
					t.Fatalf("CheckSignatureWith: %v", err)
				}
				return
			}
			if !errors.Is(err, trust.ErrTampered) || !errors.Is(err, tc.wantKind) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("CheckSignatureWith = %v, want tampering (%v) saying %q", err, tc.wantKind, tc.wantMsg)
			}
			if tc.wantKind == trust.ErrTampered && (errors.Is(err, trust.ErrUntrustedKey) || errors.Is(err, trust.ErrUnsealed)) {
				t.Fatalf("a bad signature reads as another kind: %v", err)
			}
		})
	}
}

// FuzzCheckSignatureWith: whatever a stored manifest holds, it passes
// only when the key its key_id names is trusted and its signature by that
// key verifies, and every refusal is tampering.
func FuzzCheckSignatureWith(f *testing.F) {
	own, replica := testSigner(f, 1), testSigner(f, 2)
	keys, err := trust.NewKeyring([]ed25519.PublicKey{own.PublicKey()})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []*Signer{own, replica} {
		m := sampleManifest()
		if err := s.Sign(&m); err != nil {
			f.Fatal(err)
		}
		data, err := EncodeManifest(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	unsigned, _ := EncodeManifest(sampleManifest())
	f.Add(unsigned)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			return
		}
		err = CheckSignatureWith(keys, m)
		if err != nil {
			if !errors.Is(err, trust.ErrTampered) {
				t.Fatalf("refusal %v is not tampering", err)
			}
			return
		}
		if err := CheckSignature(own.PublicKey(), m); err != nil {
			t.Fatalf("passed with the keyring, yet CheckSignature with the only trusted key says %v", err)
		}
	})
}
