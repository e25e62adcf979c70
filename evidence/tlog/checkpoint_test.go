package tlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

const testOrigin = "toolgate.log/0123456789abcdef/gw-1"

// testKey returns a fixed Ed25519 key, distinct for each n.
func testKey(n byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
}

func testRoot(n byte) [32]byte { return sha256.Sum256([]byte{n}) }

// testWitness is a fake witness: its cosignature signer and the verifier
// a policy would parse from its vkey.
type testWitness struct {
	signer   note.Signer
	verifier note.Verifier
}

func newWitness(t testing.TB, n byte) testWitness {
	t.Helper()
	name := fmt.Sprintf("witness-%d.example", n)
	seed := bytes.Repeat([]byte{n}, ed25519.SeedSize)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		t.Fatal(err)
	}
	skey := fmt.Sprintf("PRIVATE+KEY+%s+%s+%s", name, strings.Split(vkey, "+")[1],
		base64.StdEncoding.EncodeToString(append([]byte{0x01}, seed...)))
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseWitnessKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return testWitness{s, v}
}

// signedCheckpoint returns a checkpoint of testOrigin signed by key n.
func signedCheckpoint(t testing.TB, key byte, size uint64, root [32]byte) []byte {
	t.Helper()
	s, err := NewSigner(testOrigin, testKey(key))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(s, size, root)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// signText signs an arbitrary note text with key n under name.
func signText(t testing.TB, name string, key byte, text string) []byte {
	t.Helper()
	s, err := NewSigner(name, testKey(key))
	if err != nil {
		t.Fatal(err)
	}
	b, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cosign appends the witnesses' cosignatures to a signed checkpoint.
func cosign(t testing.TB, signed []byte, ws ...testWitness) []byte {
	t.Helper()
	text, _, _ := bytes.Cut(signed, []byte("\n\n"))
	out := bytes.Clone(signed)
	for _, w := range ws {
		n, err := note.Sign(&note.Note{Text: string(text) + "\n"}, w.signer)
		if err != nil {
			t.Fatal(err)
		}
		_, line, _ := bytes.Cut(n, []byte("\n\n"))
		out = append(out, line...)
	}
	return out
}

func logPolicy(keys ...byte) CheckpointPolicy {
	var p CheckpointPolicy
	for _, k := range keys {
		p.LogKeys = append(p.LogKeys, testKey(k).Public().(ed25519.PublicKey))
	}
	return p
}

func TestASignedCheckpointOpensWithItsLogKey(t *testing.T) {
	t.Parallel()
	data := signedCheckpoint(t, 1, 42, testRoot(1))
	want := testOrigin + "\n42\n" + base64.StdEncoding.EncodeToString(func() []byte { r := testRoot(1); return r[:] }()) + "\n\n"
	if !strings.HasPrefix(string(data), want) {
		t.Fatalf("checkpoint =\n%s\nwant it to start\n%s", data, want)
	}
	for _, strict := range []bool{false, true} {
		p := logPolicy(2, 1, 1) // a key given twice is one key
		p.Strict = strict
		cp, err := OpenCheckpoint(data, p)
		if err != nil {
			t.Fatalf("strict=%v: %v", strict, err)
		}
		if cp.Origin != testOrigin || cp.Size != 42 || cp.Root != testRoot(1) || !bytes.Equal(cp.Note, data) ||
			!cp.LogKey.Equal(testKey(1).Public()) || len(cp.Witnesses) != 0 {
			t.Fatalf("strict=%v: OpenCheckpoint = %+v", strict, cp)
		}
	}
}

func TestSigningTheSameCheckpointTwiceGivesTheSameBytes(t *testing.T) {
	t.Parallel()
	a, b := signedCheckpoint(t, 1, 7, testRoot(7)), signedCheckpoint(t, 1, 7, testRoot(7))
	if !bytes.Equal(a, b) {
		t.Fatalf("two signatures of one checkpoint differ:\n%s\n%s", a, b)
	}
}

func TestNewSignerUsesTheSignedNoteKeyID(t *testing.T) {
	t.Parallel()
	key := testKey(3)
	vkey, err := note.NewEd25519VerifierKey(testOrigin, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(testOrigin, key)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyHash() != v.KeyHash() || s.Name() != v.Name() {
		t.Fatalf("signer %s/%08x, x/mod verifier %s/%08x", s.Name(), s.KeyHash(), v.Name(), v.KeyHash())
	}
	signed, err := SignCheckpoint(s, 1, testRoot(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(v)); err != nil {
		t.Fatalf("x/mod's verifier refuses the checkpoint: %v", err)
	}
	mine, err := VerifierFor(testOrigin, key.Public().(ed25519.PublicKey))
	if err != nil || mine.KeyHash() != v.KeyHash() {
		t.Fatalf("VerifierFor = %v, %v", mine, err)
	}
}

func TestNamesThatCannotBeALogOrigin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, origin string }{
		{"empty", ""},
		{"with a space", "toolgate.log/a b"},
		{"with a plus", "toolgate.log/a+b"},
		{"with a newline", "toolgate.log/a\nb"},
		{"with a tab", "toolgate.log/a\tb"},
		{"with a NUL", "toolgate.log/a\x00"},
		{"not UTF-8", "toolgate.log/\xff"},
		{"the manifest signing domain", "toolgate-manifest-v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewSigner(tc.origin, testKey(1)); err == nil {
				t.Fatal("NewSigner accepted the origin")
			}
			if _, err := VerifierFor(tc.origin, testKey(1).Public().(ed25519.PublicKey)); err == nil {
				t.Fatal("VerifierFor accepted the origin")
			}
		})
	}
	if _, err := NewSigner(testOrigin, testKey(1)[:32]); err == nil {
		t.Fatal("NewSigner accepted a 32-byte private key")
	}
}

