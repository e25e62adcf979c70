package gateway

import (
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/callerauth"
)

// CheckSecrets reads the secrets the configuration names besides the
// signing key (API keys held in environment variables, the approval
// webhook's secret, the redaction fingerprint key, the replicas' shared
// MAC key), and the replicas' public keys, exactly as Build reads them, keeps none of them, and reports every one Build would refuse, so
// that a configuration check and `serve` agree.
func CheckSecrets(c config.Config, getenv func(string) string) error {
	var errs []error
	if _, err := callerauth.New(c.Auth.Keys, getenv); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	if _, err := readWebhookSecret(c.Approvals.Webhook, getenv); err != nil {
		errs = append(errs, err)
	}
	if c.Redact.FingerprintKey != nil {
		if _, err := redactFingerprintKey(c.Redact.FingerprintKey, nil, getenv); err != nil {
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
