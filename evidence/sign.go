package evidence

import (
	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/evidence/tlog"
	"github.com/toolgate/toolgate/evidence/trust"
	"github.com/toolgate/toolgate/internal/canonb64"

	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// SignatureAlgorithm is the only signature algorithm manifests use.
const SignatureAlgorithm = "ed25519"

// signingDomain starts every signed message. It keeps a manifest
// signature from being valid for any other message the same key signs,
// and names the manifest format so a later format cannot be confused
// with this one.
const signingDomain = "toolgate-manifest-v1\n"

// keyIDPrefix starts every key id KeyID returns.
const keyIDPrefix = "ed25519:"

// keyIDHexLen is the number of hex digits of the public key's SHA-256 in a
// key id. A key id only selects which trusted key to try; the signature
// check itself uses the whole key, so 64 bits are plenty.
const keyIDHexLen = 16

// Signature is a manifest's Ed25519 signature. It is stored inside the
// manifest as readable JSON:
//
//	"signature": {"algorithm": "ed25519", "key_id": "ed25519:…", "value": "<base64>"}
//
// The signed message is "toolgate-manifest-v1\n" followed by the manifest
// encoded as compact JSON (Go's encoding/json, fields in the order the
// stored manifest shows them, empty lists as []) with signature.value left
// out and signature.algorithm and signature.key_id kept. Every field is
// therefore bound, the key id included. The message is derived from the
// parsed manifest rather than from its stored bytes, so white space may
// change without invalidating the signature while any change of content
// does.
type Signature struct {
	Algorithm string `json:"algorithm"` // SignatureAlgorithm
	KeyID     string `json:"key_id"`    // KeyID of the signing key
	// Value is the standard base64 (with padding) of the 64-byte
	// signature. It is empty only while the signed message is derived.
	Value string `json:"value,omitempty"`
}

// Signer signs manifests with one Ed25519 private key. It is safe for
// concurrent use.
type Signer struct {
	key   ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
}

// NewSigner returns a Signer for key, which must be a well-formed Ed25519
// private key: 64 bytes whose second half is the public key of the first.
func NewSigner(key ed25519.PrivateKey) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("evidence: signing key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	// A key whose halves disagree would sign with one key while its id
	// names another, so every signature would fail verification.
	derived := ed25519.NewKeyFromSeed(key.Seed())
	if !bytes.Equal(derived, key) {
		return nil, errors.New("evidence: signing key is corrupt: its public half does not match its seed")
	}
	pub := derived.Public().(ed25519.PublicKey)
	return &Signer{key: derived, pub: pub, keyID: KeyID(pub)}, nil
}

// CheckpointSigner returns a signer of the transparency log's checkpoints
// named origin, with the same key: a log is signed by the key of the
// manifests it commits to, so one public key checks both. The two kinds of
// signed message cannot be confused: a manifest's starts with
// "toolgate-manifest-v1\n", which tlog.NewSigner refuses as an origin.
func (s *Signer) CheckpointSigner(origin string) (note.Signer, error) {
	return tlog.NewSigner(origin, s.key)
}

// KeyID returns the id of the Signer's key, as KeyID computes it.
func (s *Signer) KeyID() string { return s.keyID }

// PublicKey returns the public key that verifies the Signer's signatures.
func (s *Signer) PublicKey() ed25519.PublicKey { return bytes.Clone(s.pub) }

// Sign signs m and sets m.Signature, replacing any signature it had. It
// refuses a manifest that ParseManifest would reject, so that nothing
// unverifiable is ever signed; on error m is left unsigned.
//
// The signature covers every field of the manifest (see Signature).
// Changing m afterwards invalidates it.
func (s *Signer) Sign(m *Manifest) error {
	m.Signature = nil
	if err := m.check(); err != nil {
		return fmt.Errorf("evidence: sign manifest: %w", err)
	}
	m.Signature = &Signature{Algorithm: SignatureAlgorithm, KeyID: s.keyID}
	msg, err := signedMessage(*m)
	if err != nil {
		m.Signature = nil
		return err
	}
	m.Signature.Value = base64.StdEncoding.EncodeToString(ed25519.Sign(s.key, msg))
	return nil
}

// signedMessage returns the bytes a manifest's signature is computed over,
// as Signature documents them.
func signedMessage(m Manifest) ([]byte, error) {
	if m.Signature != nil {
		sig := *m.Signature
		sig.Value = ""
		m.Signature = &sig
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("evidence: encode manifest for signing: %w", err)
	}
	return append([]byte(signingDomain), body...), nil
}

// verifySignature reports whether m's signature was made by pub. The
// caller has checked that m has a signature. A manifest that cannot be
// re-encoded cannot have been signed, so it does not verify.
func verifySignature(pub ed25519.PublicKey, m Manifest) bool {
	sig, err := canonb64.Std(m.Signature.Value)
	if err != nil {
		return false
	}
	msg, err := signedMessage(m)
	if err != nil {
		return false
	}
	return ed25519.Verify(pub, msg, sig)
}

// CheckSignature returns nil when m is signed by pub, and otherwise says
// why not: unsigned, signed by another key, or a signature that does not
// match the manifest's content.
func CheckSignature(pub ed25519.PublicKey, m Manifest) error {
	switch {
	case len(pub) != ed25519.PublicKeySize:
		return fmt.Errorf("evidence: public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	case m.Signature == nil:
		return errors.New("evidence: the manifest is not signed")
	case m.Signature.KeyID != KeyID(pub):
		return fmt.Errorf("evidence: the manifest is signed by key %s, not %s", m.Signature.KeyID, KeyID(pub))
	case !verifySignature(pub, m):
		return fmt.Errorf("evidence: the signature by key %s does not match the manifest's content", m.Signature.KeyID)
	}
	return nil
}

// CheckSignatureWith returns nil when m is signed by the key its key_id
// names among those keys trusts: one signature check, whichever of the
// trusted keys signed. Otherwise the error wraps trust.ErrTampered, and
// beside it trust.ErrUnsealed for an unsigned manifest or
// trust.ErrUntrustedKey for one signed by a key keys does not trust; a
// signature that does not match the manifest's content wraps neither. A
// nil keys trusts nothing.
func CheckSignatureWith(keys *trust.Keyring, m Manifest) error {
	if m.Signature == nil {
		return &signatureError{msg: "the manifest is not signed", kind: trust.ErrUnsealed}
	}
	id := m.Signature.KeyID
	pub, ok := keys.PublicKey(id)
	if !ok {
		return &signatureError{msg: fmt.Sprintf("the manifest is signed by key %s, which is not trusted", id), kind: trust.ErrUntrustedKey}
	}
	if !verifySignature(pub, m) {
		return &signatureError{msg: fmt.Sprintf("the signature by key %s does not match the manifest's content", id)}
	}
	return nil
}

// signatureError is why CheckSignatureWith refuses a manifest: tampering,
// and kind, when set, says which.
type signatureError struct {
	msg  string
	kind error
}

func (e *signatureError) Error() string { return "evidence: " + e.msg }

func (e *signatureError) Unwrap() []error {
	if e.kind == nil {
		return []error{trust.ErrTampered}
	}
	return []error{trust.ErrTampered, e.kind}
}

// EncodeManifest returns the bytes a gateway stores as manifest.json:
// indented JSON and a final newline. It refuses a manifest that
// ParseManifest would reject, so that stored evidence can always be
// verified.
func EncodeManifest(m Manifest) ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("evidence: encode manifest: %w", err)
	}
	// MarshalJSON's compact bytes are what json.Marshal(m) returns, without
	// the second pass json.Marshal makes over a Marshaler's output.
	compact, err := m.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("evidence: encode manifest: %w", err)
	}
	// The same bytes as json.MarshalIndent, for a third of the work.
	data := AppendIndent(make([]byte, 0, len(compact)+len(compact)/2), compact)
	return append(data, '\n'), nil
}