// flipLastBase64Bit flips the lowest bit of the last base64 character
// before the padding on line i of data (counted from 0): the bits a lax
// decoder ignores.
func flipLastBase64Bit(data []byte, line int) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	l := strings.TrimRight(lines[line], "=\n")
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", l[len(l)-1])
	lines[line] = l[:len(l)-1] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[last^1]) + lines[line][len(l):]
	return []byte(strings.Join(lines, ""))
}

func TestOpenCheckpointSaysWhichCheckFailed(t *testing.T) {
	t.Parallel()
	root := testRoot(1)
	good := signedCheckpoint(t, 1, 42, root)
	rootB64 := base64.StdEncoding.EncodeToString(root[:])
	w1, w2 := newWitness(t, 11), newWitness(t, 12)
	for _, tc := range []struct {
		name      string
		data      []byte
		strict    bool
		want      error
		witnesses []note.Verifier
	}{
		{"a checkpoint signed by another key", signedCheckpoint(t, 9, 42, root), false, ErrUnknownKey, nil},
		{"a checkpoint only witnesses signed", cosign(t, signText(t, "someone-else", 9, testOrigin+"\n42\n"+rootB64+"\n"), w1), false, ErrUnknownKey, nil},
		{"a checkpoint signed under another name", signText(t, "toolgate.log/other", 1, testOrigin+"\n42\n"+rootB64+"\n"), false, ErrUnknownKey, nil},
		{"a larger size under the old signature", bytes.Replace(good, []byte("\n42\n"), []byte("\n43\n"), 1), false, ErrBadSignature, nil},
		{"a size with a leading zero, signed", signText(t, testOrigin, 1, testOrigin+"\n042\n"+rootB64+"\n"), false, ErrMalformed, nil},
		{"a size with a plus sign, signed", signText(t, testOrigin, 1, testOrigin+"\n+42\n"+rootB64+"\n"), false, ErrMalformed, nil},
		{"an extension line, signed", signText(t, testOrigin, 1, testOrigin+"\n42\n"+rootB64+"\nextra\n"), false, ErrMalformed, nil},
		{"a missing root line, signed", signText(t, testOrigin, 1, testOrigin+"\n42\n"), false, ErrMalformed, nil},
		{"a root with a flipped unused bit, signed", signText(t, testOrigin, 1, string(flipLastBase64Bit([]byte(testOrigin+"\n42\n"+rootB64+"\n"), 2))), false, ErrMalformed, nil},
		{"a 31-byte root, signed", signText(t, testOrigin, 1, testOrigin+"\n42\n"+base64.StdEncoding.EncodeToString(root[:31])+"\n"), false, ErrMalformed, nil},
		{"no final newline", bytes.TrimSuffix(good, []byte("\n")), false, ErrMalformed, nil},
		{"no blank line before the signatures", bytes.Replace(good, []byte("\n\n"), []byte("\n"), 1), false, ErrMalformed, nil},
		{"a blank line after the signatures", append(bytes.Clone(good), '\n'), false, ErrMalformed, nil},
		{"a carriage return", bytes.Replace(good, []byte("\n42\n"), []byte("\n42\r\n"), 1), false, ErrMalformed, nil},
		{"no origin line", []byte("no newline at all"), false, ErrMalformed, nil},
		{"an origin with a space", bytes.Replace(good, []byte("gw-1"), []byte("gw 1"), 1), false, ErrMalformed, nil},
		{"a log signature with a flipped unused bit, strict", flipLastBase64Bit(good, 4), true, ErrMalformed, nil},
		{"the log signature twice, strict", append(bytes.Clone(good), good[bytes.LastIndex(good, []byte("\n\n"))+2:]...), true, ErrMalformed, nil},
		{"a signature line of an unknown key, strict", cosign(t, good, w1), true, ErrUnknownKey, nil},
		{"a witness cosignature with a flipped unused bit, strict", flipLastBase64Bit(cosign(t, good, w1), 5), true, ErrMalformed,
			[]note.Verifier{w1.verifier, w2.verifier}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := logPolicy(1)
			p.Strict, p.Witnesses = tc.strict, tc.witnesses
			cp, err := OpenCheckpoint(tc.data, p)
			if !errors.Is(err, tc.want) {
				t.Fatalf("OpenCheckpoint(%q) = %+v, %v; want %v", tc.data, cp, err, tc.want)
			}
		})
	}
}

