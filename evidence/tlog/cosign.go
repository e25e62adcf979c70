package tlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// algCosignatureV1 is the signed-note signature type of a C2SP
// tlog-cosignature/v1 Ed25519 key.
const algCosignatureV1 = 0x04

// cosigner signs C2SP tlog-cosignature/v1 cosignatures with a key
// Toolgate already holds, as ed25519Signer does for checkpoints.
type cosigner struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
	now  func() time.Time
}

func (c *cosigner) Name() string    { return c.name }
func (c *cosigner) KeyHash() uint32 { return c.hash }

// Sign signs "cosignature/v1\ntime <t>\n" and the note's text, and returns
// the timestamp (8 bytes, big endian) followed by the signature: the
// cosignature/v1 format every tlog-witness client reads.
func (c *cosigner) Sign(msg []byte) ([]byte, error) {
	t := c.now().Unix()
	if t < 0 {
		return nil, fmt.Errorf("tlog: cosign: time %d is before 1970", t)
	}
	signed := append([]byte("cosignature/v1\ntime "+strconv.FormatInt(t, 10)+"\n"), msg...)
	sig := binary.BigEndian.AppendUint64(make([]byte, 0, 8+ed25519.SignatureSize), uint64(t))
	return append(sig, ed25519.Sign(c.key, signed)...), nil
}

// NewCosigner returns a signed-note signer that cosigns checkpoints under
// name with key, in the C2SP tlog-cosignature/v1 format, timestamped by
// now (time.Now when nil). A cosignature states that the cosigner saw the
// checkpoint and that it extends every earlier one it cosigned; it can
// never pass for a checkpoint signature, as its message starts with
// "cosignature/v1" and its key id is of another type.
func NewCosigner(name string, key ed25519.PrivateKey, now func() time.Time) (note.Signer, error) {
	if err := ValidOrigin(name); err != nil {
		return nil, fmt.Errorf("tlog: cosigner name: %w", err)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("tlog: cosigning key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if now == nil {
		now = time.Now
	}
	derived := ed25519.NewKeyFromSeed(key.Seed())
	pub := derived.Public().(ed25519.PublicKey)
	return &cosigner{name: name, hash: cosignKeyHash(name, pub), key: derived, now: now}, nil
}

// cosignKeyHash is the signed-note key id of a cosignature/v1 key.
func cosignKeyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algCosignatureV1})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// CosignerVKey returns the cosignature/v1 verifier key of the cosigner
// named name whose public key is pub ("<name>+<id>+<base64 of 0x04 and
// the key>"): what --witness-key and any tlog-witness client take.
func CosignerVKey(name string, pub ed25519.PublicKey) (string, error) {
	if err := ValidOrigin(name); err != nil {
		return "", fmt.Errorf("tlog: cosigner name: %w", err)
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("tlog: cosigner key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	key := append([]byte{algCosignatureV1}, pub...)
	return fmt.Sprintf("%s+%08x+%s", name, cosignKeyHash(name, pub), base64.StdEncoding.EncodeToString(key)), nil
}

// CosignerVerifier returns the verifier of the cosignatures NewCosigner
// makes under name with the key whose public half is pub.
func CosignerVerifier(name string, pub ed25519.PublicKey) (note.Verifier, error) {
	vkey, err := CosignerVKey(name, pub)
	if err != nil {
		return nil, err
	}
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		return nil, fmt.Errorf("tlog: cosigner key: %w", err)
	}
	return v, nil
}

// AppendCosignature returns the signed checkpoint cp with a cosignature
// line of s appended, as a witness's add-checkpoint answer is appended.
// The caller must have opened cp (OpenCheckpoint) first: what s signs is
// the text cp carries.
func AppendCosignature(cp []byte, s note.Signer) ([]byte, error) {
	text, _, ok := bytes.Cut(cp, []byte("\n\n"))
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint has no signature lines", ErrMalformed)
	}
	signed, err := note.Sign(&note.Note{Text: string(text) + "\n"}, s)
	if err != nil {
		return nil, fmt.Errorf("tlog: cosign: %w", err)
	}
	_, line, _ := bytes.Cut(signed, []byte("\n\n"))
	return append(bytes.Clone(cp), line...), nil
}