// KeyID returns a short, stable id of an Ed25519 public key:
// "ed25519:" followed by the first 16 hex digits of the SHA-256 of the
// 32-byte key. Manifests name their signing key by it.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return keyIDPrefix + hex.EncodeToString(sum[:])[:keyIDHexLen]
}

// validKeyID reports whether id has the form KeyID returns.
func validKeyID(id string) bool {
	hexPart, ok := strings.CutPrefix(id, keyIDPrefix)
	if !ok || len(hexPart) != keyIDHexLen {
		return false
	}
	for i := range len(hexPart) {
		if c := hexPart[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ParsePrivateKey decodes an Ed25519 private key in either of two forms:
// a PEM "PRIVATE KEY" block holding PKCS #8, as
// `openssl genpkey -algorithm ed25519` and `toolgate evidence keygen`
// write it, or the standard base64 of the 32-byte seed, convenient in an
// environment variable. Surrounding white space is ignored.
//
// Errors describe the problem without echoing any of data, which may be a
// secret.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	der, isPEM, err := decodeKey(data, "PRIVATE KEY")
	if err != nil {
		return nil, fmt.Errorf("evidence: private key: %w", err)
	}
	if !isPEM {
		if len(der) != ed25519.SeedSize {
			return nil, fmt.Errorf("evidence: private key: base64 seed is %d bytes, want %d", len(der), ed25519.SeedSize)
		}
		return ed25519.NewKeyFromSeed(der), nil
	}
	// The parser's own message is left out: it may quote the input.
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, errors.New("evidence: private key: PEM block is not valid PKCS #8")
	}
	ed, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("evidence: private key: PKCS #8 key is %T, want an Ed25519 key", key)
	}
	return ed, nil
}

