package tlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/internal/canonb64"
)

// reservedOrigin is the first line of every manifest message the same key
// signs. A checkpoint can never look like one (it has three lines and a
// final newline), and refusing the name keeps it that way.
const reservedOrigin = "toolgate-manifest-v1"

// algEd25519 is the signed-note signature type of a plain Ed25519 key.
const algEd25519 = 0x01

// maxSignatures bounds the signature lines of a checkpoint, as
// golang.org/x/mod/sumdb/note does.
const maxSignatures = 100

// ed25519Signer signs notes with a key Toolgate already holds, so no
// "PRIVATE+KEY" string has to be built from it.
type ed25519Signer struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
}

func (s *ed25519Signer) Name() string    { return s.name }
func (s *ed25519Signer) KeyHash() uint32 { return s.hash }
func (s *ed25519Signer) Sign(msg []byte) ([]byte, error) {
	return ed25519.Sign(s.key, msg), nil
}

// NewSigner returns a signed-note signer named origin that signs with key,
// under the Ed25519 key id of the signed-note spec:
// SHA-256(origin || "\n" || 0x01 || public key)[:4].
func NewSigner(origin string, key ed25519.PrivateKey) (note.Signer, error) {
	if err := ValidOrigin(origin); err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("tlog: signing key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	// Re-derive from the seed so a key whose public half was tampered
	// with cannot sign under a key id that does not match its signatures.
	derived := ed25519.NewKeyFromSeed(key.Seed())
	return &ed25519Signer{name: origin, hash: keyHash(origin, derived.Public().(ed25519.PublicKey)), key: derived}, nil
}

// keyHash is the signed-note key id of an Ed25519 key.
func keyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// VerifierFor returns the signed-note verifier of the log named origin
// whose checkpoints pub signs.
func VerifierFor(origin string, pub ed25519.PublicKey) (note.Verifier, error) {
	if err := ValidOrigin(origin); err != nil {
		return nil, err
	}
	vkey, err := note.NewEd25519VerifierKey(origin, pub)
	if err != nil {
		return nil, fmt.Errorf("tlog: log key: %w", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("tlog: log key: %w", err)
	}
	return v, nil
}

// ParseWitnessKey parses a witness's verifier key ("<name>+<hex id>+<base64
// key>") as a C2SP tlog-cosignature/v1 verifier. A plain Ed25519 vkey
// (type 0x01) is taken as the witness's cosignature key.
func ParseWitnessKey(vkey string) (note.Verifier, error) {
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		return nil, fmt.Errorf("tlog: witness key %q: %w", vkey, err)
	}
	return v, nil
}

// ValidOrigin reports whether origin can name a log: it is the first line
// of every checkpoint and the name of the key that signs them.
func ValidOrigin(origin string) error {
	switch {
	case origin == "":
		return errors.New("tlog: origin is empty")
	case !utf8.ValidString(origin):
		return errors.New("tlog: origin is not valid UTF-8")
	case strings.IndexFunc(origin, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("tlog: origin %q contains a space or control character", origin)
	case strings.Contains(origin, "+"):
		return fmt.Errorf("tlog: origin %q contains '+'", origin)
	case origin == reservedOrigin:
		return fmt.Errorf("tlog: origin %q is reserved for manifest signatures", origin)
	}
	return nil
}

// SignCheckpoint returns the signed checkpoint of a log of size entries
// with root hash root: the three-line body of C2SP tlog-checkpoint (the
// origin is the signer's name; no extension lines) and the signer's
// signature line. Ed25519 is deterministic, so signing again gives the
// same bytes.
func SignCheckpoint(s note.Signer, size uint64, root [32]byte) ([]byte, error) {
	if err := ValidOrigin(s.Name()); err != nil {
		return nil, err
	}
	signed, err := note.Sign(&note.Note{Text: checkpointBody(s.Name(), size, root)}, s)
	if err != nil {
		return nil, fmt.Errorf("tlog: sign checkpoint: %w", err)
	}
	return signed, nil
}

// checkpointBody is the canonical text of a checkpoint.
func checkpointBody(origin string, size uint64, root [32]byte) string {
	return origin + "\n" + strconv.FormatUint(size, 10) + "\n" + base64.StdEncoding.EncodeToString(root[:]) + "\n"
}

// Checkpoint is a checkpoint OpenCheckpoint verified.
type Checkpoint struct {
	Origin string   // the log's origin, the first line
	Size   uint64   // the number of entries the checkpoint commits to
	Root   [32]byte // the RFC 6962 root hash of those entries
	// Note is the signed note exactly as it was read.
	Note []byte
	// LogKey is the trusted log key whose signature verified.
	LogKey ed25519.PublicKey
	// Witnesses names each distinct trusted witness whose cosignature
	// verified, in the order their lines appear.
	Witnesses []string
}

// CheckpointPolicy says which checkpoints OpenCheckpoint accepts.
type CheckpointPolicy struct {
	// LogKeys are the keys trusted to sign the log; each is tried under
	// the origin the checkpoint names.
	LogKeys []ed25519.PublicKey
	// Witnesses are the trusted witnesses' cosignature verifiers
	// (ParseWitnessKey).
	Witnesses []note.Verifier
	// Threshold is how many distinct witnesses must have cosigned; 0
	// requires none.
	Threshold int
	// Strict requires every signature line to be verified by a key given
	// here and written in canonical base64: nothing in the note is left
	// unchecked. Proof files are opened strictly.
	Strict bool
}

// sigPrefix starts every signature line of a signed note.
const sigPrefix = "\u2014 "

// OpenCheckpoint verifies a signed checkpoint against p and parses it. The
// origin is read from the first line; one of p.LogKeys must have signed
// under that name. The body must be exactly the three canonical lines
// (origin, size without leading zeros, canonical base64 of a 32-byte root)
// and at least p.Threshold distinct witnesses must have cosigned. Errors
// wrap ErrMalformed, ErrUnknownKey, ErrBadSignature or ErrWitnessThreshold
// and say which check failed.
func OpenCheckpoint(data []byte, p CheckpointPolicy) (Checkpoint, error) {
	origin, _, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint has no origin line", ErrMalformed)
	}
	if err := ValidOrigin(string(origin)); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: checkpoint: %w", ErrMalformed, err)
	}
	logKeys, witnesses, err := p.verifiers(string(origin))
	if err != nil {
		return Checkpoint{}, err
	}
	verifiers := note.VerifierList(append(append([]note.Verifier(nil), logKeys.list...), witnesses...)...)
	n, err := note.Open(data, verifiers)
	if err != nil {
		return Checkpoint{}, openError(string(origin), err)
	}
	cp := Checkpoint{Origin: string(origin), Note: bytes.Clone(data)}
	if cp.LogKey = logKeys.signer(n.Sigs); cp.LogKey == nil {
		return Checkpoint{}, fmt.Errorf("%w: only witnesses, no trusted log key, signed the checkpoint of %s", ErrUnknownKey, origin)
	}
	if cp.Size, cp.Root, err = parseBody(cp.Origin, n.Text); err != nil {
		return Checkpoint{}, err
	}
	if p.Strict {
		if err := checkStrict(data, verifiers); err != nil {
			return Checkpoint{}, err
		}
	}
	cp.Witnesses = witnessNames(n.Sigs, witnesses)
	if len(cp.Witnesses) < p.Threshold {
		return Checkpoint{}, fmt.Errorf("%w: %d of the %d trusted witnesses cosigned, %d required",
			ErrWitnessThreshold, len(cp.Witnesses), len(witnesses), p.Threshold)
	}
	return cp, nil
}

