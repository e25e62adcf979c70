package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/toolgate/toolgate/evidence/tlog"
)

// Manifests a log vouches for. A completion entry commits to the SHA-256
// of the manifest.json bytes a gateway stored, and the gateway logs only
// manifests it signed itself or, catching up, whose signature it checked
// (catchUpRequest.authentic). When VerifyAll has re-derived a log to the
// root of a checkpoint signed by a trusted key, an entry of that log is
// as authentic as the checkpoint's one signature: a manifest whose exact
// bytes such an entry commits to, and whose signature names the same key
// as the checkpoint's, was vouched for by that key. Its own Ed25519
// signature, which costs as much as reading and checking the rest of the
// request, is then not checked a second time; it is checked, as before,
// for every manifest no such entry matches byte for byte (one altered,
// unlogged, logged by a log that does not verify, or signed by another
// key than the log's).
//
// VerifyAll verifies requests beside each other and joins them with the
// logs afterwards, in order, so the check waits for the join: verify
// notes it (pendingSignature), and report settles it with the request's
// log records before the logs are judged.

// pendingSignature is a manifest signature left for the join to settle.
type pendingSignature struct {
	m      Manifest
	key    string // the manifest's key
	digest string // hex SHA-256 of the manifest bytes verified
	// at is where in VerifyReport.Problems a problem with the signature
	// goes: where checkSignature would have put it.
	at int
}

// attest notes a log whose newest checkpoint, signed by trusted key
// keyID, its entries re-derive: its completions vouch for manifests.
func (v *verifier) attest(origin, keyID string) {
	if v.attested == nil {
		v.attested = map[string]string{}
	}
	v.attested[origin] = keyID
}

// deferSignature leaves the check of m's signature, made by a trusted key
// that also signs a verified log's checkpoints, to settleSignature, and
// reports whether it did. data are the manifest bytes verified.
func (r *requestCopies) deferSignature(m Manifest, data []byte, rep *VerifyReport) bool {
	v := r.v
	if m.Signature == nil || len(v.attested) == 0 {
		return false
	}
	id := m.Signature.KeyID
	if _, trusted := v.trusted[id]; !trusted {
		return false
	}
	found := false
	for _, k := range v.attested {
		found = found || k == id
	}
	if !found {
		return false
	}
	sum := sha256.Sum256(data)
	r.pendingSig = &pendingSignature{m: m, key: Key(m.RequestID, ArtifactManifest), digest: hex.EncodeToString(sum[:]), at: len(rep.Problems)}
	rep.KeyID = id
	return true
}

// settleSignature settles the signature deferSignature left, with recs,
// what the logs record of the request: valid when a completion of a
// verified log signed by the manifest's key commits to the manifest's
// bytes, else as checkSignature finds it.
func (v *verifier) settleSignature(rep *VerifyReport, r *requestCopies, recs []logRecord) {
	ps := r.pendingSig
	if ps == nil {
		return
	}
	r.pendingSig = nil
	for _, rec := range recs {
		if rec.kind == tlog.KindCompletion && rec.digest == ps.digest && v.attested[rec.origin] == ps.m.Signature.KeyID {
			rep.Signature = SignatureValid
			return
		}
	}
	var checked VerifyReport
	v.checkSignature(ps.m, ps.key, &checked)
	rep.Signature = checked.Signature
	rep.Problems = slices.Insert(rep.Problems, ps.at, checked.Problems...)
}