// EncodePrivateKey returns key as ParsePrivateKey's first form: a PEM
// "PRIVATE KEY" block holding PKCS #8, the file `toolgate evidence keygen`
// writes and the gateway creates when no key is configured.
func EncodePrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("evidence: private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("evidence: private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePublicKey decodes an Ed25519 public key in either of two forms: a
// PEM "PUBLIC KEY" block holding PKIX (SubjectPublicKeyInfo), as
// `openssl pkey -pubout` and `toolgate evidence pubkey` write it, or the
// standard base64 of the 32-byte key. Text before a PEM block, such as a
// comment line naming the key id, is ignored.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	der, isPEM, err := decodeKey(data, "PUBLIC KEY")
	if err != nil {
		return nil, fmt.Errorf("evidence: public key: %w", err)
	}
	if !isPEM {
		if len(der) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("evidence: public key: base64 key is %d bytes, want %d", len(der), ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(der), nil
	}
	key, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("evidence: public key: PEM block is not a valid PKIX public key")
	}
	ed, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("evidence: public key: PKIX key is %T, want an Ed25519 key", key)
	}
	return ed, nil
}

// decodeKey returns the DER bytes of the single PEM block of type
// blockType in data, or, when data holds no PEM block, the bytes of its
// standard base64. It reports which of the two it found.
func decodeKey(data []byte, blockType string) (der []byte, isPEM bool, err error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, false, errors.New("empty")
	}
	if block, rest := pem.Decode(data); block != nil {
		switch {
		case block.Type == "ENCRYPTED "+blockType:
			return nil, false, fmt.Errorf("PEM block %q is encrypted; decrypt it first (openssl pkey)", block.Type)
		case block.Type != blockType:
			return nil, false, fmt.Errorf("PEM block type is %q, want %q", block.Type, blockType)
		case len(block.Headers) > 0:
			return nil, false, fmt.Errorf("PEM block %q has headers, which a plain key never has", block.Type)
		case len(bytes.TrimSpace(rest)) > 0:
			return nil, false, fmt.Errorf("unexpected data after the PEM block %q", block.Type)
		}
		return block.Bytes, true, nil
	}
	if bytes.Contains(data, []byte("-----BEGIN")) {
		return nil, false, errors.New("PEM block is malformed")
	}
	// A key file is the operator's, not a record read back: a key wrapped
	// over several lines is still the key.
	raw, err := base64.StdEncoding.Strict().DecodeString(string(data))
	if err != nil {
		return nil, false, fmt.Errorf("neither a PEM %q block nor standard base64", blockType)
	}
	return raw, false, nil
}

// DeriveKey returns a 32-byte key for another purpose, derived from the
// signing key's seed with HMAC-SHA256 under the label purpose: stable for
// one signing key, and telling nothing about it.
func (s *Signer) DeriveKey(purpose string) []byte {
	mac := hmac.New(sha256.New, s.key.Seed())
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

// recordMACPurpose labels the key Sealer derives for record MACs.
const recordMACPurpose = "toolgate record seal mac v1"

// Sealer returns the sealer of the records the gateway reads back and
// acts on (see package trust): it signs with this key and MACs with a key
// derived from it, so one signing key gives a gateway everything it needs
// to authenticate its own store.
func (s *Signer) Sealer() (*trust.Sealer, error) {
	return trust.NewSealer(s.key, s.RecordMACKey())
}

// RecordMACKey is the MAC key Sealer derives from the signing key: the
// key that opens the records this gateway MACs when no shared key is set.
func (s *Signer) RecordMACKey() []byte { return s.DeriveKey(recordMACPurpose) }

// SealerWithMAC is Sealer with macKey for the MACs instead of the derived
// key: replicas configured with one shared MAC key can open each other's
// MACed records.
func (s *Signer) SealerWithMAC(macKey []byte) (*trust.Sealer, error) {
	return trust.NewSealer(s.key, macKey)
}
