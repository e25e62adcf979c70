package evidence

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/canonb64"
)

// ManifestVersion is the manifest format this package writes and reads.
const ManifestVersion = 1

// Outcomes a manifest records.
const (
	OutcomeCompleted = "completed" // the request ran to a response
	OutcomeFailed    = "failed"    // the request stopped on an error
	// OutcomeInterrupted: the recovery sweep found the request dispatched
	// and abandoned (its gateway stopped, or lost its store, before the
	// response): the tool may have run; it is never run again.
	OutcomeInterrupted = "interrupted"
)

// Manifest is the last artifact written for a request. It records the
// digest of every other artifact, so the set can be verified later, and
// which engine and policy set produced them.
type Manifest struct {
	Version              int    `json:"version"` // ManifestVersion
	RequestID            string `json:"request_id"`
	CanonicalRequestHash string `json:"canonical_request_hash"`
	EngineRef            string `json:"engine_ref"`
	PolicySetDigest      string `json:"policy_set_digest"`
	Outcome              string `json:"outcome"` // one of the Outcome constants
	Error                string `json:"error,omitempty"`
	// Recovered, when set, says that this manifest was written by recovery
	// (a retry or the sweep) from the artifacts found stored, not by the
	// gateway that ran the request, and what could not be recovered.
	Recovered  string           `json:"recovered,omitempty"`
	Artifacts  []ArtifactDigest `json:"artifacts"`
	Redactions []Redaction      `json:"redactions"`
	// FingerprintKeyID names the key of the redaction fingerprints:
	// fingerprints under the same id can be compared.
	FingerprintKeyID string    `json:"fingerprint_key_id,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	// Signature is nil for an unsigned manifest. Signer.Sign sets it; it
	// covers every other field.
	Signature *Signature `json:"signature,omitempty"`
}

// ArtifactDigest identifies the exact content of one stored artifact.
type ArtifactDigest struct {
	Key    string `json:"key"`
	SHA256 string `json:"sha256"` // lowercase hex
	Size   int64  `json:"size"`
}

// Redaction records one secret removed from an artifact before it was
// stored. It says where, and which secret only as a keyed fingerprint:
// the same secret leaked in many calls has the same fingerprint, and no
// one without the key can test a guess against it.
type Redaction struct {
	Rule     string `json:"rule"`     // the redaction rule that matched
	Artifact string `json:"artifact"` // the artifact it was removed from
	Path     string `json:"path"`     // the JSON path of the field, empty for text artifacts
	Offset   int64  `json:"offset"`   // byte offset of the secret within the field (or text)
	// Fingerprint is hex HMAC-SHA256 of the secret under the gateway's
	// fingerprint key (see Manifest.FingerprintKeyID).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Omitted, when set, makes the entry a count: this many more secrets
	// of Rule were removed from Artifact than the report lists (see
	// RedactionReport). Path, Offset and Fingerprint are then empty.
	Omitted int64 `json:"omitted,omitempty"`
}

// Digest returns the digest of data stored under key.
func Digest(key string, data []byte) ArtifactDigest {
	sum := sha256.Sum256(data)
	return ArtifactDigest{Key: key, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// MarshalJSON encodes m with empty lists as [] rather than null, so readers
// of the evidence need not tell "none" from "absent".
func (m Manifest) MarshalJSON() ([]byte, error) {
	type plain Manifest // no methods, so no recursion
	p := plain(m)
	if p.Artifacts == nil {
		p.Artifacts = []ArtifactDigest{}
	}
	if p.Redactions == nil {
		p.Redactions = []Redaction{}
	}
	return json.Marshal(p)
}

// ParseManifest decodes and checks a manifest read from a store. Evidence
// may have been tampered with, so it is strict: the version must be
// ManifestVersion; unknown fields, fields given twice and trailing data are
// rejected; every artifact must be a distinct key under the manifest's own
// request prefix with a well-formed digest; and a signature, when present,
// must be well-formed (whether it verifies is Verify's business).
// Artifacts and Redactions are never nil in the result.
func ParseManifest(data []byte) (Manifest, error) {
	if m, ok := decodeManifestFast(data); ok {
		return checkedManifest(m)
	}
	return parseManifestStrict(data)
}

// parseManifestStrict is ParseManifest by encoding/json's strict decode,
// for every manifest decodeManifestFast declines.
func parseManifestStrict(data []byte) (Manifest, error) {
	m, err := decodeManifestStrict(data)
	if err != nil {
		return Manifest{}, err
	}
	return checkedManifest(m)
}

// decodeManifestStrict is the strict decode of parseManifestStrict, before
// the checks on content both paths share.
func decodeManifestStrict(data []byte) (Manifest, error) {
	// The version is read first so that a newer manifest is reported as
	// such rather than as one with unknown fields. Unmarshal also checks
	// the whole input is one JSON value, so the Decoder below need not.
	var head struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Manifest{}, fmt.Errorf("evidence: manifest: %w", err)
	}
	if head.Version == nil {
		return Manifest{}, errors.New("evidence: manifest: version is missing")
	}
	if *head.Version != ManifestVersion {
		return Manifest{}, fmt.Errorf("evidence: manifest: version %d is not supported (want %d)", *head.Version, ManifestVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("evidence: manifest: %w", err)
	}
	if err := rejectDuplicateNames(data); err != nil {
		return Manifest{}, fmt.Errorf("evidence: manifest: %w", err)
	}
	return m, nil
}

// checkedManifest completes a decoded manifest as ParseManifest returns
// it, or says why it is refused.
func checkedManifest(m Manifest) (Manifest, error) {
	if m.Artifacts == nil {
		m.Artifacts = []ArtifactDigest{}
	}
	if m.Redactions == nil {
		m.Redactions = []Redaction{}
	}
	if err := m.check(); err != nil {
		return Manifest{}, fmt.Errorf("evidence: manifest: %w", err)
	}
	return m, nil
}

// check enforces the rules ParseManifest documents beyond JSON syntax.
func (m *Manifest) check() error {
	if validRequestID(m.RequestID) != nil {
		return fmt.Errorf("request_id %q is not a single valid key segment", m.RequestID)
	}
	switch m.Outcome {
	case OutcomeCompleted, OutcomeFailed, OutcomeInterrupted:
	default:
		return fmt.Errorf("outcome %q is not %q, %q or %q", m.Outcome, OutcomeCompleted, OutcomeFailed, OutcomeInterrupted)
	}
	if m.CreatedAt.IsZero() {
		return errors.New("created_at is missing")
	}
	prefix := RequestPrefix(m.RequestID)
	self := Key(m.RequestID, ArtifactManifest)
	seen := make(map[string]bool, len(m.Artifacts))
	for i, a := range m.Artifacts {
		switch {
		case ValidKey(a.Key) != nil:
			return fmt.Errorf("artifacts[%d].key %q is not a valid key", i, a.Key)
		case !strings.HasPrefix(a.Key, prefix):
			return fmt.Errorf("artifacts[%d].key %q is not under %q", i, a.Key, prefix)
		case a.Key == self:
			return fmt.Errorf("artifacts[%d].key %q is the manifest itself", i, a.Key)
		case seen[a.Key]:
			return fmt.Errorf("artifacts[%d].key %q is listed twice", i, a.Key)
		case !isSHA256Hex(a.SHA256):
			return fmt.Errorf("artifacts[%d].sha256 %q is not 64 lowercase hex digits", i, a.SHA256)
		case a.Size < 0:
			return fmt.Errorf("artifacts[%d].size %d is negative", i, a.Size)
		}
		seen[a.Key] = true
	}
	for i, r := range m.Redactions {
		if r.Offset < 0 {
			return fmt.Errorf("redactions[%d].offset %d is negative", i, r.Offset)
		}
		if r.Omitted < 0 {
			return fmt.Errorf("redactions[%d].omitted %d is negative", i, r.Omitted)
		}
	}
	if sig := m.Signature; sig != nil {
		switch {
		case sig.Algorithm != SignatureAlgorithm:
			return fmt.Errorf("signature.algorithm %q is not %q", sig.Algorithm, SignatureAlgorithm)
		case !validKeyID(sig.KeyID):
			return fmt.Errorf("signature.key_id %q is not %q followed by %d lowercase hex digits", sig.KeyID, keyIDPrefix, keyIDHexLen)
		}
		raw, err := canonb64.Std(sig.Value)
		if err != nil || len(raw) != ed25519.SignatureSize {
			return fmt.Errorf("signature.value is not the standard base64 of a %d-byte signature", ed25519.SignatureSize)
		}
	}
	return nil
}

// rejectDuplicateNames returns an error naming the first member name that
// occurs twice in one object of data, which must be valid JSON.
// encoding/json keeps the last of duplicates and matches names without
// regard to case, so a person reading a manifest with duplicates could see
// one value while verification uses another.
//
// Names are compared with strings.EqualFold, the rule encoding/json
// matches them by, pairwise within each object. Called after a decode that
// rejects unknown fields, an object holds at most a dozen distinct names
// before the first duplicate, which keeps that cheap.
func rejectDuplicateNames(data []byte) error {
	type object struct {
		names    []string // nil for an array
		wantName bool     // the next string is a member name
		isObject bool
	}
	var stack []object
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{':
			stack = append(stack, object{isObject: true, wantName: true})
		case '[':
			stack = append(stack, object{})
		case '}', ']':
			if len(stack) == 0 {
				return errors.New("malformed JSON: a closing bracket opens nothing")
			}
			stack = stack[:len(stack)-1]
		case ',':
			if len(stack) == 0 {
				return errors.New("malformed JSON: a comma outside any object or array")
			}
			if top := &stack[len(stack)-1]; top.isObject {
				top.wantName = true
			}
		case '"':
			end := i + 1
			for end < len(data) && data[end] != '"' {
				if data[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(data) {
				return errors.New("malformed JSON: an unterminated string")
			}
			if len(stack) == 0 || !stack[len(stack)-1].wantName {
				i = end
				continue
			}
			top := &stack[len(stack)-1]
			name, err := memberName(data[i : end+1])
			if err != nil {
				return err
			}
			for _, seen := range top.names {
				if strings.EqualFold(seen, name) {
					return fmt.Errorf("field %q is given more than once", name)
				}
			}
			top.names = append(top.names, name)
			top.wantName = false
			i = end
		}
	}
	return nil
}

// memberName decodes the quoted member name q. A name of printable ASCII
// without escapes, which is every name a record defines, is its bytes;
// any other is decoded as encoding/json decodes it, so that names compare
// as the decoder matches them.
func memberName(q []byte) (string, error) {
	plain := true
	for _, c := range q[1 : len(q)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return string(q[1 : len(q)-1]), nil
	}
	var name string
	err := json.Unmarshal(q, &name)
	return name, err
}

func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
