package tlog

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

const peerName = "toolgate.log/0123456789abcdef/gw-2"

func fixedClock() time.Time { return time.Unix(1_800_000_000, 0) }

func testCosigner(t testing.TB, key byte) note.Signer {
	t.Helper()
	c, err := NewCosigner(peerName, testKey(key), fixedClock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A cosignature NewCosigner makes is a C2SP cosignature/v1 line: the
// formats library's own verifier (what any witness client uses) accepts
// it under the vkey CosignerVKey prints, OpenCheckpoint counts it as a
// witness's, and its key id is the one formats computes.
func TestACosignatureIsReadByEveryCosignatureV1Client(t *testing.T) {
	t.Parallel()
	cp := signedCheckpoint(t, 1, 7, testRoot(7))
	cosigned, err := AppendCosignature(cp, testCosigner(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(cosigned, cp) || bytes.Count(cosigned, []byte("\n\u2014 ")) != 2 {
		t.Fatalf("the cosigned checkpoint is not the checkpoint and one more line:\n%s", cosigned)
	}
	vkey, err := CosignerVKey(peerName, testKey(2).Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := CosignerVerifier(peerName, testKey(2).Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if ours.KeyHash() != upstream.KeyHash() || testCosigner(t, 2).KeyHash() != upstream.KeyHash() {
		t.Fatalf("key ids: signer %08x, verifier %08x, formats %08x", testCosigner(t, 2).KeyHash(), ours.KeyHash(), upstream.KeyHash())
	}
	n, err := note.Open(cosigned, note.VerifierList(upstream))
	if err != nil || len(n.Sigs) != 1 {
		t.Fatalf("formats' verifier: %v (%d signatures)", err, len(n.Sigs))
	}
	if ts, err := fnote.CoSigV1Timestamp(n.Sigs[0]); err != nil || !ts.Equal(fixedClock()) {
		t.Fatalf("timestamp %v, %v; want %v", ts, err, fixedClock())
	}
	got, err := OpenCheckpoint(cosigned, CheckpointPolicy{LogKeys: []ed25519.PublicKey{testKey(1).Public().(ed25519.PublicKey)},
		Witnesses: []note.Verifier{ours}, Threshold: 1, Strict: true})
	if err != nil || len(got.Witnesses) != 1 || got.Witnesses[0] != peerName {
		t.Fatalf("OpenCheckpoint: %+v, %v", got, err)
	}
}

// A cosignature made by formats' own signer from the same seed verifies
// under CosignerVerifier: the two agree on the message and the key id.
func TestFormatsCosignaturesVerifyUnderCosignerVerifier(t *testing.T) {
	t.Parallel()
	seed := testKey(3).Seed()
	pub := testKey(3).Public().(ed25519.PublicKey)
	vkey, err := CosignerVKey(peerName, pub)
	if err != nil {
		t.Fatal(err)
	}
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%s+%s", peerName, strings.Split(vkey, "+")[1],
		base64.StdEncoding.EncodeToString(append([]byte{algCosignatureV1}, seed...)))
	theirs, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := AppendCosignature(signedCheckpoint(t, 1, 9, testRoot(9)), theirs)
	if err != nil {
		t.Fatal(err)
	}
	v, err := CosignerVerifier(peerName, pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(cosigned, note.VerifierList(v)); err != nil {
		t.Fatalf("a formats cosignature does not verify: %v", err)
	}
}

// A cosignature is no checkpoint signature: under the same name and key,
// a checkpoint verifier finds no signature of its own in a cosigned note,
// and a cosignature verifier none in a plain checkpoint.
func TestACosignatureCannotPassForACheckpointSignature(t *testing.T) {
	t.Parallel()
	pub := testKey(2).Public().(ed25519.PublicKey)
	cp := signedCheckpoint(t, 1, 7, testRoot(7))
	cosigned, err := AppendCosignature(cp, testCosigner(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := VerifierFor(peerName, pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(cosigned, note.VerifierList(logKey)); err == nil {
		t.Fatal("a checkpoint verifier accepted a cosignature")
	}
	// A checkpoint of the peer's own log signed by the same key.
	s, err := NewSigner(peerName, testKey(2))
	if err != nil {
		t.Fatal(err)
	}
	own, err := SignCheckpoint(s, 3, testRoot(3))
	if err != nil {
		t.Fatal(err)
	}
	v, err := CosignerVerifier(peerName, pub)
	if err != nil {
		t.Fatal(err)
	}
	var unverified *note.UnverifiedNoteError
	if _, err := note.Open(own, note.VerifierList(v)); !errors.As(err, &unverified) {
		t.Fatalf("a cosignature verifier on a checkpoint signature: %v, want unverified", err)
	}
}

func TestCosignerRefusesWhatItCannotSignUnder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		key  ed25519.PrivateKey
		cosg string
	}{
		{"a name with a space", testKey(1), "a b"},
		{"a name with a plus", testKey(1), "a+b"},
		{"an empty name", testKey(1), ""},
		{"a short key", testKey(1)[:10], peerName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewCosigner(tc.cosg, tc.key, nil); err == nil {
				t.Fatal("NewCosigner accepted it")
			}
		})
	}
	if _, err := AppendCosignature([]byte("origin\n1\nroot\n"), testCosigner(t, 1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("AppendCosignature of an unsigned note: %v", err)
	}
	before := func() time.Time { return time.Unix(-1, 0) }
	c, err := NewCosigner(peerName, testKey(1), before)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sign([]byte("x\n")); err == nil {
		t.Fatal("a cosignature before 1970 was made")
	}
}
