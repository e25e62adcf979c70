package gateway

import (
	"crypto/ed25519"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/evidence/trust"
)

// setTrust builds the sealer of this gateway's records and the keyring it
// opens stored records with: its own keys, and the public keys of the
// replicas it is told to trust. Without a signer nothing is sealed or
// checked (evidence.signing_key: none gives up the untrusted-store
// guarantees, as the README says).
func (g *Gateway) setTrust(replicas []ed25519.PublicKey) error {
	if g.signer == nil {
		return nil
	}
	sealer, err := g.signer.Sealer()
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	keys := append([]ed25519.PublicKey{sealer.PublicKey()}, replicas...)
	trusted, err := trust.NewKeyring(keys, sealer.MACKey())
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