func TestUnknownSignatureLinesAreIgnoredUnlessStrict(t *testing.T) {
	t.Parallel()
	data := cosign(t, signedCheckpoint(t, 1, 5, testRoot(5)), newWitness(t, 13))
	cp, err := OpenCheckpoint(data, logPolicy(1))
	if err != nil || cp.Size != 5 || len(cp.Witnesses) != 0 {
		t.Fatalf("OpenCheckpoint = %+v, %v", cp, err)
	}
}

func TestWitnessThreshold(t *testing.T) {
	t.Parallel()
	w1, w2, w3 := newWitness(t, 21), newWitness(t, 22), newWitness(t, 23)
	base := signedCheckpoint(t, 1, 9, testRoot(9))
	twoOfThree := cosign(t, base, w1, w2)
	policy := func(threshold int, strict bool) CheckpointPolicy {
		p := logPolicy(1)
		p.Witnesses = []note.Verifier{w1.verifier, w2.verifier, w3.verifier}
		p.Threshold, p.Strict = threshold, strict
		return p
	}
	for _, tc := range []struct {
		name      string
		data      []byte
		threshold int
		strict    bool
		want      error
		witnesses []string
	}{
		{"two of three cosignatures meet a threshold of two", twoOfThree, 2, true, nil, []string{"witness-21.example", "witness-22.example"}},
		{"two of three cosignatures miss a threshold of three", twoOfThree, 3, true, ErrWitnessThreshold, nil},
		{"no cosignature misses a threshold of one", base, 1, false, ErrWitnessThreshold, nil},
		{"one witness's line repeated counts once", append(bytes.Clone(cosign(t, base, w1)), cosign(t, base, w1)[len(base):]...), 2, false, ErrWitnessThreshold, nil},
		{"one witness's line repeated is refused when strict", append(bytes.Clone(cosign(t, base, w1)), cosign(t, base, w1)[len(base):]...), 1, true, ErrMalformed, nil},
		{"a forged cosignature of a trusted witness is a bad signature", forgeLastSignature(cosign(t, base, w1, w2)), 1, false, ErrBadSignature, nil},
		{"a cosignature of another checkpoint is a bad signature", append(bytes.Clone(base), cosign(t, signedCheckpoint(t, 1, 10, testRoot(9)), w1)[len(signedCheckpoint(t, 1, 10, testRoot(9))):]...), 1, false, ErrBadSignature, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := OpenCheckpoint(tc.data, policy(tc.threshold, tc.strict))
			if !errors.Is(err, tc.want) || (err == nil && fmt.Sprint(cp.Witnesses) != fmt.Sprint(tc.witnesses)) {
				t.Fatalf("OpenCheckpoint = %+v, %v; want witnesses %v, error %v", cp, err, tc.witnesses, tc.want)
			}
			if errors.Is(err, ErrWitnessThreshold) && !strings.Contains(err.Error(), fmt.Sprintf("of the 3 trusted witnesses cosigned, %d required", tc.threshold)) {
				t.Fatalf("the threshold error %q does not say k of n", err)
			}
		})
	}
	if _, err := OpenCheckpoint(twoOfThree, policy(4, false)); err == nil || errors.Is(err, ErrWitnessThreshold) {
		t.Fatalf("a threshold above the number of witness keys gave %v, want a policy error", err)
	}
	if _, err := OpenCheckpoint(twoOfThree, CheckpointPolicy{}); err == nil {
		t.Fatal("a policy without log keys opened a checkpoint")
	}
}