// logVerifiers are the verifiers of the trusted log keys under one origin.
type logVerifiers struct {
	list []note.Verifier
	keys map[uint32]ed25519.PublicKey // by key hash
	name string
}

// signer returns the log key whose signature is among sigs, or nil.
func (l logVerifiers) signer(sigs []note.Signature) ed25519.PublicKey {
	for _, s := range sigs {
		if k, ok := l.keys[s.Hash]; ok && s.Name == l.name {
			return k
		}
	}
	return nil
}

// verifiers checks the policy and builds its verifiers for origin,
// dropping repeated keys (note.Open refuses two verifiers of one name and
// key hash).
func (p CheckpointPolicy) verifiers(origin string) (logVerifiers, []note.Verifier, error) {
	if len(p.LogKeys) == 0 {
		return logVerifiers{}, nil, errors.New("tlog: checkpoint policy has no log key")
	}
	l := logVerifiers{keys: make(map[uint32]ed25519.PublicKey), name: origin}
	for _, k := range p.LogKeys {
		v, err := VerifierFor(origin, k)
		if err != nil {
			return logVerifiers{}, nil, err
		}
		switch prev, seen := l.keys[v.KeyHash()]; {
		case !seen:
			l.keys[v.KeyHash()] = k
			l.list = append(l.list, v)
		case !prev.Equal(k):
			// Two keys under one 32-bit id: note.Open could not tell them apart.
			return logVerifiers{}, nil, fmt.Errorf("tlog: log keys %x and %x share the key id %08x under %s", prev, k, v.KeyHash(), origin)
		}
	}
	var ws []note.Verifier
	seen := make(map[string]bool)
	for _, w := range p.Witnesses {
		if id := w.Name() + "+" + strconv.FormatUint(uint64(w.KeyHash()), 16); !seen[id] {
			seen[id] = true
			ws = append(ws, w)
		}
	}
	if p.Threshold < 0 || p.Threshold > len(ws) {
		return logVerifiers{}, nil, fmt.Errorf("tlog: witness threshold %d is outside 0..%d, the number of witness keys", p.Threshold, len(ws))
	}
	return l, ws, nil
}

