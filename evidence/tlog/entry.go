package tlog

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/toolgate/toolgate/internal/canonb64"
)

// The kinds of log entry.
const (
	// KindClaim is logged once a request's request.json is in the store.
	KindClaim = "claim"
	// KindCompletion is logged once a request's manifest.json is in the
	// store.
	KindCompletion = "completion"
	// KindApproval is logged once a request's approval.json, a human's
	// decision on a call policy held back, is in the store: a commitment
	// made before anything it approves can run.
	KindApproval = "approval"
	// KindWitness is logged once this log's gateway has witnessed a
	// checkpoint of another replica's log (a peer sharing the store): it
	// checked the checkpoint's signature and that it extends the last one
	// it witnessed, and cosigned it. It belongs to no request; it commits,
	// under a second key and in a second log, to the size the peer's log
	// had reached, so a rollback of that log alone shows.
	KindWitness = "witness"
)

// Entry versions, the "v" every entry carries. Claims and completions
// carry EntryVersion, as they always have, so that the logs and proofs
// written before approvals existed stay byte for byte what they were.
// Approval entries carry ApprovalEntryVersion: a verifier that predates
// them refuses such an entry by its version ("entry version 2, want 1")
// and reports the log inconsistent, rather than skip a human's decision.
// Witness entries carry WitnessEntryVersion, for the same reason.
const (
	EntryVersion         = 1
	ApprovalEntryVersion = 2
	WitnessEntryVersion  = 3
)

// versionOf returns the version entries of kind carry.
func versionOf(kind string) int {
	switch kind {
	case KindApproval:
		return ApprovalEntryVersion
	case KindWitness:
		return WitnessEntryVersion
	}
	return EntryVersion
}

// Limits on an entry's fields. With them no entry Marshal accepts can
// reach MaxEntrySize, far below the 65,535 bytes an entry bundle allows.
const (
	MaxRequestIDLen = 128  // bytes of request_id
	MaxGatewayLen   = 256  // bytes of gateway
	MaxKeyIDLen     = 64   // bytes of key_id
	MaxApproverLen  = 256  // bytes of approver
	MaxOriginLen    = 256  // bytes of a witnessed origin
	MaxEntrySize    = 2048 // bytes of a marshalled entry; ParseEntry refuses more
)

// canonicalHashPrefix starts a canonical_request_hash, which is copied
// verbatim from request.json, where it reads "sha256:<hex>".
const canonicalHashPrefix = "sha256:"

// Entry is one log entry: a claim (a request was admitted and its
// request.json stored), a completion (its manifest.json stored), an
// approval (its approval.json stored), or a witness (a peer log's
// checkpoint witnessed). Which fields belong to which kind is fixed;
// Marshal refuses a field of another kind.
type Entry struct {
	Kind string // KindClaim, KindCompletion, KindApproval or KindWitness
	// RequestID is the request's id, 1..MaxRequestIDLen bytes; empty in a
	// witness entry, which belongs to no request.
	RequestID string
	// CanonicalRequestHash (claim) is request.json's
	// canonical_request_hash: "sha256:" and 64 lowercase hex digits.
	CanonicalRequestHash string
	// RequestSHA256 (claim) is the SHA-256 of the stored request.json
	// bytes, 64 lowercase hex digits.
	RequestSHA256 string
	// ReceivedAt (claim) is when the gateway received the call. It is
	// written in UTC with RFC 3339 nanosecond precision.
	ReceivedAt time.Time
	// Gateway names the gateway that wrote the artifact:
	// "toolgate/<version>@<instance>".
	Gateway string
	// ManifestSHA256 (completion) is the SHA-256 of the stored
	// manifest.json bytes, 64 lowercase hex digits.
	ManifestSHA256 string
	// Outcome (completion) is the manifest's outcome: "completed",
	// "failed" or "interrupted".
	Outcome string
	// KeyID (completion) is the id of the key that signed the manifest;
	// empty when the manifest is unsigned.
	KeyID string
	// ApprovalID (approval) is the approval decided: "apr_" and 26
	// lowercase base32 characters.
	ApprovalID string
	// ApprovalSHA256 (approval) is the SHA-256 of the stored
	// approval.json bytes, 64 lowercase hex digits.
	ApprovalSHA256 string
	// Decision (approval) is "approve", "deny" or "expired".
	Decision string
	// Approver (approval) is who decided: the approving caller, or the
	// gateway for an expiry.
	Approver string
	// DecidedAt (approval) is when, written as ReceivedAt is.
	DecidedAt time.Time
	// PeerOrigin (witness) is the origin of the peer log witnessed, a
	// valid checkpoint origin of 1..MaxOriginLen bytes; PeerSize (at
	// least 1) and PeerRoot are the size and root hash of its checkpoint.
	PeerOrigin string
	PeerSize   uint64
	PeerRoot   Hash
}

