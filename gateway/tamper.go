package gateway

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/evidence/trust"
)

// setTrust builds the sealer of this gateway's records and the keyring it
// opens stored records with: its own keys, the public keys of the replicas
// it is told to trust, and the MAC key the replicas share, if any. With a
// shared MAC key the gateway MACs with it, so that every replica can open
// the others' MACed records; its own derived MAC key stays trusted for
// what it sealed before. Without a signer nothing is sealed or checked
// (evidence.signing_key: none gives up the untrusted-store guarantees, as
// docs/security/threat-model.md says).
func (g *Gateway) setTrust(replicas []ed25519.PublicKey, sharedMAC []byte) error {
	if g.signer == nil {
		if len(replicas) > 0 || len(sharedMAC) > 0 {
			return errors.New("gateway: trusted keys and a shared MAC key need a signer: without one nothing is checked")
		}
		return nil
	}
	own := g.signer.RecordMACKey()
	sealer, err := g.signer.Sealer()
	if len(sharedMAC) > 0 {
		sealer, err = g.signer.SealerWithMAC(sharedMAC)
	}
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	keys := append([]ed25519.PublicKey{sealer.PublicKey()}, replicas...)
	macs := [][]byte{own}
	if len(sharedMAC) > 0 {
		macs = append(macs, sharedMAC)
	}
	trusted, err := trust.NewKeyring(keys, macs...)
	if err != nil {
		return fmt.Errorf("gateway: trusted keys: %w", err)
	}
	g.sealer, g.trusted = sealer, trusted
	return nil
}

// tampered tells the operator of a record that failed authentication:
// an error log line naming the record and why, and one count of
// toolgate_evidence_tampering_total{record}. What the record would have
// made the gateway do is not done; the caller is told by its own path.
func (g *Gateway) tampered(log *slog.Logger, record, requestID string, err error) {
	if log == nil {
		log = g.log
	}
	log.Error("evidence tampering: a stored record failed authentication and was not acted on",
		"record", record, "request_id", requestID, "err", err)
	g.telemetry.Tampering(record)
}

// sealRecord seals data, a record stored under key (see package trust):
// with a signature when the record lets any replica run something, so that
// each can check it, else with the cheaper MAC only this gateway (and one
// holding its key) checks. Without a sealer data is returned as it is.
func (g *Gateway) sealRecord(key string, data []byte, signed bool) ([]byte, error) {
	switch {
	case g.sealer == nil:
		return data, nil
	case signed:
		return g.sealer.Sign(key, data)
	}
	return g.sealer.MAC(key, data)
}

// errForeignRecord is returned by openOwn for a record sealed with a MAC
// key this gateway does not hold: another replica's, which it can neither
// vouch for nor act on, and leaves to that replica.
var errForeignRecord = errors.New("sealed by another replica's key")

// openOwn checks the seal of a record the gateway is about to act on as
// its own (recovery finalising a claim, a retry closing an abandoned
// attempt) and returns it without the seal. It returns errForeignRecord
// for another replica's record, and an error wrapping trust.ErrTampered
// for one no trusted gateway wrote.
func (g *Gateway) openOwn(key string, raw []byte) ([]byte, error) {
	if g.trusted == nil {
		return raw, nil
	}
	body, seal, err := g.trusted.Open(key, raw)
	if errors.Is(err, trust.ErrUntrustedKey) && seal.Algorithm == trust.AlgHMAC {
		return nil, errForeignRecord
	}
	return body, err
}

// readAttempts reads the attempts of request id, whose keys are keys, to
// act on them: a record closing an attempt not dispatched must be signed
// by a trusted gateway (evidence.ReadAttemptsTrusted).
func (g *Gateway) readAttempts(ctx context.Context, id string, keys []string) ([]evidence.Attempt, error) {
	if g.trusted == nil {
		return evidence.ReadAttempts(ctx, g.store, id, keys)
	}
	return evidence.ReadAttemptsTrusted(ctx, g.store, id, keys, g.trusted)
}

// errAwaitingManifest is returned by checkUnmanifested for another
// replica's response whose manifest is not written yet.
var errAwaitingManifest = errors.New("the response awaits its manifest")

// checkUnmanifested checks a response stored without a manifest (its
// gateway stopped between the two writes) before it is replayed or rolled
// forward: only its seal vouches for it. Without one it is tampering,
// which the caller counts.
func (g *Gateway) checkUnmanifested(requestID string, body []byte) error {
	_, err := g.openOwn(evidence.Key(requestID, evidence.ArtifactResponse), body)
	switch {
	case errors.Is(err, errForeignRecord):
		return errAwaitingManifest
	case err != nil:
		return fmt.Errorf("the stored response of %s, which has no manifest, failed authentication (evidence tampering); "+
			"it is not replayed: %w", requestID, err)
	}
	return nil
}
