package gateway

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/evidence/trust"
)

// setTrust builds the sealer of this gateway's records and the keyring it
// opens stored records with: its own keys, the public keys of the replicas
// it is told to trust, and the MAC key the replicas share, if any. With a
// shared MAC key the gateway MACs with it, so that every replica can open
// the others' MACed records; its own derived MAC key stays trusted for
// what it sealed before. Without a signer nothing is sealed or checked
// (evidence.signing_key: none gives up the untrusted-store guarantees, as
// the README says).
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