// claimJSON and completionJSON fix the field order of each kind: the
// encoder writes struct fields in declaration order.
type claimJSON struct {
	V                    int    `json:"v"`
	Kind                 string `json:"kind"`
	RequestID            string `json:"request_id"`
	CanonicalRequestHash string `json:"canonical_request_hash"`
	RequestSHA256        string `json:"request_sha256"`
	ReceivedAt           string `json:"received_at"`
	Gateway              string `json:"gateway"`
}

type completionJSON struct {
	V              int    `json:"v"`
	Kind           string `json:"kind"`
	RequestID      string `json:"request_id"`
	ManifestSHA256 string `json:"manifest_sha256"`
	Outcome        string `json:"outcome"`
	KeyID          string `json:"key_id,omitempty"`
	Gateway        string `json:"gateway"`
}

type approvalJSON struct {
	V              int    `json:"v"`
	Kind           string `json:"kind"`
	RequestID      string `json:"request_id"`
	ApprovalID     string `json:"approval_id"`
	ApprovalSHA256 string `json:"approval_sha256"`
	Decision       string `json:"decision"`
	Approver       string `json:"approver"`
	DecidedAt      string `json:"decided_at"`
	Gateway        string `json:"gateway"`
}

type witnessJSON struct {
	V       int    `json:"v"`
	Kind    string `json:"kind"`
	Origin  string `json:"origin"`
	Size    uint64 `json:"size"`
	Root    string `json:"root"`
	Gateway string `json:"gateway"`
}

// wireEntry receives every kind on parsing.
type wireEntry struct {
	V                    int    `json:"v"`
	Kind                 string `json:"kind"`
	RequestID            string `json:"request_id"`
	CanonicalRequestHash string `json:"canonical_request_hash"`
	RequestSHA256        string `json:"request_sha256"`
	ReceivedAt           string `json:"received_at"`
	Gateway              string `json:"gateway"`
	ManifestSHA256       string `json:"manifest_sha256"`
	Outcome              string `json:"outcome"`
	KeyID                string `json:"key_id"`
	ApprovalID           string `json:"approval_id"`
	ApprovalSHA256       string `json:"approval_sha256"`
	Decision             string `json:"decision"`
	Approver             string `json:"approver"`
	DecidedAt            string `json:"decided_at"`
	Origin               string `json:"origin"`
	Size                 uint64 `json:"size"`
	Root                 string `json:"root"`
}