// forgeLastSignature changes one byte in the middle of the signature on
// the last line, keeping its key id.
func forgeLastSignature(data []byte) []byte {
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	last := lines[len(lines)-1]
	name, b64, _ := strings.Cut(strings.TrimPrefix(last, sigPrefix), " ")
	sig, _ := base64.StdEncoding.DecodeString(b64)
	sig[len(sig)/2] ^= 0x40
	lines[len(lines)-1] = sigPrefix + name + " " + base64.StdEncoding.EncodeToString(sig)
	return []byte(strings.Join(lines, "") + "\n")
}

func TestEveryFlippedBitOfACosignedCheckpointIsRefusedWhenStrict(t *testing.T) {
	t.Parallel()
	w := newWitness(t, 31)
	data := cosign(t, signedCheckpoint(t, 1, 1000, testRoot(3)), w)
	p := logPolicy(1)
	p.Witnesses, p.Threshold, p.Strict = []note.Verifier{w.verifier}, 1, true
	if _, err := OpenCheckpoint(data, p); err != nil {
		t.Fatal(err)
	}
	for i := range len(data) * 8 {
		flipped := bytes.Clone(data)
		flipped[i/8] ^= 1 << (i % 8)
		if cp, err := OpenCheckpoint(flipped, p); err == nil {
			t.Fatalf("bit %d flipped: %q opened as %+v", i, flipped, cp)
		}
	}
}

func TestABadSignatureErrorSaysWhoseSignatureItIs(t *testing.T) {
	t.Parallel()
	w := newWitness(t, 51)
	good := cosign(t, signedCheckpoint(t, 1, 42, testRoot(1)), w)
	p := logPolicy(1)
	p.Witnesses = []note.Verifier{w.verifier}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"a changed body breaks the log signature first", "the log signature", bytes.Replace(good, []byte("\n42\n"), []byte("\n43\n"), 1)},
		{"a forged cosignature names its witness", "the cosignature of witness witness-51.example", forgeLastSignature(good)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenCheckpoint(tc.data, p)
			if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenCheckpoint = %v, want ErrBadSignature saying %q", err, tc.want)
			}
		})
	}
}
