package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// DefaultApprovalTTL is how long an approval may be decided and used when
// approvals.ttl is 0.
const DefaultApprovalTTL = 24 * time.Hour

// maxApprovalTTL bounds approvals.ttl: a human's approval is for the call
// in front of them, not a standing grant.
const maxApprovalTTL = 30 * 24 * time.Hour

// ApprovalsConfig configures the calls policy holds back for a human's
// approval (permits marked @approval).
type ApprovalsConfig struct {
	// TTL is how long after it is asked for an approval may be decided and
	// used: a call not approved and run by then ends denied. 0 means 24h;
	// at most 720h.
	TTL time.Duration `yaml:"ttl"`
	// Webhook, if set, is told of every approval asked for and decided.
	Webhook *WebhookConfig `yaml:"webhook"`
}

// WebhookConfig is an HTTP endpoint notified of approvals: a POST of a JSON
// body signed with HMAC-SHA256 under Secret. Delivery is best effort and
// at least once; ListApprovals is the source of truth.
type WebhookConfig struct {
	// URL is https://…, or http:// to a loopback host only.
	URL string `yaml:"url"`
	// Secret keys the HMAC of every body.
	Secret SecretSource `yaml:"secret"`
	// Timeout bounds one delivery attempt. 0 means 5s; at most 60s.
	Timeout time.Duration `yaml:"timeout"`
	// Retries is how many times a failed delivery is tried again, with
	// backoff (1s, 2s, 4s … capped at 60s). 0 means 5; a negative value
	// means never; at most 20.
	Retries int `yaml:"retries"`
}

// Bounds of approvals.webhook: one worker sends every notification, so
// one that never succeeds must give way to the others.
const (
	maxWebhookTimeout = time.Minute
	maxWebhookRetries = 20
)

// EffectiveTTL returns the effective approval TTL.
func (c ApprovalsConfig) EffectiveTTL() time.Duration {
	if c.TTL == 0 {
		return DefaultApprovalTTL
	}
	return c.TTL
}

func (c ApprovalsConfig) validate() error {
	if c.TTL < 0 || c.TTL > maxApprovalTTL {
		return fmt.Errorf("config: approvals.ttl %v: must be between 0 (%v) and %v", c.TTL, DefaultApprovalTTL, maxApprovalTTL)
	}
	if c.Webhook == nil {
		return nil
	}
	w := c.Webhook
	u, err := url.Parse(w.URL)
	switch {
	case err != nil:
		return fmt.Errorf("config: approvals.webhook.url: %w", err)
	case u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("config: approvals.webhook.url %q: want https://host/path", w.URL)
	case u.Scheme == "http" && !isLoopbackHost(u.Hostname()):
		return fmt.Errorf("config: approvals.webhook.url %q: http:// only to a loopback host; the body names "+
			"the pending call, so use https://", w.URL)
	case u.User != nil:
		return errors.New("config: approvals.webhook.url: must not carry credentials; the body is signed with approvals.webhook.secret")
	}
	if (w.Secret.File == "") == (w.Secret.Env == "") {
		return errors.New("config: approvals.webhook.secret: give file or env (the HMAC key of every body)")
	}
	if w.Secret.Env != "" && !envNamePattern.MatchString(w.Secret.Env) {
		return fmt.Errorf("config: approvals.webhook.secret.env %q: not an environment variable name", w.Secret.Env)
	}
	if w.Timeout < 0 || w.Timeout > maxWebhookTimeout {
		return fmt.Errorf("config: approvals.webhook.timeout %v: must be between 0 (5s) and %v", w.Timeout, maxWebhookTimeout)
	}
	if w.Retries > maxWebhookRetries {
		return fmt.Errorf("config: approvals.webhook.retries %d: at most %d (0: 5, negative: never)", w.Retries, maxWebhookRetries)
	}
	return nil
}
