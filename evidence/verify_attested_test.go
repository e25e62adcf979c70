package evidence

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// TestSettleSignature: a manifest signature left to the join is taken as
// valid only on the word of a completion, in a log found consistent under
// a checkpoint signed by the manifest's own key, that commits to the exact
// bytes verified; in every other case it is checked as checkSignature
// checks it, its problem placed where checkSignature would have put it.
func TestSettleSignature(t *testing.T) {
	t.Parallel()
	newKey := func() (*Signer, ed25519.PublicKey) {
		_, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSigner(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.PublicKey()
	}
	gw, gwPub := newKey()
	other, otherPub := newKey()
	m := Manifest{Version: ManifestVersion, RequestID: "r1", Outcome: OutcomeCompleted, CreatedAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	if err := gw.Sign(&m); err != nil {
		t.Fatal(err)
	}
	good, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	// The same manifest with another signature value: well formed, wrong.
	forged := m
	forged.Signature = &Signature{Algorithm: SignatureAlgorithm, KeyID: m.Signature.KeyID, Value: strings.Repeat("A", 86) + "=="}
	forgedBytes, err := EncodeManifest(forged)
	if err != nil {
		t.Fatal(err)
	}
	digest := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	const logA, logB = "toolgate.log/b/gw-a", "toolgate.log/b/gw-b"
	completion := func(origin string, b []byte) logRecord {
		return logRecord{kind: tlog.KindCompletion, digest: digest(b), origin: origin, index: 1}
	}
	tests := []struct {
		name     string
		m        Manifest
		data     []byte
		attested map[string]string
		recs     []logRecord
		deferred bool
		want     string
	}{
		{name: "logged by a verified log of the manifest's key", m: m, data: good,
			attested: map[string]string{logA: gw.KeyID()}, recs: []logRecord{completion(logA, good)}, deferred: true, want: SignatureValid},
		{name: "forged signature, its bytes logged by no log", m: forged, data: forgedBytes,
			attested: map[string]string{logA: gw.KeyID()}, recs: []logRecord{completion(logA, good)}, deferred: true, want: SignatureBad},
		{name: "forged signature, logged by a log that does not verify", m: forged, data: forgedBytes,
			attested: map[string]string{logA: gw.KeyID()}, recs: []logRecord{completion(logB, forgedBytes)}, deferred: true, want: SignatureBad},
		{name: "a claim with the manifest's digest is no completion", m: forged, data: forgedBytes,
			attested: map[string]string{logA: gw.KeyID()},
			recs:     []logRecord{{kind: tlog.KindClaim, digest: digest(forgedBytes), origin: logA}}, deferred: true, want: SignatureBad},
		{name: "logged under another trusted key's checkpoint: the key is not the manifest's", m: forged, data: forgedBytes,
			attested: map[string]string{logA: gw.KeyID(), logB: other.KeyID()}, recs: []logRecord{completion(logB, forgedBytes)},
			deferred: true, want: SignatureBad},
		{name: "genuine, unlogged", m: m, data: good, attested: map[string]string{logA: gw.KeyID()}, deferred: true, want: SignatureValid},
		{name: "no verified log signed by the manifest's key: checked at once", m: m, data: good,
			attested: map[string]string{logB: other.KeyID()}, deferred: false},
		{name: "no verified log: checked at once", m: forged, data: forgedBytes, deferred: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := newVerifier(NewMemoryStore(), VerifyOptions{TrustedKeys: []ed25519.PublicKey{gwPub, otherPub}})
			if err != nil {
				t.Fatal(err)
			}
			for origin, id := range tc.attested {
				v.attest(origin, id)
			}
			r := &requestCopies{v: v, id: "r1"}
			rep := VerifyReport{RequestID: "r1", Problems: []string{"before"}}
			if got := r.deferSignature(tc.m, tc.data, &rep); got != tc.deferred {
				t.Fatalf("deferred: %v, want %v", got, tc.deferred)
			}
			if !tc.deferred {
				return
			}
			rep.Problems = append(rep.Problems, "after")
			v.settleSignature(&rep, r, tc.recs)
			var want VerifyReport
			v.checkSignature(tc.m, Key("r1", ArtifactManifest), &want)
			if rep.Signature != tc.want || (tc.want != SignatureValid && rep.Signature != want.Signature) {
				t.Fatalf("signature %q, want %q (checkSignature: %q)", rep.Signature, tc.want, want.Signature)
			}
			wantProblems := append(append([]string{"before"}, want.Problems...), "after")
			if tc.want == SignatureValid {
				wantProblems = []string{"before", "after"}
			}
			if strings.Join(rep.Problems, "|") != strings.Join(wantProblems, "|") || rep.KeyID != tc.m.Signature.KeyID {
				t.Fatalf("problems %q, key %q; want %q, %q", rep.Problems, rep.KeyID, wantProblems, tc.m.Signature.KeyID)
			}
		})
	}
}
