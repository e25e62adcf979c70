package mcpdoor

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/toolgate/toolgate/gateway/frontdoor"
	"github.com/toolgate/toolgate/gateway/frontdoor/oauth"
)

// Name is the door's name: its key under front_doors and the front_door
// recorded in request.json.
const Name = "mcp"

// Path is where the door serves MCP's Streamable HTTP transport. It is
// fixed, so that every client configuration reads ".../mcp".
const Path = "/mcp"

// Defaults of the section, in one place.
const (
	// DefaultMaxBodyBytes is max_body_bytes when unset: the most any door
	// takes, the arguments' limit plus an envelope for the JSON-RPC
	// fields and _meta.
	DefaultMaxBodyBytes = frontdoor.DefaultMaxBodyBytes
	// DefaultListTTL is list_ttl when unset: the default policy reload
	// interval, so that a client's cached list is no staler than policy.
	DefaultListTTL = 2 * time.Second
	// DefaultStateTTL is how long a sealed approval requestState stays
	// valid; a retry after it must call again.
	DefaultStateTTL = 15 * time.Minute
	// MaxListensPerCaller caps the subscriptions/listen streams one caller
	// holds open on one replica: each holds a connection of the gateway's
	// limit.
	MaxListensPerCaller = 4
)

// policyRefPattern is the form of a policy set's name (policy.<name>).
var policyRefPattern = regexp.MustCompile(`^policy\.[A-Za-z0-9._-]{1,120}$`)

func init() {
	frontdoor.Register(frontdoor.Kind{Name: Name, New: func() frontdoor.Config { return newConfig() }})
}

// Config is the section front_doors.mcp. Its defaults are those of
// newConfig.
type Config struct {
	// Listener holds listen (unset: the door is off), cors_origins and
	// max_body_bytes (default and most 1 MiB + 64 KiB), with the rules every door shares.
	frontdoor.Listener `yaml:",inline"`
	// PolicyRef is the policy set tools/list and tools/call are decided
	// by (default "": policy.default). A caller may name another set it
	// is allowed to select with _meta "io.github.toolgate/policyRef".
	PolicyRef string `yaml:"policy_ref"`
	// ListTTL is the ttlMs of tools/list results (their cacheScope is
	// always "private": lists differ per caller). Default 2s.
	ListTTL time.Duration `yaml:"list_ttl"`
	// StateKeyFile holds the 32-byte HMAC key that seals the requestState
	// of approval-required results; created (mode 0600) when missing.
	// Replicas behind one URL share it. Unset: a random key per process,
	// so a restart only costs a client a fresh call.
	StateKeyFile string `yaml:"state_key_file" secret:"file"`
	// ApprovalURL, when set, is the page an approver decides on, with
	// {approval_id} substituted; clients that take only URL-mode
	// elicitation are pointed at it.
	ApprovalURL string `yaml:"approval_url"`
	// ApprovalTools also serves the tools toolgate.approvals.list and
	// toolgate.approvals.decide (default false). Cedar decides who may
	// approve, as over gRPC.
	ApprovalTools bool `yaml:"approval_tools"`
	// OAuth, when set, also accepts OAuth 2.1 access tokens (JWTs of one
	// issuer for this resource) beside the API keys of auth.keys, and
	// serves the protected-resource metadata; see package oauth.
	OAuth *oauth.Config `yaml:"oauth"`
}

// newConfig returns the section with its defaults, for YAML to fill.
func newConfig() *Config {
	return &Config{
		Listener: frontdoor.Listener{MaxBodyBytes: DefaultMaxBodyBytes},
		ListTTL:  DefaultListTTL,
	}
}

// Validate checks the section; errors start with the key they name.
func (c *Config) Validate() error {
	if err := c.Listener.Validate(); err != nil {
		return err
	}
	if c.PolicyRef != "" && !policyRefPattern.MatchString(c.PolicyRef) {
		return fmt.Errorf("policy_ref %q: must match %s", c.PolicyRef, policyRefPattern)
	}
	if c.ListTTL < 0 {
		return errors.New("list_ttl: must not be negative (0: clients refetch every time)")
	}
	if c.ListTTL%time.Millisecond != 0 {
		return fmt.Errorf("list_ttl %s: must be whole milliseconds (it is sent as ttlMs)", c.ListTTL)
	}
	if c.StateKeyFile != "" && strings.ContainsRune(c.StateKeyFile, 0) {
		return errors.New("state_key_file: not a file name")
	}
	if err := c.validateOAuth(); err != nil {
		return err
	}
	if c.ApprovalURL != "" {
		u, err := url.Parse(strings.ReplaceAll(c.ApprovalURL, "{approval_id}", "x"))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("approval_url %q: want an http(s) URL, {approval_id} substituted", c.ApprovalURL)
		}
		if !strings.Contains(c.ApprovalURL, "{approval_id}") {
			return fmt.Errorf("approval_url %q: must contain {approval_id}", c.ApprovalURL)
		}
	}
	return nil
}

// Open makes the door for d.Gateway.
func (c *Config) Open(d frontdoor.Deps) (frontdoor.Door, error) {
	if d.Gateway == nil {
		return nil, errors.New("mcpdoor: Open: no gateway")
	}
	return New(d.Gateway, *c, d.Logger)
}
