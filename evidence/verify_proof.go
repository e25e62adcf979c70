package evidence

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/evidence/tlog"
	"golang.org/x/mod/sumdb/note"
)

// ErrInvalidProof is returned (wrapped) by VerifyProof for a proof that
// does not prove what it claims: malformed, altered, signed by no trusted
// key, short of witnesses, or of a manifest its entry does not commit to.
var ErrInvalidProof = errors.New("evidence: invalid proof")

// ProofOptions says whom VerifyProof trusts.
type ProofOptions struct {
	// LogKeys are the gateways' public keys: one must sign the checkpoint
	// and one the manifest.
	LogKeys []ed25519.PublicKey
	// Witnesses are the trusted witnesses' cosignature verifiers
	// (tlog.ParseWitnessKey).
	Witnesses []note.Verifier
	// WitnessThreshold is how many of Witnesses must have cosigned the
	// checkpoint; 0 requires none.
	WitnessThreshold int
}

// ProofReport is what a valid proof proves: that the manifest of
// RequestID, with this outcome, is entry Index of the log Origin, whose
// checkpoint of CheckpointSize entries the log key and Witnesses signed.
type ProofReport struct {
	RequestID       string   `json:"request_id"`
	Outcome         string   `json:"outcome"`
	Origin          string   `json:"origin"`
	Index           uint64   `json:"index"`
	CheckpointSize  uint64   `json:"checkpoint_size"`
	KeyID           string   `json:"key_id"`            // the key that signed the manifest
	CheckpointKeyID string   `json:"checkpoint_key_id"` // the key that signed the checkpoint (KeyID form)
	Gateway         string   `json:"gateway"`           // the gateway that logged the completion
	Witnesses       []string `json:"witnesses"`         // the trusted witnesses that cosigned
	ManifestSHA256  string   `json:"manifest_sha256"`
	// Manifest is the proven manifest, whose artifact digests the proof
	// file carries.
	Manifest Manifest `json:"manifest"`
}

// VerifyProof checks a proof file that Prove wrote, offline. Every byte
// of the file is checked: the tlog-proof, its checkpoint (each signature
// line must verify under LogKeys or Witnesses) and its extra data are
// parsed strictly; the entry must be included under the checkpoint; the
// manifest must be the one the entry commits to, and signed by one of
// LogKeys, so a proof of an unsigned manifest fails. Errors about the
// proof wrap ErrInvalidProof; any other error is about opts.
func VerifyProof(data []byte, opts ProofOptions) (ProofReport, error) {
	if err := opts.check(); err != nil {
		return ProofReport{}, err
	}
	// The checks that need no signature come first: most alterations
	// fail there, before any public-key operation.
	p, err := tlog.ParseProof(data)
	if err != nil {
		return ProofReport{}, invalidProof(err)
	}
	x, err := parseExtra(p.Extra)
	if err != nil {
		return ProofReport{}, invalidProof(err)
	}
	e, m, err := parseProven(x)
	if err != nil {
		return ProofReport{}, invalidProof(err)
	}
	cp, err := tlog.OpenCheckpoint(p.Checkpoint, tlog.CheckpointPolicy{
		LogKeys: opts.LogKeys, Witnesses: opts.Witnesses, Threshold: opts.WitnessThreshold, Strict: true,
	})
	if err != nil {
		return ProofReport{}, invalidProof(err)
	}
	if err := tlog.VerifyInclusion(p, cp, x.Entry); err != nil {
		return ProofReport{}, invalidProof(err)
	}
	if err := checkManifestSignature(m, opts.LogKeys); err != nil {
		return ProofReport{}, invalidProof(err)
	}
	return ProofReport{
		RequestID: e.RequestID, Outcome: e.Outcome, Origin: cp.Origin, Index: p.Index, CheckpointSize: cp.Size,
		KeyID: m.Signature.KeyID, CheckpointKeyID: KeyID(cp.LogKey), Gateway: e.Gateway, Witnesses: cp.Witnesses, ManifestSHA256: e.ManifestSHA256, Manifest: m,
	}, nil
}

// parseProven parses the entry and manifest a proof carries and checks
// that the manifest is the one the completion entry commits to.
func parseProven(x proofExtra) (tlog.Entry, Manifest, error) {
	e, err := tlog.ParseEntry(x.Entry)
	if err != nil {
		return tlog.Entry{}, Manifest{}, err
	}
	if e.Kind != tlog.KindCompletion {
		return tlog.Entry{}, Manifest{}, fmt.Errorf("the entry is a %s, not a completion", e.Kind)
	}
	if got := sha256Hex(x.Manifest); got != e.ManifestSHA256 {
		return tlog.Entry{}, Manifest{}, fmt.Errorf("the manifest's sha256 is %s, the entry commits to %s", got, e.ManifestSHA256)
	}
	m, err := ParseManifest(x.Manifest)
	if err != nil {
		return tlog.Entry{}, Manifest{}, err
	}
	// The entry is a function of the manifest's bytes and the gateway
	// that logged it: request id, outcome and key id must be the
	// manifest's.
	want, err := logEntry(tlog.KindCompletion, x.Manifest, e.Gateway)
	if err != nil || string(want) != string(x.Entry) {
		return tlog.Entry{}, Manifest{}, fmt.Errorf("the entry's request id, outcome or key id is not the manifest's (request %q)", m.RequestID)
	}
	return e, m, nil
}

// checkManifestSignature checks that m is signed by one of keys.
func checkManifestSignature(m Manifest, keys []ed25519.PublicKey) error {
	if m.Signature == nil {
		return errors.New("the manifest is not signed, so nothing shows which gateway wrote it")
	}
	for _, k := range keys {
		if KeyID(k) == m.Signature.KeyID {
			return CheckSignature(k, m)
		}
	}
	return fmt.Errorf("the manifest is signed by key %s, which is not trusted", m.Signature.KeyID)
}

func invalidProof(err error) error { return fmt.Errorf("%w: %w", ErrInvalidProof, err) }

// check refuses options no proof could be checked against.
func (o ProofOptions) check() error {
	if len(o.LogKeys) == 0 {
		return errors.New("evidence: verify proof: no log key given")
	}
	for _, k := range o.LogKeys {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("evidence: verify proof: a log key is %d bytes, want %d", len(k), ed25519.PublicKeySize)
		}
	}
	if o.WitnessThreshold < 0 || o.WitnessThreshold > len(o.Witnesses) {
		return fmt.Errorf("evidence: verify proof: witness threshold %d is outside 0..%d, the number of witness keys", o.WitnessThreshold, len(o.Witnesses))
	}
	return nil
}
