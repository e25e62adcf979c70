package gateway

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/toolgate/toolgate/evidence"
)

func TestManifestsAreSigned(t *testing.T) {
	t.Parallel()
	signer := newTestSigner(t)
	e := newEnv(t, envOptions{signer: signer})
	e.mustCall("signed-1", "workspace.readFile", map[string]any{"path": "none.txt"})
	e.mustCall("signed-2", "workspace.shell", map[string]any{"command": "true"})

	otherPub, _, _ := ed25519.GenerateKey(nil)
	tests := []struct {
		name          string
		trusted       []ed25519.PublicKey
		wantSignature string
	}{
		{"trusted key", []ed25519.PublicKey{signer.PublicKey()}, evidence.SignatureValid},
		{"other key", []ed25519.PublicKey{otherPub}, evidence.SignatureUnknownKey},
		{"no key given", nil, evidence.SignatureUnchecked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, id := range []string{"signed-1", "signed-2"} {
				rep, err := evidence.Verify(context.Background(), e.store, id, evidence.VerifyOptions{TrustedKeys: tc.trusted})
				if err != nil {
					t.Fatal(err)
				}
				if rep.Status != evidence.StatusOK || rep.Signature != tc.wantSignature || rep.KeyID != signer.KeyID() {
					t.Errorf("%s: status %s, signature %s, key %s; want ok, %s, %s (%v)",
						id, rep.Status, rep.Signature, rep.KeyID, tc.wantSignature, signer.KeyID(), rep.Problems)
				}
			}
		})
	}
}

// newTestSigner returns a signer with a fresh Ed25519 key.
func newTestSigner(t *testing.T) *evidence.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := evidence.NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}
