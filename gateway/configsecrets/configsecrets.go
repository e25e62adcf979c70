// Package configsecrets reads the secrets the configuration names besides
// the manifest signing key, as a gateway's start reads them. It never
// imports gateway.
package configsecrets

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/gateway/callerauth"
)

// Check reads the secrets the configuration names besides the
// signing key (API keys held in environment variables, the approval
// webhook's secret, the redaction fingerprint key, the replicas' shared
// MAC key), and the replicas' public keys, exactly as gateway.Build reads
// them, keeps none of them, and reports every one Build would refuse, so
// that a configuration check and `serve` agree.
func Check(c config.Config, getenv func(string) string) error {
	var errs []error
	if _, err := callerauth.New(c.Auth.Keys, getenv); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	if _, err := WebhookSecret(c.Approvals.Webhook, getenv); err != nil {
		errs = append(errs, err)
	}
	if c.Redact.FingerprintKey != nil {
		if _, err := FingerprintKey(c.Redact.FingerprintKey, nil, getenv); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := c.TrustedPublicKeys(getenv); err != nil {
		errs = append(errs, err)
	}
	if _, err := config.ReadSharedMACKey(c.Evidence.SharedMACKey, getenv); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WebhookSecret reads approvals.webhook.secret, without the line end a
// secret file usually has; nil when no webhook is configured. A webhook
// without its key cannot sign, so a missing or short one stops the start.
func WebhookSecret(wh *config.WebhookConfig, getenv func(string) string) ([]byte, error) {
	if wh == nil {
		return nil, nil
	}
	secret, err := wh.Secret.Read(getenv)
	if err != nil {
		return nil, fmt.Errorf("config: approvals.webhook.secret: %w", err)
	}
	secret = bytes.TrimRight(secret, "\r\n")
	if len(secret) < minWebhookSecretLen {
		return nil, fmt.Errorf("config: approvals.webhook.secret: shorter than %d bytes", minWebhookSecretLen)
	}
	return secret, nil
}

// minWebhookSecretLen is the shortest HMAC key accepted for the webhook.
const minWebhookSecretLen = 16

// FingerprintKey returns the key of redaction fingerprints: the
// configured one, else one derived from the manifest signing key (so that
// fingerprints compare across restarts without another secret to manage),
// else a random one.
func FingerprintKey(src *config.SecretSource, signer *evidence.Signer, getenv func(string) string) ([]byte, error) {
	switch {
	case src != nil:
		key, err := src.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("config: redact.fingerprint_key: %w", err)
		}
		if len(key) < 16 {
			return nil, errors.New("config: redact.fingerprint_key: shorter than 16 bytes")
		}
		return key, nil
	case signer != nil:
		return signer.DeriveKey("toolgate redaction fingerprint v1"), nil
	default:
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("redact: fingerprint key: %w", err)
		}
		return key, nil
	}
}