// Marshal returns the entry's canonical bytes: compact JSON, the fields of
// its kind in a fixed order, no HTML escaping, no trailing newline. The
// same entry always marshals to the same bytes, which is what the log
// commits to.
func (e Entry) Marshal() ([]byte, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	var v any
	switch e.Kind {
	case KindClaim:
		v = claimJSON{EntryVersion, e.Kind, e.RequestID, e.CanonicalRequestHash, e.RequestSHA256,
			e.ReceivedAt.UTC().Format(time.RFC3339Nano), e.Gateway}
	case KindCompletion:
		v = completionJSON{EntryVersion, e.Kind, e.RequestID, e.ManifestSHA256, e.Outcome, e.KeyID, e.Gateway}
	case KindWitness:
		v = witnessJSON{WitnessEntryVersion, e.Kind, e.PeerOrigin, e.PeerSize, base64.StdEncoding.EncodeToString(e.PeerRoot[:]), e.Gateway}
	default:
		v = approvalJSON{ApprovalEntryVersion, e.Kind, e.RequestID, e.ApprovalID, e.ApprovalSHA256, e.Decision,
			e.Approver, e.DecidedAt.UTC().Format(time.RFC3339Nano), e.Gateway}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("tlog: entry: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ParseEntry parses the bytes of one log entry. It is strict: it accepts
// only bytes that Marshal of the parsed entry reproduces exactly, so
// whitespace, reordered, duplicate or unknown fields, other escapes and
// non-canonical times are all errors wrapping ErrMalformed.
func ParseEntry(data []byte) (Entry, error) {
	if len(data) > MaxEntrySize {
		return Entry{}, fmt.Errorf("%w: entry is %d bytes, more than %d", ErrMalformed, len(data), MaxEntrySize)
	}
	var w wireEntry
	if err := json.Unmarshal(data, &w); err != nil {
		return Entry{}, fmt.Errorf("%w: entry: %w", ErrMalformed, err)
	}
	if want := versionOf(w.Kind); w.V != want {
		return Entry{}, fmt.Errorf("%w: entry version %d, want %d", ErrMalformed, w.V, want)
	}
	e := Entry{Kind: w.Kind, RequestID: w.RequestID, CanonicalRequestHash: w.CanonicalRequestHash,
		RequestSHA256: w.RequestSHA256, Gateway: w.Gateway, ManifestSHA256: w.ManifestSHA256,
		Outcome: w.Outcome, KeyID: w.KeyID, ApprovalID: w.ApprovalID, ApprovalSHA256: w.ApprovalSHA256,
		Decision: w.Decision, Approver: w.Approver, PeerOrigin: w.Origin, PeerSize: w.Size}
	if w.Root != "" {
		root, err := canonb64.Std(w.Root)
		if err != nil || len(root) != len(e.PeerRoot) {
			return Entry{}, fmt.Errorf("%w: entry root is not the base64 of a 32-byte hash", ErrMalformed)
		}
		e.PeerRoot = Hash(root)
	}
	for _, f := range []struct {
		name, text string
		t          *time.Time
	}{{"received_at", w.ReceivedAt, &e.ReceivedAt}, {"decided_at", w.DecidedAt, &e.DecidedAt}} {
		if f.text == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.text)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: entry %s: %w", ErrMalformed, f.name, err)
		}
		*f.t = t.UTC()
	}
	again, err := e.Marshal()
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if !bytes.Equal(again, data) {
		return Entry{}, fmt.Errorf("%w: entry is not in canonical form", ErrMalformed)
	}
	return e, nil
}

// LeafHash returns the RFC 6962 leaf hash of an entry's bytes,
// SHA-256(0x00 || entry): the hash the log's tree is built from.
func LeafHash(entry []byte) [32]byte {
	return [32]byte(rfc6962.DefaultHasher.HashLeaf(entry))
}

// validate checks every field Marshal writes and that no field of
// another kind is set.
func (e Entry) validate() error {
	if err := checkText("gateway", e.Gateway, MaxGatewayLen); err != nil {
		return err
	}
	if e.Kind == KindWitness {
		return e.validateWitness()
	}
	if e.hasWitnessField() {
		return fmt.Errorf("tlog: a %s entry has a field of a witness entry set", e.Kind)
	}
	if err := checkText("request_id", e.RequestID, MaxRequestIDLen); err != nil {
		return err
	}
	switch e.Kind {
	case KindClaim:
		return e.validateClaim()
	case KindCompletion:
		return e.validateCompletion()
	case KindApproval:
		return e.validateApproval()
	}
	return fmt.Errorf("tlog: entry kind %q is not %q, %q, %q or %q", e.Kind, KindClaim, KindCompletion, KindApproval, KindWitness)
}

// hasClaimField, hasCompletionField and hasApprovalField report whether a
// field of that kind is set.
func (e Entry) hasClaimField() bool {
	return e.CanonicalRequestHash != "" || e.RequestSHA256 != "" || !e.ReceivedAt.IsZero()
}

func (e Entry) hasCompletionField() bool {
	return e.ManifestSHA256 != "" || e.Outcome != "" || e.KeyID != ""
}

func (e Entry) hasApprovalField() bool {
	return e.ApprovalID != "" || e.ApprovalSHA256 != "" || e.Decision != "" || e.Approver != "" || !e.DecidedAt.IsZero()
}

func (e Entry) hasWitnessField() bool {
	return e.PeerOrigin != "" || e.PeerSize != 0 || e.PeerRoot != Hash{}
}

// validateWitness checks a witness entry: it names no request and carries
// no field of a request's kinds.
func (e Entry) validateWitness() error {
	if e.RequestID != "" || e.hasClaimField() || e.hasCompletionField() || e.hasApprovalField() {
		return fmt.Errorf("tlog: a witness entry has a field of a request's entry set")
	}
	if err := checkText("origin", e.PeerOrigin, MaxOriginLen); err != nil {
		return err
	}
	if err := ValidOrigin(e.PeerOrigin); err != nil {
		return err
	}
	if e.PeerSize == 0 {
		return errors.New("tlog: a witness entry's size is 0: an empty log has nothing to witness")
	}
	return nil
}

func (e Entry) validateClaim() error {
	if e.hasCompletionField() || e.hasApprovalField() {
		return fmt.Errorf("tlog: a claim entry has a field of another kind set")
	}
	hexPart, ok := strings.CutPrefix(e.CanonicalRequestHash, canonicalHashPrefix)
	if !ok || !isHexDigest(hexPart) {
		return fmt.Errorf("tlog: entry canonical_request_hash %q is not %q and 64 lowercase hex digits",
			e.CanonicalRequestHash, canonicalHashPrefix)
	}
	if !isHexDigest(e.RequestSHA256) {
		return fmt.Errorf("tlog: entry request_sha256 %q is not 64 lowercase hex digits", e.RequestSHA256)
	}
	return checkTime("received_at", e.ReceivedAt)
}

// checkTime checks a time an entry writes in RFC 3339, which has
// four-digit years only; the zero time is a forgotten field.
func checkTime(field string, t time.Time) error {
	if y := t.UTC().Year(); t.IsZero() || y < 1 || y > 9999 {
		return fmt.Errorf("tlog: entry %s %v is unset or outside years 1..9999", field, t)
	}
	return nil
}

func (e Entry) validateCompletion() error {
	if e.hasClaimField() || e.hasApprovalField() {
		return fmt.Errorf("tlog: a completion entry has a field of another kind set")
	}
	if !isHexDigest(e.ManifestSHA256) {
		return fmt.Errorf("tlog: entry manifest_sha256 %q is not 64 lowercase hex digits", e.ManifestSHA256)
	}
	switch e.Outcome {
	case "completed", "failed", "interrupted":
	default:
		return fmt.Errorf("tlog: entry outcome %q is not completed, failed or interrupted", e.Outcome)
	}
	if e.KeyID != "" && !isKeyID(e.KeyID) {
		return fmt.Errorf("tlog: entry key_id %q is not 1..%d bytes of [a-z0-9:._-]", e.KeyID, MaxKeyIDLen)
	}
	return nil
}

func (e Entry) validateApproval() error {
	if e.hasClaimField() || e.hasCompletionField() {
		return fmt.Errorf("tlog: an approval entry has a field of another kind set")
	}
	if !isApprovalID(e.ApprovalID) {
		return fmt.Errorf("tlog: entry approval_id %q is not \"apr_\" and 26 lowercase base32 characters", e.ApprovalID)
	}
	if !isHexDigest(e.ApprovalSHA256) {
		return fmt.Errorf("tlog: entry approval_sha256 %q is not 64 lowercase hex digits", e.ApprovalSHA256)
	}
	switch e.Decision {
	case "approve", "deny", "expired":
	default:
		return fmt.Errorf("tlog: entry decision %q is not approve, deny or expired", e.Decision)
	}
	if err := checkText("approver", e.Approver, MaxApproverLen); err != nil {
		return err
	}
	return checkTime("decided_at", e.DecidedAt)
}

// isApprovalID reports whether s has the form of an approval id. Which
// final characters a 16-byte encoding can end in is the evidence
// package's business; the log only keeps the id printable and bounded.
func isApprovalID(s string) bool {
	enc, ok := strings.CutPrefix(s, "apr_")
	if !ok || len(enc) != 26 {
		return false
	}
	for _, c := range []byte(enc) {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// checkText checks a free-text field: present, bounded, valid UTF-8 and
// free of control characters, so it reads the same in every tool.
func checkText(field, s string, maxLen int) error {
	switch {
	case s == "":
		return fmt.Errorf("tlog: entry %s is empty", field)
	case len(s) > maxLen:
		return fmt.Errorf("tlog: entry %s is %d bytes, more than %d", field, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("tlog: entry %s is not valid UTF-8", field)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("tlog: entry %s %q contains a control character", field, s)
	}
	return nil
}

// isHexDigest reports whether s is a SHA-256 digest in lowercase hex.
func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// isKeyID reports whether s looks like a key id ("ed25519:<hex>").
func isKeyID(s string) bool {
	if len(s) > MaxKeyIDLen {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && !strings.ContainsRune(":._-", rune(c)) {
			return false
		}
	}
	return true
}