// openError says which check of note.Open failed.
func openError(origin string, err error) error {
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return fmt.Errorf("%w: no trusted log key signed the checkpoint of %s", ErrUnknownKey, origin)
	case errors.As(err, &invalid) && invalid.Name == origin:
		return fmt.Errorf("%w: the log signature (key %08x) on the checkpoint of %s does not verify", ErrBadSignature, invalid.Hash, origin)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: the cosignature of witness %s (key %08x) on the checkpoint of %s does not verify", ErrBadSignature, invalid.Name, invalid.Hash, origin)
	}
	return fmt.Errorf("%w: checkpoint: %w", ErrMalformed, err)
}

// parseBody parses a checkpoint's text, which must be exactly what
// checkpointBody writes: three lines, size without leading zeros, root in
// canonical base64.
func parseBody(origin, text string) (uint64, [32]byte, error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return 0, [32]byte{}, fmt.Errorf("%w: checkpoint body has %d lines, want 3 and no extension lines", ErrMalformed, len(lines)-1)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return 0, [32]byte{}, fmt.Errorf("%w: checkpoint size %q", ErrMalformed, lines[1])
	}
	root, err := decodeHash(lines[2])
	if err != nil {
		return 0, [32]byte{}, fmt.Errorf("%w: checkpoint root: %w", ErrMalformed, err)
	}
	if checkpointBody(origin, size, root) != text {
		return 0, [32]byte{}, fmt.Errorf("%w: checkpoint body is not in canonical form", ErrMalformed)
	}
	return size, root, nil
}

// checkStrict checks what note.Open lets through: every signature line
// must be in canonical base64, appear once, and be verified by one of
// known (note.Open ignores lines of unknown keys and skips a second line
// of a key it has seen).
func checkStrict(data []byte, known note.Verifiers) error {
	split := bytes.LastIndex(data, []byte("\n\n"))
	text, sigs := data[:split+1], string(data[split+2:])
	seen := make(map[string]bool)
	for line := range strings.Lines(sigs) {
		name, b64, _ := strings.Cut(strings.TrimPrefix(strings.TrimSuffix(line, "\n"), sigPrefix), " ")
		sig, err := decodeCanonical(b64)
		if err != nil || len(sig) < 5 {
			return fmt.Errorf("%w: signature line of %s is not canonical base64", ErrMalformed, name)
		}
		hash := binary.BigEndian.Uint32(sig)
		v, err := known.Verifier(name, hash)
		if err != nil {
			return fmt.Errorf("%w: signature line of %s (key %08x) is by no key given", ErrUnknownKey, name, hash)
		}
		id := name + "+" + strconv.FormatUint(uint64(hash), 16)
		if seen[id] {
			return fmt.Errorf("%w: key %s (%08x) signs the checkpoint twice", ErrMalformed, name, hash)
		}
		seen[id] = true
		if !v.Verify(text, sig[4:]) {
			return fmt.Errorf("%w: the signature of %s (key %08x) on the checkpoint does not verify", ErrBadSignature, name, hash)
		}
	}
	return nil
}

// witnessNames returns the distinct names of the witnesses among sigs.
func witnessNames(sigs []note.Signature, witnesses []note.Verifier) []string {
	var names []string
	for _, s := range sigs {
		for _, w := range witnesses {
			if w.Name() == s.Name && w.KeyHash() == s.Hash && !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	return names
}

// decodeHash decodes a 32-byte hash written in canonical base64.
func decodeHash(s string) ([32]byte, error) {
	b, err := decodeCanonical(s)
	if err != nil {
		return [32]byte{}, err
	}
	if len(b) != 32 {
		return [32]byte{}, fmt.Errorf("hash is %d bytes, want 32", len(b))
	}
	return [32]byte(b), nil
}

// decodeCanonical decodes standard padded base64 in the one spelling
// the encoder writes, so a respelled signature or root is refused.
func decodeCanonical(s string) ([]byte, error) {
	b, err := canonb64.Std(s)
	if err != nil {
		return nil, fmt.Errorf("not canonical base64: %w", err)
	}
	return b, nil
}
